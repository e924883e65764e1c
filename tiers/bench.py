"""Throughput benchmark: this engine vs transformers, same checkpoint, same requests, one run.

    python -m tiers.bench [--num-requests 128] [--quick] [--only engine,hf-static,hf-batch,batch1]

Systems: our Engine; transformers `generate` in static batches of 16 (left padded, each batch runs to its longest
output, only each request's own output counts); transformers' continuous batching (`generate_batch`'s manager,
per-request max_new_tokens); and batch-1 decode with its memory-bandwidth utilisation.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_CHECKPOINT = Path(".bench/llama-30m")
STATIC_BATCH = 16


@dataclass
class Result:
    system: str
    output_tokens: int
    seconds: float
    note: str = ""

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds


def ensure_checkpoint(path: Path) -> Path:
    if not (path / "config.json").is_file():
        from tiers.checkpoints import create_random_checkpoint

        print(f"creating a random ~30M-parameter Llama in {path} ...")
        create_random_checkpoint(path, "llama", vocab_size=8192, hidden_size=512, num_layers=8, num_heads=8,
                                 num_kv_heads=4, intermediate_size=1408, max_position_embeddings=2048)
    return path


def make_workload(num: int, seed: int, vocab: int, prompt_range: tuple[int, int],
                  output_range: tuple[int, int]) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(10, vocab) for _ in range(rng.randint(*prompt_range))], rng.randint(*output_range))
            for _ in range(num)]


def load_hf(path: Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def run_engine(engine, workload) -> tuple[float, list[list[int]]]:
    from tiers import SamplingParams

    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for _, n in workload]
    start = time.perf_counter()
    outs = engine.generate([p for p, _ in workload], params)
    seconds = time.perf_counter() - start
    assert [len(o.token_ids) for o in outs] == [n for _, n in workload]
    return seconds, [o.token_ids for o in outs]


@torch.inference_mode()
def run_hf_static(model, workload) -> float:
    start = time.perf_counter()
    for i in range(0, len(workload), STATIC_BATCH):
        batch = workload[i:i + STATIC_BATCH]
        width = max(len(p) for p, _ in batch)
        ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in batch])
        model.generate(ids, attention_mask=mask, max_new_tokens=max(n for _, n in batch), do_sample=False,
                       eos_token_id=None, pad_token_id=0)
    return time.perf_counter() - start


def run_hf_continuous(model, workload) -> float:
    """transformers' own continuous batching, fed every request with its own max_new_tokens."""
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=0, max_new_tokens=max(n for _, n in workload))
    with model.continuous_batching_context_manager(generation_config=config, block=True, timeout=5) as manager:
        start = time.perf_counter()  # its start-up (cache sizing and allocation) is not counted
        ids = [manager.add_request(p, max_new_tokens=n) for p, n in workload]
        pending = set(ids)
        while pending:
            result = manager.get_result(timeout=1)
            if result is None:
                if not manager.is_running():
                    raise RuntimeError("transformers' continuous batching thread stopped")
                continue
            if result.is_finished():
                pending.discard(result.request_id)
                if len(result.generated_tokens) != dict(zip(ids, (n for _, n in workload)))[result.request_id]:
                    raise RuntimeError("generate_batch produced a different number of tokens than asked")
        return time.perf_counter() - start


