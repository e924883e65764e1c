"""Evaluate the learned classifier: `python -m classifier.evaluate [--cache-dir DIR] [--folds 5] [--repeats 3]
[--only gsm8k,mmlu,zeroeval,chat,open] [--plot PATH]`.

Every figure comes from grouped, repeated k-fold cross-validation over each data set's train+dev rows (folds
grouped so that near-duplicate questions never straddle a train/test boundary; `classifier.cv`), trained with
the public recipe (`ComplexityClassifier.train`, default options) on the other folds, and is printed with a 90%
bootstrap interval over queries (`classifier.cv_report`). No single dev split, no threshold statistic alone:
- RouteLLM GSM8K and MMLU (two tiers): APGR, PGR at 20/30/50% strong calls, and CPT(50%) (unstable where the PGR
  curve is flat near 0.5: read it with its interval);
- ZeroEval, three tiers (Llama trio; $0.0001 / $0.0005 / $0.003 per request): the router's rule swept over the
  quality knob q; the cost needed for 98% of always-large accuracy, the accuracy within 75% of its cost; the curve
  (out-of-fold, first repeat) is drawn to `docs/routing_cost_accuracy.png`;
- every data set: the calibration of the score the router thresholds, P(tier t is good enough), as the expected
  calibration error over 10 bins, out of fold;
- chat: the shipped default against the hand-labelled chat sanity set (`classifier/data`): Kendall's tau, the
  share of explicit easy/hard pairs and of same-category clearly-easy/clearly-hard pairs ordered right, and the
  tier chit-chat gets;
- open: the shipped default on the open-ended set scored by outcomes (`classifier.open_ended`; produced by
  `python -m benchmarks.open_ended`): APGR, CPT(50%) and PGR at 20/30/50% with small and with medium as the weak
  tier, the router's mean score against the judged gap per category, and their Spearman correlation per prompt.
"""
from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

import numpy as np

from classifier import cv_report, open_ended, routing_metrics as rm
from classifier.cv import fmt
from classifier.data import (REPO_ROOT, ROUTELLM_SETS, ZEROEVAL_COSTS, ZEROEVAL_TIERS, cheapest_correct, load_routellm,
                             load_zeroeval)

QUALITIES = tuple(np.round(np.linspace(0.0, 1.0, 101), 2))  # the table and the plot
TABLE_QUALITIES = tuple(np.round(np.arange(0.0, 1.0001, 0.05), 2))


class Embeddings:
    """The training recipe's encoder's embeddings (`RECIPE_ENCODER`), memoised per text (and kept in
    `cache_dir/embeddings-<encoder>.npz` if given)."""

    def __init__(self, cache_dir: str | None = None) -> None:
        from classifier.encoder import RECIPE_ENCODER, Encoder

        self.encoder = Encoder.cached(RECIPE_ENCODER)
        tag = RECIPE_ENCODER.replace("@", "-").replace("=", "").replace(",", "-")
        self.path = Path(cache_dir) / f"embeddings-{tag}.npz" if cache_dir else None
        self.memo: dict[str, np.ndarray] = {}
        if self.path is not None and self.path.is_file():
            with np.load(self.path, allow_pickle=False) as z:
                self.memo.update(zip(z["keys"].tolist(), z["rows"]))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()

    def __call__(self, texts: list[str]) -> np.ndarray:
        keys = [self.key(t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts) if k not in self.memo}
        if missing:
            rows = self.encoder.encode(list(missing.values()))
            self.memo.update(zip(missing, rows))
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                np.savez(self.path, keys=np.array(list(self.memo)), rows=np.stack(list(self.memo.values())))
        return np.stack([self.memo[k] for k in keys]) if texts else np.zeros((0, self.encoder.dim), np.float32)


def recipe_cv(texts, labels, n_tiers, emb, args, weights=None, groups=None) -> np.ndarray:
    """(repeats, n, n_tiers) out-of-fold probabilities of `ComplexityClassifier.train` with default options."""
    from classifier.cv import cross_val_proba, near_duplicate_groups
    from classifier.learned import ComplexityClassifier

    e = emb(texts)
    groups = near_duplicate_groups(e) if groups is None else groups
    labels = np.asarray(labels)

    def fit_predict(train, test):
        clf = ComplexityClassifier.train([texts[i] for i in train], [int(v) for v in labels[train]], n_tiers=n_tiers,
                                         head="sklearn", seed=args.seed, embeddings=e[train],
                                         sample_weight=None if weights is None else weights[train])
        return clf.predict_proba([texts[i] for i in test], embeddings=e[test])

    print(f"  {len(texts)} rows, {len(set(groups.tolist()))} near-duplicate groups, {args.folds}-fold x "
          f"{args.repeats} repeats", flush=True)
    return cross_val_proba(fit_predict, len(texts), n_tiers, groups, args.folds, args.repeats, seed=args.seed)


