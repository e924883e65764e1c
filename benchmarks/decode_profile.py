"""Where a batch-1 decode step's time goes, on a GGUF file: each projection's kernel call (timed by forward hooks
around every quantized linear layer, the output matrix included) against the whole step.

    python -m benchmarks.decode_profile --model FILE [--threads 1] [--tokens 64] [--quantization auto]

Greedy decode of --tokens tokens after a short chat prompt (ignore_eos), timed per engine step; the hooks add two
perf_counter calls per projection. Decoder layers that run as one native call (tiers/native/layer.c) hide their
projections from the hooks: the output says how many, and their time counts in "rest". Per projection kind: ms per token, the bytes of weights it reads and the
bandwidth that makes. "rest": the step minus the projections (attention, norms, rotary, sampling, Python).
Prints a table and one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections import defaultdict
from pathlib import Path

# the tokenizer's thread pool spins beside the decode's threads: 4-9 tok/s instead of 17 on the 1.5B, 2 threads
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402


def _kind(name: str) -> str:
    return re.sub(r"^layers\.\d+\.(self_attn|mlp)\.", "", name)


def profile(path: Path, threads: int, tokens: int, quantization: str) -> dict:
    from tiers import Engine, SamplingParams
    from tiers.quantization import QuantizedLinear

    torch.set_num_threads(threads)
    engine = Engine.from_pretrained(str(path), quantization=quantization, quantize_lm_head=True,
                                    kv_cache_bytes=64 << 20, max_model_len=1024)
    model = engine.runner.model
    seconds: dict[str, float] = defaultdict(float)
    nbytes: dict[str, int] = defaultdict(int)
    calls: dict[str, int] = defaultdict(int)
    started: dict[int, float] = {}

    def before(module, _inputs):
        started[id(module)] = time.perf_counter()

    def after_for(kind: str):
        def after(module, _inputs, _output):
            seconds[kind] += time.perf_counter() - started.pop(id(module))
            calls[kind] += 1
        return after

    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, QuantizedLinear):
            kind = _kind(name)
            nbytes[kind] += module.resident_bytes
            hooks += [module.register_forward_pre_hook(before), module.register_forward_hook(after_for(kind))]
    prompt = engine.apply_chat_template([{"role": "user", "content": "Write a Python function that merges two "
                                                                     "sorted lists."}])
    engine.generate([prompt], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))  # warm-up
    engine.add_request(prompt, SamplingParams(max_tokens=tokens + 1, temperature=0.0, ignore_eos=True))
    engine.step()  # the prefill
    seconds.clear()
    calls.clear()
    start = time.perf_counter()
    steps = 0
    while engine.has_unfinished_requests():
        engine.step()
        steps += 1
    step_s = (time.perf_counter() - start) / steps
    for hook in hooks:
        hook.remove()
    rows = []
    for kind in sorted(seconds, key=lambda k: -seconds[k]):
        per_token = seconds[kind] / steps
        rows.append({"kind": kind, "ms_per_token": per_token * 1e3, "weight_mb": nbytes[kind] / 1e6,
                     "gb_per_s": nbytes[kind] / per_token / 1e9, "calls_per_token": calls[kind] / steps})
    projections = sum(r["ms_per_token"] for r in rows)
    fused = sum(getattr(layer, "native_layer", None) is not None for layer in model.layers)
    engine.close()
    return {"model": path.name, "threads": threads, "quantization": quantization, "tokens": steps,
            "one_call_layers": fused, "layers": len(model.layers),
            "step_ms": step_s * 1e3, "projections_ms": projections, "rest_ms": step_s * 1e3 - projections,
            "weight_mb": sum(nbytes.values()) / 1e6, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--quantization", default="auto")
    args = ap.parse_args()
    r = profile(args.model, args.threads, args.tokens, args.quantization)
    print(f"{r['model']}, quantization {r['quantization']}, {r['threads']} thread(s), {r['tokens']} decode steps: "
          f"{r['step_ms']:.2f} ms per step ({1e3 / r['step_ms']:.1f} tok/s); projections {r['projections_ms']:.2f} ms "
          f"({r['projections_ms'] / r['step_ms']:.0%}), the rest {r['rest_ms']:.2f} ms; "
          f"{r['weight_mb']:.0f} MB of projection weights: {r['weight_mb'] / r['step_ms']:.2f} GB/s over the step")
    if r["one_call_layers"]:
        print(f"{r['one_call_layers']} of {r['layers']} decoder layers run as one native call "
              "(tiers/native/layer.c): their projections are not seen by the hooks and count in the rest")
    print(f"{'projection':<14} {'ms/token':>9} {'weight MB':>10} {'GB/s':>6} {'calls':>6}")
    for row in r["rows"]:
        print(f"{row['kind']:<14} {row['ms_per_token']:>9.2f} {row['weight_mb']:>10.1f} {row['gb_per_s']:>6.2f} "
              f"{row['calls_per_token']:>6.0f}")
    print("JSON " + json.dumps(r))


if __name__ == "__main__":
    main()
