"""Choose the router family by grouped, repeated k-fold cross-validation over train+dev:
`python -m classifier.select_router [--cache-dir DIR] [--repeats 2] [--only gsm8k,mmlu,zeroeval,chat]`.

Each benchmark (RouteLLM GSM8K and MMLU, two tiers; ZeroEval, three) is cross-validated on its own train+dev rows,
folds grouped by near-duplicate embeddings. `chat` cross-validates the mix the shipped default trains on (all
benchmark train rows + the hand-labelled chat training prompts at a weight) and scores only the chat rows: the
share of same-category (clearly easy, clearly hard) pairs ordered right, and Kendall's tau. The chat sanity set
is not read here. Every figure has a 90% bootstrap interval.
"""
from __future__ import annotations

import argparse
import os
from functools import partial

import numpy as np

from classifier import cv_report, families
from classifier.chat_data import TRAIN_PATH, category_pairs, difficulty_score, difficulty_to_tier, load_chat, pair_order
from classifier.cv import bootstrap, cross_val_proba, fmt, near_duplicate_groups
from classifier.data import ROUTELLM_SETS, ZEROEVAL_COSTS, cheapest_correct, load_routellm, load_zeroeval
from classifier.features import feature_matrix

GRID = {
    "logistic-emb C=1e-3": partial(families.logistic, c=1e-3, emb_only=True),
    "logistic C=3e-4": partial(families.logistic, c=3e-4),
    "logistic C=1e-3": partial(families.logistic, c=1e-3),
    "logistic C=3e-3": partial(families.logistic, c=3e-3),
    "knn k=25": partial(families.knn, k=25),
    "knn k=50": partial(families.knn, k=50),
    "knn k=100": partial(families.knn, k=100),
    "knn k=200": partial(families.knn, k=200),
    "mlp h=64 alpha=10": partial(families.mlp, alpha=10.0),
    "ensemble C=1e-3 k=100 w=0.3": partial(families.ensemble, c=1e-3, k=100, knn_weight=0.3),
    "ensemble C=1e-3 k=100 w=0.5": partial(families.ensemble, c=1e-3, k=100, knn_weight=0.5),
    "ensemble C=1e-3 k=100 w=0.7": partial(families.ensemble, c=1e-3, k=100, knn_weight=0.7),
    "finetune (BERT-style, 2 epochs)": families.finetune,  # minutes per fold on a 2-core CPU: ask for it
}


def pick_grid(families_arg: str) -> dict:
    """The grid rows whose labels contain one of the comma-separated substrings; all but finetune when empty."""
    wanted = [w for w in families_arg.split(",") if w]
    return {k: v for k, v in GRID.items() if (any(w in k for w in wanted) if wanted else not k.startswith("finetune"))}


def benchmark(name: str, emb, data_dir=None):
    """(texts, inputs, correct) of a benchmark's train+dev rows."""
    if name == "zeroeval":
        parts = [load_zeroeval(s, data_dir) for s in ("train", "dev")]
    else:
        parts = [load_routellm(name, s, data_dir) for s in ("train", "dev")]
    texts = parts[0].texts + parts[1].texts
    correct = np.vstack([p.correct for p in parts])
    inputs = families.Inputs(emb(texts), feature_matrix(texts), cheapest_correct(correct), None, correct.shape[1],
                             texts=texts)
    return texts, inputs, correct


def run_benchmark(name: str, emb, args, grid) -> dict:
    texts, d, correct = benchmark(name, emb, args.data_dir)
    groups = near_duplicate_groups(d.e)
    print(f"\n{name}: {len(texts)} train+dev rows, {len(set(groups.tolist()))} near-duplicate groups, "
          f"{args.folds}-fold x {args.repeats}", flush=True)
    results = {}
    for label, fn in grid.items():
        oof = cross_val_proba(lambda tr, te: fn(d, tr, te), len(texts), d.n_tiers, groups, args.folds, args.repeats)
        loss = cv_report.log_loss_of(oof, d.y)
        if d.n_tiers == 2:
            rep = cv_report.two_tier(oof, correct[:, 0], correct[:, 1], n_boot=args.boot)
            print(f"  {label:30s} logloss {loss:.4f}  {cv_report.format_two_tier(rep)}", flush=True)
        else:
            rep = cv_report.three_tier(oof, correct, ZEROEVAL_COSTS, n_boot=max(50, args.boot // 5))
            print(f"  {label:30s} logloss {loss:.4f}  {cv_report.format_three_tier(rep)}", flush=True)
        results[label] = {"log_loss": loss, **rep}
    return results


def chat_mix(emb, data_dir=None, chat_weight: float = 5.0):
    """A training mix like the shipped default's: seed rows (3 tiers) + every chat training prompt at `chat_weight`;
    returns (inputs, chat row indices, chat set)."""
    from classifier.seed import CHAT_SOURCE, build_seed_rows

    rows = [(t, lab) for t, lab, src in zip(*build_seed_rows(data_dir)) if not src.startswith(CHAT_SOURCE)]
    texts, labels = [t for t, _ in rows], [lab for _, lab in rows]
    chat = load_chat(TRAIN_PATH)
    all_texts = texts + chat.texts
    y = np.concatenate([np.asarray(labels), difficulty_to_tier(chat.difficulty)])
    w = np.concatenate([np.ones(len(texts)), np.full(len(chat.texts), chat_weight)])
    d = families.Inputs(emb(all_texts), feature_matrix(all_texts), y, w, 3, texts=all_texts)
    return d, np.arange(len(texts), len(all_texts)), chat


def run_chat(emb, args, grid) -> dict:
    results = {}
    for weight in args.chat_weights:
        d, rows, chat = chat_mix(emb, args.data_dir, weight)
        groups = np.arange(len(d.y))
        pairs = category_pairs(chat)
        print(f"\nchat (benchmark train rows + {len(rows)} chat prompts at weight {weight}; scored on the chat "
              f"prompts, {len(pairs)} same-category easy/hard pairs)", flush=True)
        for label, fn in grid.items():
            oof = cross_val_proba(lambda tr, te: fn(d, tr, te), len(d.y), 3, groups, args.folds, args.repeats,
                                  eval_rows=rows)[:, rows]
            scores = np.mean([difficulty_score(oof[r]) for r in range(oof.shape[0])], axis=0)
            order = bootstrap(lambda idx: pair_order(scores, [pairs[i] for i in idx]), len(pairs), args.boot)
            from scipy.stats import kendalltau

            tau = bootstrap(lambda idx: kendalltau(scores[idx], chat.difficulty[idx]).statistic, len(rows), args.boot)
            print(f"  {label:30s} pairs ordered {fmt(order, True)}  Kendall tau {fmt(tau)}", flush=True)
            results[(weight, label)] = {"pair_order": order, "tau": tau}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m classifier.select_router", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--cache-dir", default=None, help="keep embeddings here between runs")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--boot", type=int, default=500)
    parser.add_argument("--only", default="gsm8k,mmlu,zeroeval,chat")
    parser.add_argument("--families", default="", help="comma-separated substrings of the grid labels to run "
                        "(default: all but finetune, which takes minutes per fold)")
    parser.add_argument("--chat-weights", default="1,5,20,50", type=lambda s: [float(v) for v in s.split(",")])
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from classifier.evaluate import Embeddings

    emb = Embeddings(args.cache_dir)
    grid = pick_grid(args.families)
    only = args.only.split(",")
    for name in (*ROUTELLM_SETS, "zeroeval"):
        if name in only:
            run_benchmark(name, emb, args, grid)
    if "chat" in only:
        run_chat(emb, args, grid)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
