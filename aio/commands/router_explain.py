"""`aio router explain "prompt"`: the classifier's scores for a prompt, the thresholds in force and the tier the
request would get, with the reason."""
from __future__ import annotations

from pathlib import Path

import typer

from aio.commands import ConfigOption, database, fail


def explain(prompt: str = typer.Argument(..., help="the last user message"),
            previous: list[str] = typer.Option([], "--previous", "-p", metavar="TEXT", help="an earlier user turn of the "
                                               "conversation (repeat for several, oldest first)"),
            system: str | None = typer.Option(None, "--system", metavar="TEXT", help="a system prompt"),
            quality: float | None = typer.Option(None, min=0.0, max=1.0, metavar="Q", help="the request's aio_quality (default: "
                                                 "the deployment's)"),
            neighbours: int = typer.Option(5, "--neighbours", min=0, metavar="N", help="show the N seed training rows "
                                           "nearest in meaning, and their sources (0: none)"),
            config: Path | None = ConfigOption) -> None:
    """Explain how the router would route a prompt: per-tier scores, thresholds in force, tier and reason."""
    from aio.commands.classifier import _current_router
    from aio.routing import registry
    from classifier.features import messages_to_text

    if not prompt.strip():
        raise fail("the prompt is empty")
    messages = ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": p} for p in previous] + [{"role": "user", "content": prompt}]
    text = messages_to_text(messages)
    with database(config) as engine:
        router = _current_router(config, engine)
        state = registry.router_state(engine)
    if quality is None and state.quality is not None:
        router.quality = state.quality
    clf = router.classifier
    try:
        proba = clf.predict_proba([text])[0]
    except Exception as exc:  # a classifier that cannot score: say why, never a traceback
        raise fail(f"the classifier {clf.version} cannot score this prompt: {exc}") from None
    for line in explanation(router, proba, quality, text != prompt):
        typer.echo(line)
    if neighbours:
        from aio.routing.neighbours import nearest_rows

        for line in neighbour_lines(*nearest_rows(text, neighbours)):
            typer.echo(line)


def neighbour_lines(near, shares) -> list[str]:
    """What the seed data says about prompts like this one (aio.routing.neighbours)."""
    from aio.settings import TIER_ORDER

    lines = ["nearest seed training rows (cosine of the encoder's embeddings; tier = the cheapest that answered "
             "it well):"]
    for n in near:
        snippet = " ".join(n.text.split())
        lines.append(f"  {n.similarity:.3f}  {TIER_ORDER[n.label]:6s}  x{n.weight:<4g} {n.source:22s}  "
                     f"{snippet[:70] + ('…' if len(snippet) > 70 else '')}")
    total = sum(s.count for s in shares)
    lines.append(f"sources among the {total} nearest (rows, mean tier 0 = small .. 2 = large, training weight): "
                 + ", ".join(f"{s.source} {s.count} ({s.mean_label:.1f}, x{s.weight:.3g})" for s in shares[:6]))
    return lines


def explanation(router, proba, quality: float | None, with_context: bool) -> list[str]:
    """The lines `aio router explain` prints (separate from I/O so tests read them)."""
    q = router.quality if quality is None else quality
    thresholds = router.thresholds(quality)
    good = router.good_enough(proba)
    decision = router.decide(proba, quality)
    clf = router.classifier
    lines = [f"classifier: {clf.version} ({getattr(clf, 'kind', type(clf).__name__)})"
             + ("; scored with the conversation's context (system / previous user turn)" if with_context else ""),
             "P(label = tier):      " + "  ".join(f"{t} {p:.3f}" for t, p in zip(router.tiers, proba)),
             f"quality knob: {q:.3f}" + ("" if quality is None else " (given)")
             + (f"; offsets {router.offsets}" if router.offsets else "; no offsets"),
             "tier    P(good enough)  threshold  accepts"]
    for tier in router.tiers:
        last = tier == router.tiers[-1]
        ok = last or good[tier] >= thresholds[tier] - 1e-9
        shown = "always" if last else f"{thresholds[tier]:.3f}"
        lines.append(f"{tier:7s} {good[tier]:14.3f}  {shown:>9s}  {'yes' if ok else 'no'}")
    if decision.tier == router.tiers[-1] and len(router.tiers) > 1:
        why = "no smaller tier reaches its threshold"
    else:
        why = (f"the cheapest tier whose P(good enough) {good[decision.tier]:.3f} reaches its threshold "
               f"{thresholds[decision.tier]:.3f}")
    lines.append(f"tier: {decision.tier} (reason: {decision.reason}: {why})")
    lines.append("in a live conversation the server may go higher: a conversation never moves down mid-thread "
                 "(reason sticky), and near-duplicates of recent failed verifications go up (reason recent-failure)")
    return lines
