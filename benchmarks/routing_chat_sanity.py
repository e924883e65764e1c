"""Does routing fitted to the tiers keep everyday chat sane? On the hand-labelled chat sanity set (never trained
on): the tiers the quality target sends each prompt to, and for each explicit easy/hard pair whether the hard
prompt's tier is at least the easy one's (and strictly above it), with the family's shipped measurement, beside
the rule before any measurement (the quality knob at its shipped default).

    python -m benchmarks.routing_chat_sanity [--target 0.9]"""
from __future__ import annotations

import argparse
import gzip
import json
import tempfile
from collections import Counter
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=None, help="quality target (default: the product's)")
    args = parser.parse_args(argv)
    import numpy as np

    from aio.db.database import make_engine
    from aio.db.migrate import upgrade
    from aio.probing.fitting import paired_outcomes
    from aio.probing.shipped import SHIPPED, import_shipped
    from aio.probing.store import ProbeStore
    from aio.routing.outcome_fit import fit_routing
    from aio.routing.router import Router
    from aio.routing_default import DEFAULT_TARGET, default_quality
    from classifier.chat_data import explicit_pairs, load_chat
    from classifier.default_model import load_default
    from classifier.features import messages_to_text

    with gzip.open(SHIPPED, "rt") as f:
        fingerprints = {row["tier"]: row["fingerprint"] for row in map(json.loads, f) if row["kind"] == "run"}
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'aio.db'}")
        upgrade(engine)
        store = ProbeStore(engine)
        import_shipped(store, fingerprints)
        outcomes = paired_outcomes(store, fingerprints)
        classifier = load_default()
        proba = np.asarray(classifier.predict_proba(outcomes.texts()))
        fit = fit_routing(proba, outcomes.correct, outcomes.cost, outcomes.tiers, args.target or DEFAULT_TARGET,
                          classifier.version, fingerprints)
        engine.dispose()
    chat = load_chat()
    chat_proba = np.asarray(classifier.predict_proba([messages_to_text([{"role": "user", "content": t}])
                                                      for t in chat.texts]))
    knob = Router(classifier, fit.tiers, quality=default_quality())
    pairs = explicit_pairs(chat)
    for name, tiers in (("fitted to the tiers", fit.choose(chat_proba)),
                        ("the knob before any measurement",
                         np.array([fit.tiers.index(knob.decide(p).tier) for p in chat_proba]))):
        print(f"-- {name}")
        report(fit, chat, pairs, tiers)
    return 0


def report(fit, chat, pairs: list[tuple[int, int]], tiers) -> None:
    """Tiers per prompt, the pairs' order and the tiers per hand-labelled difficulty (1 easiest)."""
    kept = sum(tiers[h] >= tiers[e] for e, h in pairs)
    raised = sum(tiers[h] > tiers[e] for e, h in pairs)
    print(f"{len(chat.texts)} chat prompts: "
          + ", ".join(f"{fit.tiers[t]} {n}" for t, n in sorted(Counter(tiers.tolist()).items())))
    print(f"explicit easy/hard pairs: the hard one's tier at least the easy one's in {kept} of {len(pairs)}, "
          f"strictly above in {raised}")
    for d in range(1, 6):
        counts = Counter(fit.tiers[t] for t, diff in zip(tiers, chat.difficulty) if diff == d)
        print(f"  difficulty {d}: {dict(counts)}")


if __name__ == "__main__":
    raise SystemExit(main())
