"""Evaluate the learned classifier on the routing data:
`python -m classifier.evaluate [--data-dir DIR] [--split dev] [--head sklearn|auto|finetune] [--plot PATH]`.

- RouteLLM GSM8K and MMLU (two tiers; a classifier trained on that set's train split): CPT(50%), APGR and
  PGR at 20/30/50% strong calls, against random routing (CPT 50%).
- ZeroEval, three tiers (Llama trio; $0.0001 / $0.0005 / $0.003 per request; a classifier trained on the
  zeroeval train split; `--aux` adds the Qwen trio's outcomes on the same train questions as auxiliary rows): the router's
  rule (the cheapest tier t with P(label <= t) >= q) swept over q; cost and accuracy as fractions of always-large;
  the cheapest point with >= 98% of always-large accuracy; the curve is drawn to `docs/routing_cost_accuracy.png`.
Only train splits are used for training and model selection; the evaluated split is used for the report only.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path

import numpy as np

from classifier import routing_metrics as rm
from classifier.data import (REPO_ROOT, ROUTELLM_SETS, ZEROEVAL_COSTS, ZEROEVAL_TIERS, cheapest_correct, load_routellm,
                             load_zeroeval)

QUALITIES = tuple(np.round(np.linspace(0.0, 1.0, 101), 2))
TABLE_QUALITIES = tuple(np.round(np.arange(0.0, 1.0001, 0.05), 2))
AUX_WEIGHT = 0.5  # weight of a Qwen-labelled copy of a zeroeval train question


class Embeddings:
    """The default encoder's embeddings, memoised per text (and kept in `cache_dir/embeddings.npz` if given)."""

    def __init__(self, cache_dir: str | None = None) -> None:
        from classifier.encoder import Encoder

        self.encoder = Encoder.cached()
        self.path = Path(cache_dir) / "embeddings.npz" if cache_dir else None
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


def zeroeval_training_set(train, use_aux: bool = True) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Llama-trio labels; with `use_aux`, each question with Qwen outcomes again with the Qwen trio's label."""
    texts, labels, weights = list(train.texts), list(train.labels), [1.0] * len(train.texts)
    if use_aux and train.aux_correct is not None:
        have = ~np.isnan(train.aux_correct).any(axis=1)
        aux_labels = cheapest_correct(np.nan_to_num(train.aux_correct))
        for i in np.nonzero(have)[0]:
            texts.append(train.texts[i])
            labels.append(int(aux_labels[i]))
            weights.append(AUX_WEIGHT)
    return texts, np.asarray(labels), np.asarray(weights)


def _train(texts, labels, n_tiers, emb, args, weights=None):
    from classifier.learned import ComplexityClassifier

    start = time.perf_counter()
    e = emb(texts) if args.head != "finetune" else None
    clf = ComplexityClassifier.train(texts, [int(v) for v in labels], n_tiers=n_tiers, head=args.head,
                                     seed=args.seed, sample_weight=weights, embeddings=e)
    candidates = clf.metrics.get("candidates", {})
    if len(candidates) > 1:
        print("  validation log loss per head: " + ", ".join(f"{k} {v:.4f}" for k, v in candidates.items())
              + f" -> {clf.kind}")
    return clf, time.perf_counter() - start


def _predict(clf, texts, emb):
    return clf.predict_proba(texts, embeddings=emb(texts) if clf.kind == "sklearn-head" else None)


def evaluate_routellm(name: str, args, emb) -> dict:
    train, ev = load_routellm(name, "train", args.data_dir), load_routellm(name, args.split, args.data_dir)
    clf, seconds = _train(train.texts, train.labels, 2, emb, args)
    scores = rm.strong_scores(_predict(clf, ev.texts, emb))
    weak, strong = ev.correct[:, 0], ev.correct[:, 1]
    out = {"set": name, "n_train": len(train.texts), "n_eval": len(ev.texts), "weak": weak.mean(),
           "strong": strong.mean(), "cpt50": rm.cpt(scores, weak, strong, 0.5), "apgr": rm.apgr(scores, weak, strong),
           "pgr": {c: rm.pgr(scores, weak, strong, c) for c in (0.2, 0.3, 0.5)}, "kind": clf.kind,
           "version": clf.version, "train_seconds": seconds, "val": clf.metrics.get("val_log_loss")}
    print(f"RouteLLM {name}: trained on {out['n_train']} ({clf.kind}, {seconds:.0f} s), {args.split} n={out['n_eval']}, "
          f"weak {out['weak']:.3f} strong {out['strong']:.3f}")
    print(f"  CPT(50%) = {out['cpt50']:.1%}   APGR = {out['apgr']:.3f}   PGR@20% = {out['pgr'][0.2]:.3f}   "
          f"PGR@30% = {out['pgr'][0.3]:.3f}   PGR@50% = {out['pgr'][0.5]:.3f}   (random: CPT 50%, APGR ~0.55)")
    return out


