"""The speculative benchmark's report (benchmarks/speculative.py measures): each system's speedup over the target
alone, the draft's acceptance and costs, Leviathan's prediction beside the measurement, and how far the batch-1
figure moves with the choice of prompts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Run:
    system: str
    batch: int
    seconds: float
    tokens: list[list[int]]
    first_seconds: float  # the system's first timing: prompts it had not seen (no prefix-cache hit)
    call_seconds: list[float] = field(default_factory=list)  # the kept timing's generate calls, one by one
    spec: Any = None  # SpecDecodeStats of the timed run
    verify_cost: float | None = None  # the engine's measured cost of its mean verification step / a plain step


def leviathan_speedup(alpha: float, k: float, c: float) -> float:
    """Expected walltime improvement of Leviathan et al. (2023), eq. (1) over (k c + 1)."""
    tokens = k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens / (k * c + 1)


def speedup_interval(base: list[float], system: list[float], n_boot: int = 2000) -> tuple[float, float, float]:
    """The speedup over a set of calls (sum of the base's seconds / sum of the system's) and its 90% interval over
    the calls resampled with replacement: how far the figure moves with the choice of prompts."""
    from classifier.cv import bootstrap

    if len(base) != len(system) or not base:
        raise ValueError(f"need the same calls timed for both, got {len(base)} and {len(system)}")
    b, s = np.asarray(base, dtype=np.float64), np.asarray(system, dtype=np.float64)
    return bootstrap(lambda idx: float(b[idx].sum() / s[idx].sum()), len(b), n_boot)


def report(runs: list[Run], c: float) -> list[dict]:
    rows = []
    print(f"\n{'system':<34} {'batch':>5} {'tok/s':>8} {'speedup':>8} {'new':>6} {'accept':>7} {'alpha':>6} {'c':>5} "
          f"{'mean k':>6} "
          f"{'tok/verif':>9} {'predicted':>9} {'verify':>6} {'pred. v':>7}  per-position acceptance")
    for r in runs:
        base = next(b for b in runs if b.batch == r.batch and b.system == "target alone")
        tok_s = sum(map(len, r.tokens)) / r.seconds
        speedup = base.seconds / r.seconds
        new = base.first_seconds / r.first_seconds
        row: dict[str, Any] = {"system": r.system, "batch": r.batch, "seconds": round(r.seconds, 3),
                               "tok_s": round(tok_s, 1), "speedup": round(speedup, 3),
                               "speedup_new_prompts": round(new, 3)}
        if len(r.call_seconds) > 1 and r is not base:
            _, lo, hi = speedup_interval(base.call_seconds, r.call_seconds)
            per_call = [b / t for b, t in zip(base.call_seconds, r.call_seconds)]
            row.update(speedup_interval=[round(lo, 3), round(hi, 3)], speedup_per_call=[round(x, 3) for x in per_call])
        line = f"{r.system:<34} {r.batch:>5} {tok_s:>8.1f} {speedup:>7.2f}x {new:>5.2f}x"
        s = r.spec
        if s is not None:
            # the engine's own measure of its draft forward where it has one (a reduced draft vocabulary makes it
            # cheaper than the draft engine's plain step)
            c_system = 0.0 if s.method == "ngram" else s.cost_ratio or c
            mean_k = s.num_draft_tokens / s.num_verifications if s.num_verifications else 0.0
            predicted = leviathan_speedup(s.alpha, mean_k, c_system) if s.num_verifications else 1.0
            v = r.verify_cost or 1.0
            predicted_v = predicted * (mean_k * c_system + 1) / (mean_k * c_system + v)
            row.update(acceptance_rate=round(s.acceptance_rate, 3), alpha=round(s.alpha, 3), c=round(c_system, 3),
                       mean_k=round(mean_k, 2),
                       tokens_per_verification=round(s.mean_tokens_per_verification, 2),
                       per_position_acceptance=[round(a, 3) for a in s.per_position_acceptance],
                       plain_decodes=s.num_plain_decodes, verifications=s.num_verifications,
                       predicted_speedup=round(predicted, 3), verify_cost=round(v, 3),
                       predicted_with_verify_cost=round(predicted_v, 3))
            positions = " ".join(f"{a:.2f}" if n else "-" for a, n in zip(s.per_position_acceptance,
                                                                        s.num_proposed_per_position))
            line += (f" {s.acceptance_rate:>7.3f} {s.alpha:>6.3f} {c_system:>5.3f} {mean_k:>6.2f} "
                     f"{s.mean_tokens_per_verification:>9.2f} {predicted:>8.2f}x {v:>6.2f} {predicted_v:>6.2f}x  {positions}"
                     f"  ({s.num_plain_decodes} plain decodes, {s.num_verifications} verifications)")
        print(line)
        rows.append(row)
    spread = [row for row in rows if "speedup_interval" in row]
    if spread:
        print("\nper call (one prompt each at batch 1): the speedup's 90% interval over the calls resampled, and each "
              "call's own")
    for row in spread:
        lo, hi = row["speedup_interval"]
        print(f"{row['system']:<34} {row['batch']:>5} {row['speedup']:.2f}x [{lo:.2f}, {hi:.2f}]  "
              + " ".join(f"{x:.2f}" for x in row["speedup_per_call"]))
    print("\nspeedup: target-alone time / this system's time, same prompts and tokens (best of the timings); new: the "
          "same on each system's first timing, prompts it had not seen; predicted: Leviathan's "
          "(1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)) at the measured alpha, c and mean k; c: the engine's measured "
          "draft forward / target forward, one token each (0 for ngram); verify: "
          "the measured cost of a verification step / a plain step (Leviathan: 1); pred. v: the prediction with "
          "it, (1 - alpha^(k+1)) / ((1 - alpha)(k c + verify))")
    return rows
