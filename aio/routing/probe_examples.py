"""The probe's outcomes as training rows for `aio retrain` (source `probe`): for each probe task answered by every
tier of the latest measurement of each tier, the label is the cheapest tier that answered it right (none right:
the cheapest, since a larger tier would not have helped: the routing data's convention). The deployment's own
outcomes (probe rows and the monitor's verdicts) weigh 1 each; the seed rows' weight falls as they grow,
`SEED_HALF / (SEED_HALF + own rows)`: the seed counts fully without own outcomes and half at `SEED_HALF` of them."""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from aio.db.models import ProbeResult, ProbeRun
from aio.settings import TIER_ORDER

SOURCE = "probe"
SEED_HALF = 500


def latest_fingerprints(engine: Engine) -> dict[str, str]:
    """Per tier name: the fingerprint of its latest finished measurement."""
    with Session(engine) as session:
        runs = session.execute(sa.select(ProbeRun.tier, ProbeRun.fingerprint, ProbeRun.finished_at)
                               .where(ProbeRun.status == "measured")).all()
    latest: dict[str, tuple] = {}
    for tier, fingerprint, finished in runs:
        if tier in TIER_ORDER and (tier not in latest or (finished or 0) > (latest[tier][1] or 0)):
            latest[tier] = (fingerprint, finished)
    return {tier: value[0] for tier, value in latest.items()}


def probe_examples(engine: Engine) -> list[tuple[str, int]]:
    """(text, label) per probe task every measured tier answered."""
    from classifier.features import messages_to_text

    fingerprints = latest_fingerprints(engine)
    if len(fingerprints) < 2:
        return []
    tiers = sorted(fingerprints, key=TIER_ORDER.index)
    by_task: dict[str, dict[str, tuple[str, bool]]] = {}
    with Session(engine) as session:
        rows = session.execute(sa.select(ProbeResult.task_id, ProbeResult.tier, ProbeResult.prompt,
                                         ProbeResult.correct, ProbeResult.fingerprint)
                               .where(ProbeResult.fingerprint.in_(list(fingerprints.values())))).all()
    for task_id, tier, prompt, correct, fingerprint in rows:
        if fingerprints.get(tier) == fingerprint:
            by_task.setdefault(task_id, {})[tier] = (prompt, bool(correct))
    out = []
    for answers in by_task.values():
        if len(answers) != len(tiers):
            continue
        right = [t for t in tiers if answers[t][1]]
        label = TIER_ORDER.index(right[0] if right else tiers[0])
        prompt = next(iter(answers.values()))[0]
        out.append((messages_to_text([{"role": "user", "content": prompt}]), label))
    return out


def seed_factor(own_rows: int) -> float:
    return SEED_HALF / (SEED_HALF + max(0, own_rows))
