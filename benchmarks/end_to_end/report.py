"""The end-to-end figures: policies' accuracy and cost with 90% bootstrap intervals, the cost at 98% of
always-large accuracy, latency percentiles, the live passes checked against the per-tier answers, the quality
monitor's verdicts against the truth; as text, JSON and a PNG."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
import numpy as np

from benchmarks.end_to_end.curves import CurvePoint, cost_at, intervals
from benchmarks.end_to_end.learned import TARGETS
from benchmarks.end_to_end.policies import (QUALITY_GRID, TARGET, TIERS, Choice, TierAnswers, cascade, fixed,
                                            oracle, routed_tiers)
from benchmarks.end_to_end.request_log import logged_requests, logged_verdicts
from benchmarks.end_to_end.traffic import Answer
from benchmarks.workload import Task, extract_answer, matches

RESAMPLES = 1000


def correct(task: Task, answer: Answer) -> bool:
    """Whether the answer's final answer matches the task's computed truth (a failed request is wrong)."""
    return answer.error is None and matches(extract_answer(answer.text), task.truth, task.kind)


def _quality_points() -> list[float]:
    from aio.routing_default import default_quality

    return sorted({0.3, 0.5, 0.7, round(default_quality(), 4)})


class Figures:
    """Every policy's figures on a subset of the evaluation tasks (the whole set or a bootstrap resample)."""

    def __init__(self, answers: TierAnswers, scores: dict[str, np.ndarray], threshold: float) -> None:
        self.answers = answers
        self.threshold = threshold
        grid = list(QUALITY_GRID) + [q for q in _quality_points() if q not in QUALITY_GRID]
        self.grid = np.array(grid)
        self.routes = {name: np.array([routed_tiers(s, q) for q in grid]) for name, s in scores.items()}

    def curves(self, rows: np.ndarray) -> dict[str, list[CurvePoint]]:
        a = self.answers.take(rows)
        out = {}
        for name, routes in self.routes.items():
            out[name] = [self._point(q, a, Choice(r[rows], a.cost[np.arange(len(rows)), r[rows]]))
                         for q, r in zip(self.grid, routes)]
        out["auto + cascade"] = [self._point(q, a, cascade(a, r[rows], self.threshold))
                                 for q, r in zip(self.grid, self.routes["auto"])]
        return out

    @staticmethod
    def _point(quality: float, answers: TierAnswers, choice: Choice) -> CurvePoint:
        return CurvePoint(float(quality), choice.accuracy(answers), choice.cost_fraction(answers))

    def stats(self, rows: np.ndarray) -> dict[str, float]:
        a = self.answers.take(rows)
        out: dict[str, float] = {}
        for t, tier in enumerate(TIERS):
            choice = fixed(a, t)
            out[f"always-{tier} accuracy"], out[f"always-{tier} cost"] = choice.accuracy(a), choice.cost_fraction(a)
        choice = oracle(a)
        out["oracle accuracy"], out["oracle cost"] = choice.accuracy(a), choice.cost_fraction(a)
        target = TARGET * out["always-large accuracy"]
        for name, points in self.curves(rows).items():
            out[f"{name}: cost at {TARGET:.0%}"] = cost_at(points, target)
            for p in points:
                if p.quality in _quality_points():
                    out[f"{name} q={p.quality:g} accuracy"], out[f"{name} q={p.quality:g} cost"] = (p.accuracy,
                                                                                                 p.cost_fraction)
        return out


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p50_90ci": None, "p95_90ci": None, "n": 0}
    v = np.array(values)
    def stats(rows: np.ndarray) -> dict[str, float]:
        return {"p50": float(np.percentile(v[rows], 50)), "p95": float(np.percentile(v[rows], 95))}

    ci = intervals(len(v), stats, RESAMPLES)
    point = stats(np.arange(len(v)))
    return {**point, "p50_90ci": list(ci["p50"]), "p95_90ci": list(ci["p95"]), "n": len(v)}


def figures(tasks: list[Task], answers: TierAnswers, scores: dict[str, np.ndarray], threshold: float,
            live: dict[str, dict[str, list[float]]]) -> dict:
    """`scores`: per router (its name in the figures) the per-tier scores on `tasks`; "auto" (the shipped
    classifier) is the one the cascade starts from."""
    book = Figures(answers, scores, threshold)
    everything = np.arange(len(answers))
    point = book.stats(everything)
    ci = intervals(len(answers), book.stats, RESAMPLES)
    return {"figures": {k: {"value": v, "ci90": ci[k]} for k, v in point.items()},
            "curves": {k: [p.__dict__ for p in pts] for k, pts in book.curves(everything).items()},
            "latency": {name: {k: _percentiles(v) for k, v in values.items()} for name, values in live.items()},
            "per_task": [{"id": t.id, "category": t.category, "difficulty": t.difficulty,
                          "correct": answers.correct[i].tolist(), "cost": answers.cost[i].tolist(),
                          "confidence": [None if np.isnan(c) else float(c) for c in answers.confidence[i]],
                          **{f"scores: {name}": s[i].tolist() for name, s in scores.items()}}
                         for i, t in enumerate(tasks)]}


