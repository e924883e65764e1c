"""Classifier timing against the issue's budgets: `python -m benchmarks.classifier [--n-train 10000] [--repeats 50]`.

- training with default options (`ComplexityClassifier.train(texts, labels, n_tiers=3)`, embeddings included) on
  the first `--n-train` rows of the shipped seed data; budget 5 minutes on the 2-core CPU;
- `predict_proba` on 1 text and on 32 texts (the encoder warmed up first), median over `--repeats`; budget 15 ms per
  request (the server classifies in micro-batches, so a batch of 32 is judged per text);
- the shipped default with and without its kNN half, side by side in one run (the kNN's added cost).
A script, not a test: timings depend on the machine and on what else runs on it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

BUDGETS = {"train_s": 300.0, "predict_1_ms": 15.0, "per_text_in_32_ms": 15.0}


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.classifier", description=__doc__.split("\n")[0])
    parser.add_argument("--n-train", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--skip-train", action="store_true", help="time predict_proba of the shipped default only")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from classifier.default_model import load_default
    from classifier.learned import ComplexityClassifier
    from classifier.seed import load_seed_data

    texts, labels, _ = load_seed_data()
    print(f"torch threads: {torch.get_num_threads()}")
    results: dict[str, float] = {}
    if not args.skip_train:
        train_texts, train_labels = texts[:args.n_train], labels[:args.n_train]
        start = time.perf_counter()
        clf = ComplexityClassifier.train(train_texts, train_labels, n_tiers=3)
        results["train_s"] = time.perf_counter() - start
        print(f"train on {len(train_texts)} texts ({clf.kind}): {results['train_s']:.1f} s "
              f"(budget {BUDGETS['train_s']:.0f} s)")
    clf = load_default()
    queries = texts[-32:]
    clf.predict_proba(queries)  # warm-up: load the encoder, first-call allocations
    results["predict_1_ms"] = _median_ms(lambda: clf.predict_proba(queries[:1]), args.repeats)
    predict_32 = _median_ms(lambda: clf.predict_proba(queries), max(5, args.repeats // 5))
    results["per_text_in_32_ms"] = predict_32 / len(queries)
    print(f"predict_proba, 1 text:   median {results['predict_1_ms']:.1f} ms (budget {BUDGETS['predict_1_ms']:.0f} ms)")
    print(f"predict_proba, 32 texts: median {predict_32:.1f} ms = {results['per_text_in_32_ms']:.2f} ms per text")
    if getattr(clf, "knn", None) is not None:
        weight = clf.knn_weight
        clf.knn_weight = 0.0  # the logistic half alone, same encoder pass
        alone = _median_ms(lambda: clf.predict_proba(queries[:1]), args.repeats)
        clf.knn_weight = weight
        print(f"1 text without the kNN half: median {alone:.1f} ms; with it / without: "
              f"{results['predict_1_ms'] / alone:.2f}x")
    for name, value in results.items():
        print(f"{name}: {value / BUDGETS[name]:.2f} of the budget")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
