"""The serving part of benchmarks.quantization: 32 concurrent requests through our engine (continuous batching), with
and without the dense path for many-row inputs (torch's packed kernels and GGUF blocks as stored), against llama.cpp
serving them one after another.

Every engine run serves requests it has not seen (seed + run number): the engine's prefix cache would otherwise
answer a repeat's prompts from the KV cache of the run before, which made every repeat after the first look twice
as fast (docs/benchmarks.md, "Sixth round"). llama.cpp, which keeps no cache across requests, serves the same
requests as our default run of the repeat, so that ratio compares like with like."""
from __future__ import annotations

import itertools
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.quantization_common import LlamaCppWorker, median


def serving_requests(vocab_size: int, n: int, seed: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(10, vocab_size) for _ in range(rng.randint(16, 256))], rng.randint(16, 128))
            for _ in range(n)]


def engine_serve(engine, requests: list[tuple[list[int], int]]) -> dict[str, Any]:
    from tiers import SamplingParams

    params = [SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True) for _, m in requests]
    start = time.perf_counter()
    outs = engine.generate([p for p, _ in requests], params)
    seconds = time.perf_counter() - start
    total = sum(len(o.token_ids) for o in outs)
    return {"output_tokens": total, "seconds": seconds, "tokens_per_s": total / seconds}


DENSE_KERNELS = ("cpu_int4pack", "cpu_int8pack", "cpu_kq")  # the kernels with a dense path for many rows


def has_dense_path(engine) -> bool:
    from tiers.quantization import QuantizedLinear

    return any(isinstance(m, QuantizedLinear) and m.kernel in DENSE_KERNELS for m in engine.runner.model.modules())


def set_dense_rows(engine, rows: int | None) -> None:
    """Switches the quantized projections' dense path (EngineConfig.quantized_dense_min_rows) on the loaded weights."""
    from tiers.quantization import QuantizedLinear

    for module in engine.runner.model.modules():
        if isinstance(module, QuantizedLinear) and module.kernel in DENSE_KERNELS:
            module.dense_min_rows = rows


def serve_comparison(engines: dict[str, Any], path: Path, python: str | None, threads: int, args) -> dict[str, Any]:
    """The serving system with its dense path for many-row inputs (the default) and with the kernels only (the same
    weights, switched), and llama.cpp, taking turns within each repeat, each on its own fresh requests."""
    torch.set_num_threads(threads)
    system = args.serving_system
    engine = engines[system]
    dense_rows = engine.config.quantized_dense_min_rows
    vocab, runs = engine.model_config.vocab_size, itertools.count()
    fresh = lambda: serving_requests(vocab, args.requests, args.seed + next(runs))  # noqa: E731
    worker = LlamaCppWorker(python, path, threads) if python else None
    engine_serve(engine, fresh()[:2])
    ours, packed, theirs = [], [], []
    for rep in range(args.repeats):
        set_dense_rows(engine, dense_rows)
        requests = fresh()
        ours.append(engine_serve(engine, requests))
        print(f"serving repeat {rep + 1}: {system} engine {ours[-1]['tokens_per_s']:.1f} tok/s",
              file=sys.stderr)
        if has_dense_path(engine):
            set_dense_rows(engine, None)
            packed.append(engine_serve(engine, fresh()))
            print(f"serving repeat {rep + 1}: {system} engine, kernels only "
                  f"{packed[-1]['tokens_per_s']:.1f} tok/s", file=sys.stderr)
        else:
            packed.append(ours[-1])  # kernels with no dense path to switch
        if worker:
            theirs.append(worker.ask(cmd="serve", requests=requests))
            print(f"serving repeat {rep + 1}: llama.cpp {theirs[-1]['tokens_per_s']:.1f} tok/s", file=sys.stderr)
    set_dense_rows(engine, dense_rows)
    if worker:
        worker.close()
    out = {"system": system, "threads": threads, "requests": len(requests), "dense_min_rows": dense_rows,
           "output_tokens": ours[0]["output_tokens"], "engine_tokens_per_s": median([r["tokens_per_s"] for r in ours]),
           "packed_only_tokens_per_s": median([r["tokens_per_s"] for r in packed]),
           "dense_vs_packed_only": median([a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(ours, packed)])}
    if theirs:
        out["llama_cpp_sequential_tokens_per_s"] = median([r["tokens_per_s"] for r in theirs])
        out["ratio"] = median([a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(ours, theirs)])
        out["packed_only_ratio"] = median([a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(packed, theirs)])
    return out
