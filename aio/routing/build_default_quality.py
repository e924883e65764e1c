"""`python -m aio.routing.build_default_quality [--large-share 0.2]`: calibrates the shipped default quality on the
seed data's held-out prompts with the shipped classifier and writes aio/routing_default.json (see
aio.routing_default). Run it again whenever classifier/default/ changes (a test checks that the versions match)."""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from aio.routing.calibrate import quality_for_large_share, tier_shares
from aio.routing.embedding_cache import EmbeddingCache
from aio.routing.loader import builtin_classifier
from aio.routing.retrain import takes_embeddings
from aio.routing.router import Router
from aio.routing_default import DEFAULT_FILE
from aio.settings import TIER_ORDER
from classifier.seed import is_holdout, load_seed_data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aio.routing.build_default_quality", description=__doc__)
    parser.add_argument("--large-share", type=float, default=0.2)
    parser.add_argument("--cache", type=Path, default=None, help="an embedding cache folder to reuse")
    args = parser.parse_args(argv)
    texts = [t for t in load_seed_data()[0] if is_holdout(t)]
    classifier = builtin_classifier()
    with tempfile.TemporaryDirectory() as tmp:
        cache = EmbeddingCache.for_encoder(args.cache or Path(tmp), classifier.encoder_name) \
            if getattr(classifier, "encoder_name", None) else None
        if takes_embeddings(classifier, cache):
            proba = classifier.predict_proba(texts, embeddings=cache.embed(texts))
        else:
            proba = classifier.predict_proba(texts)
    proba = np.asarray(proba, dtype=np.float64)
    router = Router(classifier, TIER_ORDER, 0.5)
    quality = round(quality_for_large_share(router, proba, args.large_share), 4)
    cumulative = np.cumsum(proba, axis=1)
    DEFAULT_FILE.write_text(json.dumps({
        "quality": quality, "large_share": args.large_share, "classifier_version": classifier.version,
        "data": f"the {len(texts)} held-out prompts of the shipped seed data",
        "split": {t: round(s, 4) for t, s in tier_shares(router, proba, quality).items()},
        "p_small": [round(float(p), 4) for p in cumulative[:, 0]],
        "p_medium": [round(float(p), 4) for p in cumulative[:, 1]]}) + "\n")
    print(f"quality {quality} for {classifier.version}: {tier_shares(router, proba, quality)} -> {DEFAULT_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
