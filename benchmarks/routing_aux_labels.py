"""A routing study on ZeroEval: does training on a second model family's outcomes help route the first?

    python -m benchmarks.routing_aux_labels [--cache-dir .bench/clf] [--repeats 3] [--weights 0,0.5,1]

ZeroEval rows carry the outcomes of two model trios on the same questions: Llama (3.8B / 8B / 70B, the trio the
router is judged on) and Qwen (3B / 7B / 72B; on MATH-L5 and CRUX only). A question hard for one family tends
to be hard for the other, so the Qwen labels are a second, noisy reading of the same difficulty. Each training
fold gets, for every training question with Qwen outcomes, a copy labelled with the cheapest correct Qwen tier
at `weight` (0: the shipped recipe alone); test folds hold the original questions only, scored against the
Llama outcomes. Same head as the shipped default (logistic on embedding + signals, C = 1e-3), same grouped,
repeated 5-fold cross-validation and metrics as `classifier.select_router`; a study, not a test.

A bound follows, on the questions with Qwen outcomes: the same head given the Qwen trio's outcomes on the very
question as three more inputs. No router has those at serving time; if even they do not lower the cost for 98%,
then how hard a question is for another family of the same sizes says little about which Llama tier solves it,
and a router reading the question alone cannot be expected to do better.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from classifier import cv_report, families
from classifier.cv import cross_val_proba, fmt, grouped_folds, near_duplicate_groups
from classifier.data import ZEROEVAL_COSTS, cheapest_correct, load_zeroeval
from classifier.features import feature_matrix


def out_of_fold(d: families.Inputs, aux_y: np.ndarray, has_aux: np.ndarray, weight: float, groups: np.ndarray,
                folds: int, repeats: int) -> np.ndarray:
    n = len(d.y)
    out = np.full((repeats, n, d.n_tiers), np.nan)
    for r in range(repeats):
        fold_of = grouped_folds(groups, folds, 1000 * r)
        for f in range(folds):
            test, train = np.nonzero(fold_of == f)[0], np.nonzero(fold_of != f)[0]
            extra = train[has_aux[train]] if weight > 0 else train[:0]
            x = np.vstack([d.x[train], d.x[extra]])
            y = np.concatenate([d.y[train], aux_y[extra]])
            w = np.concatenate([np.ones(len(train)), np.full(len(extra), weight)])
            head = families.fit_linear_head(x, y, w, d.n_tiers, 1e-3, 0)
            out[r, test] = head.proba(d.x[test])
    return out


def bound(d: families.Inputs, aux: np.ndarray, tasks: list[str], has_aux: np.ndarray, correct: np.ndarray,
          groups: np.ndarray, args) -> None:
    rows = np.nonzero(has_aux)[0]
    task_onehot = np.array([[t == name for name in sorted(set(tasks))] for t in tasks], dtype=np.float32)
    qwen = np.nan_to_num(aux).astype(np.float32)
    none = np.zeros((len(d.y), 0), dtype=np.float32)
    variants = {  # label: (embedding, extra inputs, C)
        "question text (the shipped inputs)": (d.e, d.f, 1e-3),
        "question text + Qwen outcomes": (d.e, np.hstack([d.f, qwen]), 1e-3),
        "Qwen outcomes + task only": (none, np.hstack([qwen, task_onehot]), 1.0),
    }
    print(f"bound on the {len(rows)} questions with Qwen outcomes (MATH-L5 and CRUX):")
    for label, (e, f, c) in variants.items():
        sub = families.Inputs(e[rows], f[rows], d.y[rows], None, d.n_tiers)
        oof = cross_val_proba(lambda tr, te: families.logistic(sub, tr, te, c), len(rows), d.n_tiers, groups[rows],
                              args.folds, args.repeats)
        report = cv_report.three_tier(oof, correct[rows], ZEROEVAL_COSTS, args.boot)
        print(f"  {label:36s}: cost for 98% {fmt(report['cost_at_98'], True)}; accuracy within 75% of its cost "
              f"{fmt(report['acc_at_75'], True)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.routing_aux_labels", description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--boot", type=int, default=300)
    ap.add_argument("--weights", default="0,0.5,1")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from classifier.evaluate import Embeddings

    parts = [load_zeroeval(s, args.data_dir) for s in ("train", "dev")]
    texts = parts[0].texts + parts[1].texts
    correct = np.vstack([p.correct for p in parts])
    aux = np.vstack([p.aux_correct for p in parts])
    has_aux = ~np.isnan(aux).any(axis=1)
    emb = Embeddings(args.cache_dir)(texts)
    d = families.Inputs(emb, feature_matrix(texts), cheapest_correct(correct), None, correct.shape[1])
    aux_y = cheapest_correct(np.nan_to_num(aux))
    groups = near_duplicate_groups(d.e)
    print(f"zeroeval: {len(texts)} rows, {int(has_aux.sum())} with Qwen outcomes; Llama and Qwen cheapest tier "
          f"agree on {np.mean(aux_y[has_aux] == d.y[has_aux]):.1%} of those; {args.folds}-fold x {args.repeats}")
    for weight in (float(w) for w in args.weights.split(",")):
        oof = out_of_fold(d, aux_y, has_aux, weight, groups, args.folds, args.repeats)
        report = cv_report.three_tier(oof, correct, ZEROEVAL_COSTS, args.boot)
        print(f"  qwen weight {weight:<4}: cost for 98% of always-large accuracy {fmt(report['cost_at_98'], True)}; "
              f"accuracy within 75% of its cost {fmt(report['acc_at_75'], True)}", flush=True)
    bound(d, aux, parts[0].groups + parts[1].groups, has_aux, correct, groups, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