def copy_bandwidth(num_bytes: int = 256 << 20, repeats: int = 5) -> float:
    src = torch.ones(num_bytes // 4)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * num_bytes / best  # read + write


def batch1(engine, model, vocab: int, prompt_len: int, new_tokens: int) -> dict:
    from tiers import SamplingParams

    prompt = make_workload(1, 7, vocab, (prompt_len, prompt_len), (1, 1))[0][0]
    params = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    # Decode rate = (new_tokens - 1) / (time(new_tokens) - time(1)): the prefill cancels out.
    def timed(fn, n):
        start = time.perf_counter()
        fn(n)
        return time.perf_counter() - start

    def ours(n):
        engine.generate([prompt], SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))

    def theirs(n):
        with torch.inference_mode():
            model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           eos_token_id=None, pad_token_id=0)

    ours(8), theirs(8)
    systems = (("engine", ours), ("transformers", theirs))
    best = {(name, n): float("inf") for name, _ in systems for n in (1, new_tokens)}
    for _ in range(3):  # interleaved, best of three: the two cores also serve everything else on the machine
        for name, fn in systems:
            for n in (1, new_tokens):
                best[name, n] = min(best[name, n], timed(fn, n))
    rates = {name: (new_tokens - 1) / (best[name, new_tokens] - best[name, 1]) for name, _ in systems}
    c = engine.model_config
    param_bytes = sum(p.numel() * p.element_size() for p in engine.runner.model.parameters())
    param_bytes -= c.vocab_size * c.hidden_size * 4 if not c.tie_word_embeddings else 0  # one embedding row read
    kv_per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4
    mean_context = prompt_len + new_tokens / 2
    bytes_per_step = param_bytes + kv_per_token * mean_context
    bandwidth = copy_bandwidth()
    return {
        "engine_decode_tok_s": rates["engine"], "transformers_decode_tok_s": rates["transformers"],
        "ratio": rates["engine"] / rates["transformers"], "bytes_per_step": bytes_per_step,
        "copy_bandwidth_gb_s": bandwidth / 1e9,
        "engine_bandwidth_utilization": bytes_per_step * rates["engine"] / bandwidth,
        "transformers_bandwidth_utilization": bytes_per_step * rates["transformers"] / bandwidth,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--num-requests", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="16 short requests: a smoke run")
    parser.add_argument("--only", default="engine,hf-static,hf-batch,batch1")
    args = parser.parse_args(argv)
    systems = set(args.only.split(","))
    from tiers import Engine

    path = ensure_checkpoint(args.checkpoint)
    engine = Engine.from_pretrained(path)
    vocab = engine.model_config.vocab_size
    n_params = sum(p.numel() for p in engine.runner.model.parameters())
    if args.quick:
        workload = make_workload(16, args.seed, vocab, (32, 128), (8, 32))
    else:
        workload = make_workload(args.num_requests, args.seed, vocab, (32, 512), (16, 256))
    useful = sum(n for _, n in workload)
    print(f"checkpoint {path}: {n_params / 1e6:.1f}M parameters, float32, {torch.get_num_threads()} threads")
    print(f"workload: {len(workload)} requests, {sum(len(p) for p, _ in workload)} prompt tokens, "
          f"{useful} output tokens (ignore_eos)")
    warm = make_workload(4, 99, vocab, (16, 32), (4, 8))
    model = load_hf(path) if systems & {"hf-static", "hf-batch", "batch1"} else None
    results: list[Result] = []
    if "engine" in systems:
        run_engine(engine, warm)
        seconds, tokens = run_engine(engine, workload)
        results.append(Result("aio engine", useful, seconds, f"{engine.stats().num_preemptions} preemptions"))
        with torch.inference_mode():
            for i in range(min(2, len(workload))):
                p, n = workload[i]
                ref = model.generate(torch.tensor([p]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                                     pad_token_id=0)[0, len(p):].tolist() if model is not None else tokens[i]
                if ref != tokens[i]:
                    print(f"WARNING: request {i}: engine tokens differ from transformers greedy")
    if "hf-static" in systems:
        run_hf_static(model, warm)
        results.append(Result("transformers generate, static batches of 16", useful, run_hf_static(model, workload),
                              "left padded; runs to the batch's longest output"))
    if "hf-batch" in systems:
        try:
            run_hf_continuous(model, warm)
            results.append(Result("transformers generate_batch (continuous)", useful,
                                  run_hf_continuous(model, workload)))
        except Exception as exc:  # report, keep going
            print(f"transformers generate_batch could not run here: {type(exc).__name__}: {exc}")
    summary: dict = {"params_m": round(n_params / 1e6, 1), "requests": len(workload), "output_tokens": useful}
    base = next((r for r in results if r.system == "aio engine"), None)
    print(f"\n{'system':<46} {'tokens':>7} {'seconds':>8} {'tok/s':>8} {'engine/this':>11}")
    for r in results:
        ratio = base.tokens_per_s / r.tokens_per_s if base else None
        shown = f"{ratio:>10.2f}x" if ratio is not None else f"{'-':>11}"
        print(f"{r.system:<46} {r.output_tokens:>7} {r.seconds:>8.1f} {r.tokens_per_s:>8.1f} {shown}"
              + (f"  ({r.note})" if r.note else ""))
        summary[r.system] = {"tok_s": round(r.tokens_per_s, 1), "engine_ratio": ratio and round(ratio, 2)}
    if "batch1" in systems:
        b1 = batch1(engine, model, vocab, 128, 64 if args.quick else 256)
        print(f"\nbatch-1 decode (prompt 128): engine {b1['engine_decode_tok_s']:.1f} tok/s, transformers "
              f"{b1['transformers_decode_tok_s']:.1f} tok/s, ratio {b1['ratio']:.2f}x")
        print(f"  {b1['bytes_per_step'] / 1e6:.0f} MB read per step; copy bandwidth {b1['copy_bandwidth_gb_s']:.1f} "
              f"GB/s; bandwidth utilisation: engine {b1['engine_bandwidth_utilization']:.0%}, transformers "
              f"{b1['transformers_bandwidth_utilization']:.0%}")
        summary["batch1"] = {k: round(v, 3) for k, v in b1.items()}
    print("\nJSON " + json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
