"""What `aio calibrate` does, apart from its options: measure the unmeasured tiers, then fit routing."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy.engine import Engine

from aio.probing.fingerprint import tier_fingerprint
from aio.probing.measure import Measurement, measure
from aio.probing.plan import remote_token_estimate
from aio.probing.runner import MAX_NEW_TOKENS, ProbeTarget
from aio.probing.shipped import import_shipped
from aio.probing.store import ProbeStore, RunStatus
from aio.routing.outcome_fit import RoutingFit
from aio.settings import TIER_ORDER, Settings


@dataclass
class CalibrationReport:
    statuses: dict[str, RunStatus | None]
    fit: RoutingFit | None
    skipped: dict[str, str]  # tier -> why it was not probed

    def to_dict(self) -> dict[str, Any]:
        return {"tiers": {t: (s.as_dict() if s else None) for t, s in self.statuses.items()},
                "skipped": self.skipped, "fit": self.fit.to_dict() if self.fit else None}

    def table(self) -> str:
        lines = [f"{'tier':8} {'status':10} {'tasks':>7} {'accuracy':>22}  model"]
        for tier, s in self.statuses.items():
            if s is None:
                lines.append(f"{tier:8} {'unmeasured':10} {'':>7} {'':>22}  ({self.skipped.get(tier, '')})")
                continue
            low, high = wilson(s.correct, s.done)
            acc = f"{s.correct / s.done:.1%} [{low:.0%}, {high:.0%}]" if s.done else "-"
            lines.append(f"{tier:8} {s.status:10} {s.done:>3}/{s.planned:<3} {acc:>22}  {s.model}")
        if self.fit is None:
            lines.append("routing: no fit yet (each tier needs probe outcomes); `auto` keeps the quality knob")
            return "\n".join(lines)
        e = self.fit.estimate
        shares = ", ".join(f"{t} {k:.0%}" for t, k in zip(self.fit.tiers, self.fit.cost_share))
        lines += ["", f"routing fitted to these outcomes (classifier {self.fit.classifier_version}):",
                  f"  quality target {self.fit.target:.0%} of always-{self.fit.tiers[-1]}'s accuracy: estimated "
                  f"{e.relative_accuracy:.1%} [{e.low:.1%}, {e.high:.1%}] at {e.cost_share:.0%} of its cost, "
                  f"on the {e.num_prompts} probe prompts",
                  f"  cost per request as a share of {self.fit.tiers[-1]}'s: {shares}"]
        if self.fit.escalation is not None:
            esc = self.fit.escalation
            below = ", ".join(f"{t} < {v:.2f}" for t, v in self.fit.escalate_below.items())
            lines.append(f"  with the cascade on (route, then verify with the answer scorer): {esc.accuracy:.1%} at "
                         f"{esc.cost_share:.0%} of the cost on the probe's outcomes; escalates answers scored {below}"
                         + (" (none: escalating does not pay on these tiers)" if not any(
                             self.fit.escalate_below.values()) else ""))
        return "\n".join(lines)


def wilson(k: int, n: int, z: float = 1.645) -> tuple[float, float]:
    """The 90% Wilson interval of k successes in n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


async def run(settings: Settings, engine: Engine, *, budget: float, max_tasks: int | None, concurrency: int,
              confirm_remote: Callable[[str], bool], probe: bool = True, progress: bool = True,
              per_cell: int = 8, crux: int = 40) -> CalibrationReport:
    from aio.probing.fitting import refit
    from aio.routing import load_classifier
    from aio.tier_loader import build_pool, configured_tiers

    tier_settings, demo = configured_tiers(settings)
    names = sorted(tier_settings, key=TIER_ORDER.index)
    fingerprints = {name: tier_fingerprint(tier_settings[name], settings.home) for name in names}
    store = ProbeStore(engine)
    if settings.probe_shipped:
        import_shipped(store, fingerprints)
    skipped: dict[str, str] = {}
    todo = [n for n in names if not ((s := store.status(fingerprints[n])) and s.measured)]
    if probe and todo:
        from probes.probe_set import probe_set

        tasks = probe_set(per_cell, crux)[:max_tasks]
        remote = [n for n in todo if tier_settings[n].is_remote]
        if remote and not confirm_remote(_remote_cost(remote, tier_settings, tasks, settings.probe_max_remote_tasks)):
            skipped.update({n: "remote: not confirmed (--yes)" for n in remote})
            todo = [n for n in todo if n not in remote]
        pool = build_pool(tier_settings, demo is not None and getattr(demo, "random_weights", False))
        try:
            from aio.commands.progress_bar import progress_for_stderr
            from aio.routing.progress import NoProgress

            measurements = [Measurement(ProbeTarget(t, fingerprints[t.name], tier_settings[t.name].prices), t.model,
                                        tier_settings[t.name].is_remote) for t in pool if t.name in todo]
            await measure(measurements, store, tasks, budget, concurrency, settings.probe_max_remote_tasks,
                          progress=progress_for_stderr() if progress else NoProgress())
        finally:
            await pool.aclose()
    classifier = load_classifier(None, engine, settings.home / "classifiers")
    fit = refit(engine, classifier, fingerprints, settings.quality_target, note="aio calibrate")
    return CalibrationReport({n: store.status(fingerprints[n]) for n in names}, fit, skipped)


def _remote_cost(remote: list[str], tier_settings: dict, tasks: list, max_tasks: int) -> str:
    prompts = [t.prompt for t in tasks[:max_tasks]]
    prompt_tokens, completion_tokens = remote_token_estimate(prompts, MAX_NEW_TOKENS)
    lines = [f"probing a remote tier sends it up to {len(prompts)} requests: about {prompt_tokens:,} prompt and at "
             f"most {completion_tokens:,} completion tokens each"]
    for name in remote:
        cost = tier_settings[name].prices.cost(prompt_tokens, completion_tokens)
        lines.append(f"  {name} ({tier_settings[name].model or tier_settings[name].base_url}): at most ${cost:.4f}")
    return "\n".join(lines)
