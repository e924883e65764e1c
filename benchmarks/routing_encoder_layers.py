"""A routing study: do other poolings of the same MiniLM-L6 pass route better than its sentence embedding?

    python -m benchmarks.routing_encoder_layers [--only gsm8k,zeroeval,mmlu] [--repeats 2]

The shipped head reads the encoder's sentence embedding (mean of the last layer, L2-normalised) plus the cheap
signals. The same forward pass also gives every layer's token states at no extra latency, so richer inputs cost
nothing at serving time. Variants, each L2-normalised per part and concatenated with the signals, all into the
shipped head unchanged (logistic, C = 1e-3, no tuning):
- last-mean: the shipped embedding (the baseline);
- mid+last: the mean of layer 3 and of layer 6;
- last-mean+max: the mean and the max over tokens of layer 6.
Grouped, repeated 5-fold cross-validation over train+dev, as `classifier.select_router`; a study, not a test.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from classifier import cv_report, families
from classifier.cv import cross_val_proba, near_duplicate_groups
from classifier.data import ZEROEVAL_COSTS, cheapest_correct, load_routellm, load_zeroeval
from classifier.features import feature_matrix

VARIANTS = ("last-mean", "mid+last", "last-mean+max")


def pooled(texts: list[str], batch_size: int = 32) -> dict[str, np.ndarray]:
    """Every variant's embedding for `texts`, from one forward pass per batch."""
    import torch

    from classifier.encoder import MAX_TOKENS, Encoder, mean_pool

    enc = Encoder.cached()
    parts: dict[str, list[np.ndarray]] = {"mean3": [], "mean6": [], "max6": []}
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            batch = enc.tokenizer(texts[i:i + batch_size], padding=True, truncation=True, max_length=MAX_TOKENS,
                                  return_tensors="pt")
            states = enc.model(**batch, output_hidden_states=True).hidden_states
            for name, layer in (("mean3", 3), ("mean6", 6)):
                parts[name].append(mean_pool(states[layer], batch["attention_mask"]).numpy())
            padding = batch["attention_mask"].unsqueeze(-1) == 0
            parts["max6"].append(states[6].masked_fill(padding, -1e4).amax(1).numpy())
    unit = {k: _unit(np.vstack(v)) for k, v in parts.items()}
    return {"last-mean": unit["mean6"], "mid+last": np.hstack([unit["mean3"], unit["mean6"]]),
            "last-mean+max": np.hstack([unit["mean6"], unit["max6"]])}


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-12)).astype(np.float32)


def study(name: str, args) -> None:
    if name == "zeroeval":
        parts = [load_zeroeval(s, args.data_dir) for s in ("train", "dev")]
    else:
        parts = [load_routellm(name, s, args.data_dir) for s in ("train", "dev")]
    texts = parts[0].texts + parts[1].texts
    correct = np.vstack([p.correct for p in parts])
    embeddings = pooled(texts)
    signals, labels = feature_matrix(texts), cheapest_correct(correct)
    groups = near_duplicate_groups(embeddings["last-mean"])
    print(f"\n{name}: {len(texts)} rows, {args.folds}-fold x {args.repeats}", flush=True)
    for variant in VARIANTS:
        d = families.Inputs(embeddings[variant], signals, labels, None, correct.shape[1])
        oof = cross_val_proba(lambda tr, te: families.logistic(d, tr, te, 1e-3), len(texts), d.n_tiers, groups,
                              args.folds, args.repeats)
        print(f"  {variant:14s} {cv_report.headline(oof, correct, ZEROEVAL_COSTS, args.boot)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.routing_encoder_layers",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--only", default="gsm8k,zeroeval,mmlu")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--boot", type=int, default=300)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name in args.only.split(","):
        study(name, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