def live_check(tasks: list[Task], answers: TierAnswers, live: list[Answer], scores: np.ndarray,
               database_url: str) -> dict:
    """The live `auto` pass against what the per-tier answers predict for it."""
    from aio.routing_default import default_quality

    rows = logged_requests(database_url, [a.request_id for a in live])
    predicted = routed_tiers(scores, default_quality())
    served = np.array([TIERS.index(rows[a.request_id].tier) if a.request_id in rows else -1 for a in live])
    right = np.array([correct(t, a) for t, a in zip(tasks, live)])
    same_tier = served == predicted
    cost = sum(rows[a.request_id].cost_usd for a in live if a.request_id in rows)
    return {"quality": default_quality(), "accuracy": float(right.mean()),
            "cost_fraction": float(cost / answers.cost[:, 2].sum()),
            "served_tier_as_predicted": float(same_tier.mean()),
            "correct_as_that_tiers_answer": float(np.mean([right[i] == answers.correct[i, served[i]]
                                                           for i in np.flatnonzero(served >= 0)])),
            "tier_shares": {t: float(np.mean(served == i)) for i, t in enumerate(TIERS)}}


def live_cascade(tasks: list[Task], live: list[Answer], answers: TierAnswers, database_url: str) -> dict:
    rows = logged_requests(database_url, [a.request_id for a in live])
    logged = [rows[a.request_id] for a in live if a.request_id in rows]
    right = np.array([correct(t, a) for t, a in zip(tasks, live)])
    return {"accuracy": float(right.mean()),
            "cost_fraction": float(sum(r.cost_usd for r in logged) / answers.cost[:, 2].sum()),
            "cascaded": sum(r.routing_reason == "cascade" for r in logged),
            "replaced_answers_cost_fraction": float(sum(r.cascade_cost_usd or 0.0 for r in logged)
                                                    / answers.cost[:, 2].sum()),
            "served_by": {t: sum(r.tier == t for r in logged) for t in TIERS}}


def monitor_figures(tasks: list[Task], monitored: dict[str, list[Answer]], database_url: str,
                    pass_threshold: float = 0.85) -> dict:
    """Its verdicts on cheap answers against their truth (a flag is a failed verdict); beside them, the verdicts
    the comparison without its final-answer rule gives on the same answer pairs (as the monitor judged before)."""
    from quality_monitor import AnswerComparer

    without_rule = AnswerComparer(final_answers=False)
    wrong, flagged, flagged_before = [], [], []
    methods = defaultdict(lambda: [0, 0, 0])  # method -> [verdicts, flags, right flags]
    for tier, answers in monitored.items():
        verdicts = logged_verdicts(database_url, [a.request_id for a in answers])
        for task, answer in zip(tasks, answers):
            verdict = verdicts.get(answer.request_id or "")
            if verdict is None:
                continue
            is_wrong, is_flag = not correct(task, answer), not verdict.passed
            wrong.append(is_wrong)
            flagged.append(is_flag)
            before = without_rule.compare(verdict.answer or "", verdict.reference_answer or "")
            flagged_before.append(before.similarity < pass_threshold)
            m = methods[verdict.method]
            m[0], m[1], m[2] = m[0] + 1, m[1] + is_flag, m[2] + (is_flag and is_wrong)
    w, f, fb = np.array(wrong, bool), np.array(flagged, bool), np.array(flagged_before, bool)

    def stats(rows: np.ndarray) -> dict[str, float]:
        out = {}
        for name, flags in (("", f[rows]), ("without the final-answer rule: ", fb[rows])):
            ww = w[rows]
            out[name + "recall"] = float((flags & ww).sum() / max(1, ww.sum()))
            out[name + "precision"] = float((flags & ww).sum() / flags.sum()) if flags.any() else float("nan")
        return out

    point = stats(np.arange(len(w))) if len(w) else {}
    ci = intervals(len(w), stats, RESAMPLES) if len(w) else {}
    return {"verdicts": len(w), "wrong": int(w.sum()), "flagged": int(f.sum()),
            **{k: {"value": v, "ci90": ci[k]} for k, v in point.items()},
            "by_method": {k: {"verdicts": v[0], "flags": v[1], "right_flags": v[2]} for k, v in methods.items()}}


def routed_answers(tasks: list[Task], answers: list[Answer], database_url: str) -> list[dict]:
    """Per task of a routed pass: the tier that served it, its answer's confidence and whether it was right."""
    from aio.chat.confidence import confidence

    rows = logged_requests(database_url, [a.request_id for a in answers])
    return [{"id": t.id, "tier": rows[a.request_id].tier if a.request_id in rows else None,
             "confidence": confidence(a.logprobs) if a.logprobs else None, "correct": correct(t, a)}
            for t, a in zip(tasks, answers)]