def evaluate_zeroeval(args, emb) -> dict:
    train, ev = load_zeroeval("train", args.data_dir), load_zeroeval(args.split, args.data_dir)
    texts, labels, weights = zeroeval_training_set(train, use_aux=args.aux)
    clf, seconds = _train(texts, labels, 3, emb, args, weights)
    proba = _predict(clf, ev.texts, emb)
    rows = rm.cost_accuracy_sweep(proba, ev.correct, ZEROEVAL_COSTS, QUALITIES)
    top = ev.correct[:, -1].mean()
    print(f"\nZeroEval 3 tiers (Llama {'/'.join(ZEROEVAL_TIERS)}): trained on {len(train.texts)} questions"
          f"{'' if not args.aux else f' + {len(texts) - len(train.texts)} Qwen-labelled copies (weight {AUX_WEIGHT})'}"
          f" ({clf.kind}, {seconds:.0f} s); {args.split} n={len(ev.texts)}")
    for t, name in enumerate(ZEROEVAL_TIERS):
        acc = ev.correct[:, t].mean()
        print(f"  always {name:6s}: accuracy {acc:.3f} ({acc / top:.1%} of large), cost {ZEROEVAL_COSTS[t] / ZEROEVAL_COSTS[-1]:.1%}")
    oracle = cheapest_correct(ev.correct)
    acc, cost = rm.routed_outcome(oracle, ev.correct, ZEROEVAL_COSTS)
    print(f"  oracle (cheapest correct): accuracy {acc / top:.1%} of large at {cost / ZEROEVAL_COSTS[-1]:.1%} of its cost")
    print("     q   accuracy  acc/large  cost/large  small  medium  large")
    by_q = {r["quality"]: r for r in rows}
    for q in TABLE_QUALITIES:
        r = by_q[float(q)]
        print(f"  {q:4.2f}   {r['accuracy']:.3f}    {r['accuracy_frac']:6.1%}    {r['cost_frac']:6.1%}    "
              f"{r['share_0']:5.1%} {r['share_1']:6.1%} {r['share_2']:6.1%}")
    best = rm.best_operating_point(rows, 0.98)
    acc60 = max((r for r in rows if r["cost_frac"] <= 0.60), key=lambda r: r["accuracy_frac"])
    if best is not None:
        verdict = "goal met" if best["cost_frac"] <= 0.60 else "goal (<= 60% cost) NOT met"
        print(f"  operating point: q = {best['quality']:.2f}: {best['accuracy_frac']:.1%} of always-large accuracy "
              f"at {best['cost_frac']:.1%} of its cost ({verdict})")
    else:
        print("  no q reaches 98% of always-large accuracy")
    print(f"  best accuracy within 60% of the cost: {acc60['accuracy_frac']:.1%} (q = {acc60['quality']:.2f}, "
          f"cost {acc60['cost_frac']:.1%})")
    plot(rows, ev, best, Path(args.plot))
    return {"rows": rows, "best": best, "acc_at_cost60": acc60, "kind": clf.kind, "train_seconds": seconds}


def plot(rows, ev, best, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    top_acc, top_cost = ev.correct[:, -1].mean(), ZEROEVAL_COSTS[-1]
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    ax.plot([r["cost_frac"] for r in rows], [r["accuracy_frac"] for r in rows], "-o", ms=2.5,
            label="learned router (q swept 0..1)")
    for t, name in enumerate(ZEROEVAL_TIERS):
        ax.plot(ZEROEVAL_COSTS[t] / top_cost, ev.correct[:, t].mean() / top_acc, "s", label=f"always {name}")
    xs = np.linspace(ZEROEVAL_COSTS[0] / top_cost, 1, 50)  # random small/large mixes
    a0 = ev.correct[:, 0].mean() / top_acc
    ax.plot(xs, a0 + (1 - a0) * (xs - xs[0]) / (1 - xs[0]), ":", color="gray", label="random small/large mix")
    oracle = cheapest_correct(ev.correct)
    acc, cost = rm.routed_outcome(oracle, ev.correct, ZEROEVAL_COSTS)
    ax.plot(cost / top_cost, acc / top_acc, "*", ms=10, label="oracle")
    ax.axhline(0.98, color="red", lw=0.8, ls="--")
    ax.axvline(0.60, color="red", lw=0.8, ls="--", label="goal: 98% accuracy at <= 60% cost")
    if best is not None:
        ax.annotate(f"q={best['quality']:.2f}", (best["cost_frac"], best["accuracy_frac"]), textcoords="offset points",
                    xytext=(5, -12))
    ax.set_xlabel("cost (fraction of always-large)")
    ax.set_ylabel("accuracy (fraction of always-large)")
    ax.set_title(f"ZeroEval, Llama trio, {len(ev.texts)} questions")
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
    parser.add_argument("--split", default="dev")
    parser.add_argument("--head", default="sklearn", choices=("auto", "sklearn", "finetune"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--aux", action="store_true", help="zeroeval: add Qwen-labelled copies of the train questions "
                        "(no gain in cross-validation on train: off by default)")
    parser.add_argument("--only", default=",".join((*ROUTELLM_SETS, "zeroeval")), help="comma-separated subset")
    parser.add_argument("--plot", default=str(REPO_ROOT / "docs" / "routing_cost_accuracy.png"))
    parser.add_argument("--cache-dir", default=None, help="keep embeddings here between runs")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    emb = Embeddings(args.cache_dir)
    only = set(args.only.split(","))
    for name in ROUTELLM_SETS:
        if name in only:
            evaluate_routellm(name, args, emb)
    if "zeroeval" in only:
        evaluate_zeroeval(args, emb)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