def evaluate_routellm(name: str, args, emb) -> dict:
    parts = [load_routellm(name, s, args.data_dir) for s in ("train", "dev")]
    texts, correct = parts[0].texts + parts[1].texts, np.vstack([p.correct for p in parts])
    print(f"RouteLLM {name} (weak {correct[:, 0].mean():.3f}, strong {correct[:, 1].mean():.3f}; random routing: "
          f"CPT 50%, APGR ~0.55)", flush=True)
    labels = cheapest_correct(correct)
    oof = recipe_cv(texts, labels, 2, emb, args)
    report = cv_report.two_tier(oof, correct[:, 0], correct[:, 1], n_boot=args.boot, seed=args.seed)
    print("  " + cv_report.format_two_tier(report), flush=True)
    report.update(cv_report.calibration(oof, labels, n_boot=max(100, args.boot // 5), seed=args.seed))
    print("  " + cv_report.format_calibration(report, ("weak", "strong")), flush=True)
    return report


def evaluate_zeroeval(args, emb) -> dict:
    parts = [load_zeroeval(s, args.data_dir) for s in ("train", "dev")]
    texts, correct = parts[0].texts + parts[1].texts, np.vstack([p.correct for p in parts])
    print(f"\nZeroEval 3 tiers (Llama {'/'.join(ZEROEVAL_TIERS)})", flush=True)
    labels = cheapest_correct(correct)
    oof = recipe_cv(texts, labels, 3, emb, args)
    top = correct[:, -1].mean()
    for t, name in enumerate(ZEROEVAL_TIERS):
        acc = correct[:, t].mean()
        print(f"  always {name:6s}: accuracy {acc:.3f} ({acc / top:.1%} of large), cost "
              f"{ZEROEVAL_COSTS[t] / ZEROEVAL_COSTS[-1]:.1%}")
    acc, cost = rm.routed_outcome(cheapest_correct(correct), correct, ZEROEVAL_COSTS)
    print(f"  oracle (cheapest correct): accuracy {acc / top:.1%} of large at {cost / ZEROEVAL_COSTS[-1]:.1%} of its "
          "cost")
    rows = rm.cost_accuracy_sweep(oof[0], correct, ZEROEVAL_COSTS, QUALITIES)
    print("     q   accuracy  acc/large  cost/large  small  medium  large   (out-of-fold, first repeat)")
    by_q = {r["quality"]: r for r in rows}
    for q in TABLE_QUALITIES:
        r = by_q[float(q)]
        print(f"  {q:4.2f}   {r['accuracy']:.3f}    {r['accuracy_frac']:6.1%}    {r['cost_frac']:6.1%}    "
              f"{r['share_0']:5.1%} {r['share_1']:6.1%} {r['share_2']:6.1%}")
    report = cv_report.three_tier(oof, correct, ZEROEVAL_COSTS, n_boot=max(100, args.boot // 5), seed=args.seed)
    print("  " + cv_report.format_three_tier(report), flush=True)
    report.update(cv_report.calibration(oof, labels, n_boot=max(100, args.boot // 5), seed=args.seed))
    print("  " + cv_report.format_calibration(report, ZEROEVAL_TIERS), flush=True)
    plot(rows, correct, rm.best_operating_point(rows, 0.98), Path(args.plot))
    return report


def evaluate_chat(args, emb) -> dict:
    """The shipped default (or `--classifier`) against the chat sanity set."""
    from classifier.chat_data import agreement, difficulty_score, explicit_pairs, load_chat
    from classifier.learned import load_folder

    chat = load_chat()
    clf = load_folder(args.classifier) if args.classifier else __import__("classifier").load_default()
    proba = clf.predict_proba(chat.texts)
    scores = difficulty_score(proba)
    result = agreement(scores, chat, n_boot=args.boot, seed=args.seed)
    print(f"\nchat sanity set ({len(chat.texts)} hand-labelled prompts), classifier {clf.version}; score 1 - P(small)")
    print(f"  Kendall tau {fmt(result['kendall_tau'])}   explicit pairs ordered {fmt(result['explicit_pairs'], True)}"
          f"   same-category easy/hard pairs ordered {fmt(result['category_pairs'], True)}")
    for e, h in explicit_pairs(chat):
        if scores[h] <= scores[e]:
            print(f"  misordered: {scores[e]:.3f} {chat.texts[e][:50]!r}  >=  {scores[h]:.3f} {chat.texts[h][:50]!r}")
    chit = [i for i, (c, d) in enumerate(zip(chat.categories, chat.difficulty)) if c == "greeting" and d == 1]
    for q in (0.5, 0.8, 0.9):
        tiers = rm.route_tiers(proba[chit], q)
        print(f"  chit-chat ({len(chit)} prompts) at quality {q}: small/medium/large "
              f"{np.bincount(tiers, minlength=3).tolist()}")
    return result


def evaluate_open(args) -> open_ended.OpenEndedReport | None:
    """The shipped default (or `--classifier`) on the open-ended set's outcomes, if they have been produced."""
    from classifier.learned import load_folder

    path = Path(args.open_outcomes)
    if not path.is_file():
        print(f"\nopen-ended set: no outcomes at {path}; produce them with `{open_ended.PRODUCE}` (the family demo "
              "answers and judges every prompt)")
        return None
    outcomes = open_ended.load_outcomes(path)
    clf = load_folder(args.classifier) if args.classifier else __import__("classifier").load_default()
    report = open_ended.evaluate(outcomes, clf.predict_proba(outcomes.texts), n_boot=args.boot, seed=args.seed)
    print(f"\nopen-ended set ({len(outcomes.texts)} prompts scored by outcome), classifier {clf.version}")
    print(open_ended.format_report(report), flush=True)
    return report


def plot(rows, correct, best, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    top_acc, top_cost = correct[:, -1].mean(), ZEROEVAL_COSTS[-1]
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    ax.plot([r["cost_frac"] for r in rows], [r["accuracy_frac"] for r in rows], "-o", ms=2.5,
            label="learned router (q swept 0..1)")
    for t, name in enumerate(ZEROEVAL_TIERS):
        ax.plot(ZEROEVAL_COSTS[t] / top_cost, correct[:, t].mean() / top_acc, "s", label=f"always {name}")
    xs = np.linspace(ZEROEVAL_COSTS[0] / top_cost, 1, 50)  # random small/large mixes
    a0 = correct[:, 0].mean() / top_acc
    ax.plot(xs, a0 + (1 - a0) * (xs - xs[0]) / (1 - xs[0]), ":", color="gray", label="random small/large mix")
    oracle = cheapest_correct(correct)
    acc, cost = rm.routed_outcome(oracle, correct, ZEROEVAL_COSTS)
    ax.plot(cost / top_cost, acc / top_acc, "*", ms=10, label="oracle")
    ax.axhline(0.98, color="red", lw=0.8, ls="--")
    ax.axvline(0.75, color="red", lw=0.8, ls="--", label="goal: 98% accuracy at <= 75% cost")
    if best is not None:
        ax.annotate(f"q={best['quality']:.2f}", (best["cost_frac"], best["accuracy_frac"]), textcoords="offset points",
                    xytext=(5, -12))
    ax.set_xlabel("cost (fraction of always-large)")
    ax.set_ylabel("accuracy (fraction of always-large)")
    ax.set_title(f"ZeroEval, Llama trio, {len(correct)} questions (out-of-fold)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"  wrote {path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m classifier.evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=None, help="default: $AIO_ROUTING_DATA or ../shared/data/routing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap resamples for the intervals")
    parser.add_argument("--only", default=",".join((*ROUTELLM_SETS, "zeroeval", "chat", "open")),
                        help="comma-separated subset")
    parser.add_argument("--classifier", default=None, help="chat, open: a classifier folder (default: the shipped one)")
    parser.add_argument("--open-outcomes", default=str(open_ended.OUTCOMES_PATH),
                        help="open: the outcomes file `python -m benchmarks.open_ended` wrote")
    parser.add_argument("--plot", default=str(REPO_ROOT / "docs" / "routing_cost_accuracy.png"))
    parser.add_argument("--cache-dir", default=None, help="keep embeddings here between runs")
    args = parser.parse_args(argv)
    if args.folds < 2 or args.repeats < 1 or args.boot < 10:
        parser.error("--folds must be >= 2, --repeats >= 1, --boot >= 10")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    only = set(args.only.split(","))
    emb = Embeddings(args.cache_dir) if only & {*ROUTELLM_SETS, "zeroeval"} else None  # loads the encoder
    for name in ROUTELLM_SETS:
        if name in only:
            evaluate_routellm(name, args, emb)
    if "zeroeval" in only:
        evaluate_zeroeval(args, emb)
    if "chat" in only:
        evaluate_chat(args, emb)
    if "open" in only:
        evaluate_open(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
