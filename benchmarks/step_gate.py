"""Two tiers of one process decoding at once on the CPU, with the step gate (tiers/engine/step_gate.py) and without.

    python -m benchmarks.step_gate [--tiers medium,large] [--tokens 64] [--repeats 3] [--threads 2]

Loads the family demo's tiers (`make family`) in this process, as `aio serve` does, and times, per repeat and in
alternating order: each tier decoding alone, then both decoding at once (one thread each) with the gate and with
it replaced by no lock. Reports each tier's decode tokens/s and, per repeat, the gated / ungated ratio of the
pair's wall time for the same work.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import threading
import time

PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def _decode(engine, ids, tokens: int) -> float:
    from tiers import SamplingParams

    start = time.perf_counter()
    engine.generate([ids], SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True))
    return time.perf_counter() - start


def _together(engines: dict, ids: dict, tokens: int, gated: bool) -> tuple[float, dict[str, float]]:
    from tiers.engine.step_gate import CPU_STEP_GATE

    for engine in engines.values():
        engine._step_gate = CPU_STEP_GATE if gated else contextlib.nullcontext()
    seconds: dict[str, float] = {}

    def run(name: str) -> None:
        seconds[name] = _decode(engines[name], ids[name], tokens)

    threads = [threading.Thread(target=run, args=(n,)) for n in engines]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiers", default="medium,large")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    from aio.demo import demo_tier_settings
    from aio.settings import load_settings
    from aio.tier_loader import build_tier

    torch.set_num_threads(args.threads)
    settings = demo_tier_settings(load_settings().home, "family")
    names = args.tiers.split(",")
    engines = {n: build_tier(n, settings[n]).engine for n in names}
    ids = {n: e.apply_chat_template([{"role": "user", "content": PROMPT}]) for n, e in engines.items()}
    for name in names:  # warm-up
        _decode(engines[name], ids[name], 8)
    rows = []
    for repeat in range(args.repeats):
        row: dict = {"alone": {n: args.tokens / _decode(engines[n], ids[n], args.tokens) for n in names}}
        for gated in ((True, False) if repeat % 2 == 0 else (False, True)):
            wall, seconds = _together(engines, ids, args.tokens, gated)
            row["gated" if gated else "ungated"] = {"wall_s": wall,
                                                    **{n: args.tokens / s for n, s in seconds.items()}}
        row["ungated_over_gated_wall"] = row["ungated"]["wall_s"] / row["gated"]["wall_s"]
        rows.append(row)
        print(f"repeat {repeat + 1}: alone " + ", ".join(f"{n} {row['alone'][n]:.1f}" for n in names)
              + " tok/s; together gated " + ", ".join(f"{n} {row['gated'][n]:.1f}" for n in names)
              + f" (wall {row['gated']['wall_s']:.1f} s); ungated " + ", ".join(f"{n} {row['ungated'][n]:.1f}"
                                                                            for n in names)
              + f" (wall {row['ungated']['wall_s']:.1f} s); ungated / gated wall "
              + f"{row['ungated_over_gated_wall']:.2f}x", flush=True)
    print(f"median ungated / gated wall time: {statistics.median(r['ungated_over_gated_wall'] for r in rows):.2f}x")
    print(json.dumps(rows))
    for engine in engines.values():
        engine.close()


if __name__ == "__main__":
    main()
