"""Throughput benchmark: our engine vs transformers, same checkpoint, same requests, one run.

    python -m benchmarks.engine [--num-requests 128] [--seed 0] [--quick] [--only SYSTEMS] [--threads N]
    python -m benchmarks.engine --speculative [--quick] [--seed 0] [--threads N]   (see benchmarks/speculative.py)

SYSTEMS (comma separated; default all): engine, hf-static, hf-batch, engine-batch1, hf-batch1 (batch1 = both).

- engine: `tiers.Engine.generate` over every request at once (continuous batching, paged KV cache).
- hf-static: transformers `generate` in static batches of 16, left padded, greedy; each batch runs to its longest
  output, but only each request's own output length counts as useful output.
- hf-batch: transformers' own continuous batching (the manager behind `generate_batch`, fed each request with its
  own max_new_tokens, since `generate_batch` takes one max_new_tokens for all), with the engine's KV budget.
- engine-batch1 / hf-batch1: one 128-token prompt, 256 new tokens: decode tokens/s, and the memory-bandwidth
  utilisation (bytes a decode step must read / step time, against a copy bandwidth measured in the same run).

The workload: random token ids in [10, vocab), prompt lengths uniform in 32-512, output lengths uniform in
16-256, ignore_eos (every request generates exactly its output length). Every system is warmed up once before
it is timed; start-up (loading, KV allocation) is not timed. The checkpoint: a random ~30M-parameter Llama in
float32, built offline into .bench/llama-30m on first use.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from benchmarks.hf_baselines import (ENGINE_BATCHED_TOKENS, STATIC_BATCH, hf_greedy, load_hf,  # noqa: E402
                                     run_hf_continuous, run_hf_static)
from benchmarks.machine import warn_if_busy

DEFAULT_CHECKPOINT = Path(".bench/llama-30m")
CHECKPOINT_SIZES = dict(vocab_size=8192, hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4,
                        intermediate_size=1408, max_position_embeddings=2048)
SYSTEMS = ("engine", "hf-static", "hf-batch", "engine-batch1", "hf-batch1")
ALIASES = {"batch1": ("engine-batch1", "hf-batch1"), "all": SYSTEMS}
ENGINE_ARGS = dict(device="cpu", dtype=None, block_size=16, kv_cache_bytes=None, max_num_seqs=256,
                   max_model_len=None)
CHECK_TOKENS = 32  # the engine's greedy tokens are compared with transformers' over this many tokens
ENGINE_NAME = "aio engine"


@dataclass
class Result:
    system: str
    output_tokens: int
    seconds: float
    note: str = ""

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds


@dataclass
class Checkpoint:
    path: Path
    config: dict[str, Any]
    num_params: int
    param_bytes: int

    @property
    def vocab_size(self) -> int:
        return self.config["vocab_size"]

    @property
    def kv_bytes_per_token(self) -> int:
        c = self.config
        head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        kv_heads = c.get("num_key_value_heads") or c["num_attention_heads"]
        return 2 * c["num_hidden_layers"] * kv_heads * head_dim * 4  # K and V, float32

    @property
    def bytes_read_per_decode_step_without_kv(self) -> int:
        """All weights once, except that a step reads one row of an untied embedding table (a tied one is read
        whole by the LM head)."""
        c = self.config
        if c.get("tie_word_embeddings"):
            return self.param_bytes
        return self.param_bytes - (c["vocab_size"] - 1) * c["hidden_size"] * 4


def ensure_checkpoint(path: Path) -> Checkpoint:
    from safetensors import safe_open

    if not (path / "config.json").is_file():
        from tiers.checkpoints import create_random_checkpoint

        print(f"creating a random ~30M-parameter Llama in {path} ...")
        create_random_checkpoint(path, "llama", **CHECKPOINT_SIZES)
    num_params = num_bytes = 0
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                tensor = f.get_slice(name)
                numel = 1
                for dim in tensor.get_shape():
                    numel *= dim
                num_params += numel
                num_bytes += numel * {"F32": 4, "F16": 2, "BF16": 2}.get(tensor.get_dtype(), 4)
    return Checkpoint(path, json.loads((path / "config.json").read_text()), num_params, num_bytes)


def make_workload(num: int, seed: int, vocab: int, prompt_range: tuple[int, int],
                  output_range: tuple[int, int]) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(10, vocab) for _ in range(rng.randint(*prompt_range))], rng.randint(*output_range))
            for _ in range(num)]


def load_engine(path: Path):
    from tiers import Engine

    return Engine.from_pretrained(path, **ENGINE_ARGS)


# ------------------------------------------------------------------------------------------------ the systems


def run_engine(engine, workload) -> tuple[float, list[list[int]]]:
    from tiers import SamplingParams

    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for _, n in workload]
    start = time.perf_counter()
    outs = engine.generate([p for p, _ in workload], params)
    seconds = time.perf_counter() - start
    got = [len(o.token_ids) for o in outs]
    if got != [n for _, n in workload]:
        raise RuntimeError(f"the engine generated {sum(got)} tokens, not the {sum(n for _, n in workload)} asked")
    return seconds, [list(o.token_ids) for o in outs]


# ------------------------------------------------------------------------------------------------ batch-1 decode


def copy_bandwidth(num_bytes: int = 256 << 20, repeats: int = 7, device: str = "cpu") -> float:
    """Bytes per second of a large tensor copy on `device` (device to device on a GPU), counting read + write,
    best of `repeats`."""
    src = torch.ones(num_bytes // 4, device=device)
    dst = torch.zeros_like(src)
    sync = torch.cuda.synchronize if src.is_cuda else (lambda: None)
    dst.copy_(src)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        dst.copy_(src)
        sync()
        best = min(best, time.perf_counter() - start)
    return 2 * num_bytes / best


def batch1(systems: dict[str, Callable[[int], Any]], prompt_len: int, new_tokens: int, repeats: int = 3,
           warmup: tuple[int, ...] = (8,)) -> dict[str, float]:
    """Decode tokens/s of each system: (new_tokens - 1) / (time(new_tokens) - time(1)), so the prefill cancels
    out. Interleaved, best of `repeats` (the cores are shared with everything else on the machine). Each system
    first runs once per length in `warmup` (e.g. the longest first, for a cache sized by its first call)."""
    def timed(fn, n):
        start = time.perf_counter()
        fn(n)
        return time.perf_counter() - start

    for fn in systems.values():
        for n in warmup:
            fn(n)
    best = {(name, n): float("inf") for name in systems for n in (1, new_tokens)}
    for _ in range(repeats):
        for name, fn in systems.items():
            for n in (1, new_tokens):
                best[name, n] = min(best[name, n], timed(fn, n))
    return {name: (new_tokens - 1) / (best[name, new_tokens] - best[name, 1]) for name in systems}


# ------------------------------------------------------------------------------------------------ main


def parse_systems(only: str) -> list[str]:
    chosen: list[str] = []
    for name in filter(None, (s.strip() for s in only.split(","))):
        names = ALIASES.get(name, (name,))
        for n in names:
            if n not in SYSTEMS:
                raise SystemExit(f"unknown system {name!r}; choose from {', '.join(SYSTEMS + tuple(ALIASES))}")
            if n not in chosen:
                chosen.append(n)
    return chosen


def compare(label: str, workload, tokens: list[list[int]], reference: dict[int, list[int]]) -> None:
    for i, ref in reference.items():
        got = tokens[i][:len(ref)]
        if got != ref:
            at = next(k for k, (a, b) in enumerate(zip(got, ref)) if a != b)
            print(f"WARNING: {label}: request {i} differs from transformers' greedy tokens at output token {at}")
            return
    if reference:
        print(f"{label}: greedy tokens of requests {sorted(reference)} equal transformers' "
              f"(first {CHECK_TOKENS} tokens each)")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--num-requests", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 16 requests, prompts 32-128, outputs 8-32, batch-1 with 64 new tokens")
    parser.add_argument("--only", default="all", help=f"comma separated: {', '.join(SYSTEMS)}, batch1, all")
    parser.add_argument("--speculative", action="store_true",
                        help="the speculative-decoding benchmark instead (benchmarks/speculative.py)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    systems = parse_systems(args.only)

    warn_if_busy()
    if args.speculative:
        from benchmarks.speculative import run

        return run(quick=args.quick, seed=args.seed)
    checkpoint = ensure_checkpoint(args.checkpoint)
    vocab = checkpoint.vocab_size
    if args.quick:
        workload = make_workload(16, args.seed, vocab, (32, 128), (8, 32))
        b1_prompt, b1_new = 128, 64
    else:
        workload = make_workload(args.num_requests, args.seed, vocab, (32, 512), (16, 256))
        b1_prompt, b1_new = 128, 256
    useful = sum(n for _, n in workload)
    print(f"checkpoint {checkpoint.path}: {checkpoint.num_params:,} parameters ({checkpoint.num_params / 1e6:.1f}M), "
          f"float32, CPU, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"workload: {len(workload)} requests (seed {args.seed}), {sum(len(p) for p, _ in workload):,} prompt tokens, "
          f"{useful:,} output tokens (ignore_eos; prompt lengths {min(len(p) for p, _ in workload)}-"
          f"{max(len(p) for p, _ in workload)}, outputs {min(n for _, n in workload)}-{max(n for _, n in workload)})")
    warm = make_workload(4, args.seed + 99, vocab, (16, 48), (4, 8))

    engine = None
    if {"engine", "engine-batch1"} & set(systems):
        try:
            engine = load_engine(checkpoint.path)
        except Exception as exc:  # the engine may not exist yet: report, keep going
            print(f"our engine could not be loaded: {type(exc).__name__}: {exc}")
    model = load_hf(checkpoint.path)
    reference = {i: hf_greedy(model, workload[i][0], min(CHECK_TOKENS, workload[i][1]))
                 for i in range(min(2, len(workload)))} if {"engine", "hf-batch"} & set(systems) else {}

    results: list[Result] = []
    summary: dict[str, Any] = {"params_m": round(checkpoint.num_params / 1e6, 1), "requests": len(workload),
                               "output_tokens": useful, "threads": torch.get_num_threads(), "quick": args.quick}
    if "engine" in systems and engine is not None:
        run_engine(engine, warm)
        seconds, tokens = run_engine(engine, workload)
        stats = engine.stats() if hasattr(engine, "stats") else None
        note = f"{stats.num_preemptions} preemptions" if hasattr(stats, "num_preemptions") else ""
        results.append(Result(ENGINE_NAME, useful, seconds, note))
        compare(ENGINE_NAME, workload, tokens, reference)
    if "hf-static" in systems:
        run_hf_static(model, warm)
        seconds, generated = run_hf_static(model, workload)
        results.append(Result(f"transformers generate, static batches of {STATIC_BATCH}", useful, seconds,
                              f"counts only each request's own output; {generated:,} tokens generated in all"))
    if "hf-batch" in systems:
        try:
            run_hf_continuous(model, checkpoint.kv_bytes_per_token, warm)
            seconds, tokens = run_hf_continuous(model, checkpoint.kv_bytes_per_token, workload)
            results.append(Result("transformers generate_batch (continuous)", useful, seconds,
                                  f"KV budget and {ENGINE_BATCHED_TOKENS}-token batches as the engine's"))
            compare("transformers generate_batch", workload, tokens, reference)
        except Exception as exc:  # report why, keep going
            reason = f"{type(exc).__name__}: {exc}"
            print(f"transformers generate_batch could not run here: {reason}")
            summary["hf_batch_error"] = reason

    base = next((r for r in results if r.system == ENGINE_NAME), None)
    if results:
        print(f"\n{'system':<44} {'out tokens':>10} {'seconds':>8} {'tok/s':>8} {'engine/this':>11}")
        for r in results:
            ratio = base.tokens_per_s / r.tokens_per_s if base else None
            shown = f"{ratio:>10.2f}x" if ratio is not None else f"{'-':>11}"
            print(f"{r.system:<44} {r.output_tokens:>10,} {r.seconds:>8.2f} {r.tokens_per_s:>8.1f} {shown}"
                  + (f"  ({r.note})" if r.note else ""))
            summary[r.system] = {"seconds": round(r.seconds, 2), "tok_s": round(r.tokens_per_s, 1),
                                 "engine_ratio": None if ratio is None else round(ratio, 2)}

    decoders: dict[str, Callable[[int], Any]] = {}
    prompt = make_workload(1, 7, vocab, (b1_prompt, b1_prompt), (1, 1))[0][0]
    if "engine-batch1" in systems and engine is not None:
        from tiers import SamplingParams

        decoders[ENGINE_NAME] = lambda n: engine.generate(
            [prompt], SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
    if "hf-batch1" in systems:
        decoders["transformers generate"] = lambda n: hf_greedy(model, prompt, n)
    if decoders:
        rates = batch1(decoders, b1_prompt, b1_new)
        bandwidth = copy_bandwidth()
        mean_context = b1_prompt + b1_new / 2
        step_bytes = checkpoint.bytes_read_per_decode_step_without_kv + checkpoint.kv_bytes_per_token * mean_context
        print(f"\nbatch-1 decode: prompt {b1_prompt} tokens, {b1_new} new tokens; a step reads "
              f"{step_bytes / 1e6:.1f} MB (weights once, one embedding row, KV at the mean context of "
              f"{mean_context:.0f}); copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write, 256 MB, best of 7)")
        print(f"{'system':<44} {'tok/s':>8} {'ms/step':>8} {'GB/s':>7} {'of copy':>8} {'engine/this':>11}")
        summary["batch1"] = {"prompt": b1_prompt, "new_tokens": b1_new, "bytes_per_step": int(step_bytes),
                             "copy_gb_s": round(bandwidth / 1e9, 2)}
        for name, rate in rates.items():
            ratio = rates[ENGINE_NAME] / rate if ENGINE_NAME in rates else None
            shown = f"{ratio:>10.2f}x" if ratio is not None else f"{'-':>11}"
            print(f"{name:<44} {rate:>8.1f} {1e3 / rate:>8.2f} {step_bytes * rate / 1e9:>7.2f} "
                  f"{step_bytes * rate / bandwidth:>8.1%} {shown}")
            summary["batch1"][name] = {"tok_s": round(rate, 1), "bandwidth_utilisation": round(
                step_bytes * rate / bandwidth, 3), "engine_ratio": None if ratio is None else round(ratio, 2)}
    print("\nJSON " + json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