def by_category(tasks: list[Task], answers: TierAnswers) -> dict:
    """Per category and difficulty: each tier's accuracy and the share of tasks each tier is the cheapest right
    one for (the tiers must disagree for routing to matter)."""
    cheapest = oracle(answers).tier
    none_right = ~answers.correct.any(axis=1)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tasks):
        groups[f"{t.category} d{t.difficulty}"].append(i)
    groups["all"] = list(range(len(tasks)))
    out = {}
    for name, rows in sorted(groups.items()):
        r = np.array(rows)
        out[name] = {"n": len(r), **{f"{tier} accuracy": float(answers.correct[r, i].mean())
                                     for i, tier in enumerate(TIERS)},
                     **{f"cheapest right: {tier}": float(np.mean((cheapest[r] == i) & ~none_right[r]))
                        for i, tier in enumerate(TIERS)},
                     "none right": float(none_right[r].mean())}
    return out


def _fmt(entry: dict, percent: bool = True) -> str:
    v, (lo, hi) = entry["value"], entry["ci90"]
    if v != v:  # NaN: never reached
        return "never"
    f = (lambda x: "inf" if x == np.inf else f"{100 * x:.0f}%") if percent else (lambda x: f"{x:.3f}")
    return f"{f(v)} [{f(lo)}, {f(hi)}]"


def text(results: dict) -> str:
    figs = results["figures"]
    lines = [f"evaluation: {results['tasks']['eval']} tasks; cost as a share of always-large; 90% bootstrap "
             f"intervals; cascade threshold {results['cascade_threshold']:.3f} (fitted on the train part)", "",
             f"{'policy':34} {'accuracy':>22} {'cost':>22}"]
    names = [k[:-len(" accuracy")] for k in figs if k.endswith(" accuracy")]
    for name in names:
        lines.append(f"{name:34} {_fmt(figs[name + ' accuracy']):>22} {_fmt(figs[name + ' cost']):>22}")
    lines += ["", f"cost at {TARGET:.0%} of always-large accuracy:"]
    lines += [f"  {k.split(':')[0]:32} {_fmt(v)}" for k, v in figs.items() if ": cost at" in k]
    lines += ["", f"{'latency (ms)':34} {'TTFT p50':>10} {'p95':>8} {'e2e p50':>10} {'p95':>8}"]
    for name, lat in results["latency"].items():
        t, e = lat["ttft_ms"], lat["latency_ms"]
        cell = lambda x: "-" if x is None else f"{x:.0f}"  # noqa: E731
        lines.append(f"{name:34} {cell(t['p50']):>10} {cell(t['p95']):>8} {cell(e['p50']):>10} {cell(e['p95']):>8}")
    m = results["monitor"]
    if m.get("recall"):
        before = "without the final-answer rule: "
        lines += ["", f"quality monitor on {m['verdicts']} cheap answers ({m['wrong']} wrong, {m['flagged']} "
                      f"flagged): recall {_fmt(m['recall'])}, precision {_fmt(m['precision'])}; {before}recall "
                      f"{_fmt(m[before + 'recall'])}, precision {_fmt(m[before + 'precision'])}; by method "
                      f"{m['by_method']}"]
    lines += ["", f"live auto: {results['live_auto']}", f"live cascade: {results['live_cascade']}",
              f"retrain: {results['retrain'].get('status')}: {results['retrain'].get('reason')}"]
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = results["figures"]
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, points in results["curves"].items():
        ax.plot([p["cost_fraction"] for p in points], [p["accuracy"] for p in points], label=name, marker=".",
                markersize=3)
    for name in ["always-small", "always-medium", "always-large", "oracle"]:
        ax.scatter(figs[f"{name} cost"]["value"], figs[f"{name} accuracy"]["value"], zorder=3)
        ax.annotate(name, (figs[f"{name} cost"]["value"], figs[f"{name} accuracy"]["value"]),
                    textcoords="offset points", xytext=(4, -10), fontsize=8)
    fitted = fitted_points(results)
    if fitted:
        ax.plot(*zip(*fitted), color="black", marker="o", markersize=4,
                label=f"auto fitted to the tiers (targets {' / '.join(f'{t:g}' for t in TARGETS)})")
    target = TARGET * figs["always-large accuracy"]["value"]
    ax.axhline(target, color="grey", linestyle=":", label=f"{TARGET:.0%} of always-large")
    ax.set_xlabel("cost (share of always-large)")
    ax.set_ylabel("accuracy (computed truth)")
    ax.set_title(f"The family demo end to end: {results['tasks']['eval']} evaluation tasks")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def fitted_points(results: dict) -> list[tuple[float, float]]:
    """(cost, accuracy) of `auto` fitted to the shipped measurement at each quality target (the `learned` figures,
    relative to always-large), in cost order."""
    learned = results.get("learned", {}).get("figures", {})
    large = results["figures"]["always-large accuracy"]["value"]
    points = []
    for target in TARGETS:
        accuracy = learned.get(f"auto, quality target {target:g}: accuracy")
        cost = learned.get(f"auto, quality target {target:g}: cost")
        if accuracy and cost:
            points.append((cost[0], accuracy[0] * large))
    return sorted(points)
