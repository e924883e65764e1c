"""Choose the training weights of the default's non-benchmark rows by cross-validation on OUTCOME labels (issue 26):
`python -m classifier.outcome_weights [--easy-weights 0,2,5,10,20,50] [--hard-weights 0,0.5,2] [--open-weights 0]`.

The default trains on the seed data: benchmark rows labelled by outcome (which model was right) at weight 1, and
the hand-labelled chat prompts (difficulty → tier) at a weight per label: "easy" rows (labelled small: the small
tier answers "hi", an outcome nobody doubts) and "hard" rows (labelled medium or large: people's impressions that
the small tier fails). A third kind, the open-ended prompts labelled by outcome
(`classifier.open_ended.outcome_labels`: the cheapest tier whose score is within a point of the large tier's, from
`python -m benchmarks.open_ended`), can be weighted too; by default it is not (weight 0): those 80 prompts are the
only open-ended check the default has not seen, and a 1.5B judge grading its own answers labels them. A fourth
kind is never trained on: the end-to-end workload's train tasks with every family tier's computed-truth outcome
(`classifier.task_outcomes`, from `python -m benchmarks.end_to_end.train_outcomes`). For every
triple (easy, hard, open-ended weight) the script cross-validates the mix: grouped 5-fold over all rows
(near-duplicate texts in one fold), the recipe's logistic head with C fixed at 1e-3 (the value its inner search
picks on this data), out-of-fold probabilities. It reports, per candidate:
- outcome log loss: the out-of-fold log loss of the benchmark rows (outcome labels; lower is better);
- open-ended APGR and CPT(50%): RouteLLM's metrics on the open-ended prompts' out-of-fold scores, weak = small,
  strong = large, quality = the judged / computed score, with 90% bootstrap intervals;
- workload APGR and CPT(50%): the same on the workload's train tasks, quality = right (1) or wrong (0);
- chat gate: the hand-labelled chat TRAINING prompts' same-category easy/hard pairs ordered right by their
  out-of-fold scores: a check that must stay at or above `PAIR_GATE`, not something to maximise;
- chat sanity pairs: a model trained on all rows of the mix, scored on the chat SANITY set's explicit pairs (never
  trained on, never used to choose): printed as the check the issue names, after the choice;
- where the weak model holds, per MMLU subject (`classifier.subject_outcomes`), for the chosen candidate and the
  one with the most chat weight: printed after the choice, not used for it.
The rule: among the candidates that pass the chat gate and whose outcome log loss is within `LOSS_SLACK` of the best,
the highest mean APGR over the two outcome-labelled sets (open-ended, workload; those at hand). Hand labels decide
nothing but the gate. The chosen candidate's open-ended figures were
selected on the same folds, so they lean optimistic by the spread between candidates (printed beside the choice).
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

import numpy as np

from classifier import cv_report, families
from classifier.chat_data import TRAIN_PATH, ChatSet, agreement, category_pairs, difficulty_score, load_chat, pair_order
from classifier.cv import bootstrap, cross_val_proba, fmt, near_duplicate_groups
from classifier.errors import ClassifierError
from classifier.features import feature_matrix
from classifier.open_ended import Outcomes, load_outcomes, outcome_labels
from classifier.seed import CHAT_SOURCE, OPEN_SOURCE, is_holdout, label_weight, load_seed_data
from classifier.subject_outcomes import format_rows, subject_rows
from classifier.task_outcomes import load_task_outcomes

PAIR_GATE = 0.95  # the chat training prompts' same-category pairs ordered right out of fold, at least
LOSS_SLACK = 0.005  # outcome log loss within this of the best candidate's
C = 1e-3


@dataclass
class Mix:
    texts: list[str]
    labels: np.ndarray
    kinds: np.ndarray  # "bench", "chat", "open" or "work" per row
    open_scores: dict[str, np.ndarray]  # tier -> score of each open row, in row order
    chat_pairs: list[tuple[int, int]] = field(default_factory=list)  # (easy, hard) mix rows, same category
    work_scores: dict[str, np.ndarray] = field(default_factory=dict)  # tier -> 1/0 of each work row (never trained)


@dataclass(frozen=True)
class Weights:
    easy: float  # chat rows labelled small
    hard: float  # chat rows labelled medium or large
    open: float  # open-ended rows labelled by outcome

    def __str__(self) -> str:
        return f"chat easy x{self.easy:<4g} hard x{self.hard:<4g} open x{self.open:<4g}"


@dataclass
class Candidate:
    weights: Weights
    outcome_log_loss: float
    open_report: dict  # cv_report.two_tier's
    work_report: dict  # the same on the workload's train tasks ({} without them)
    chat_gate: tuple[float, float, float]  # out-of-fold, chat training prompts' category pairs
    chat_pairs: tuple[float, float, float]  # the sanity set's explicit pairs
    scores: np.ndarray  # out-of-fold 1 - P(small) of every mix row (nan where not predicted)

    @property
    def outcome_apgr(self) -> float:
        """The mean APGR over the outcome-labelled sets at hand (open-ended prompts, workload tasks); 0 without."""
        apgrs = [r["apgr"][0] for r in (self.open_report, self.work_report) if r]
        return float(np.mean(apgrs)) if apgrs else 0.0


def build_mix(outcomes: Outcomes | None, tasks: Outcomes | None = None) -> Mix:
    """The default's training rows (seed rows outside the retrain hold-out) plus the scored open-ended prompts and
    the workload's train tasks (`classifier.task_outcomes`; kind "work", label 0, never trained)."""
    texts, labels, sources = load_seed_data()
    keep = [i for i, t in enumerate(texts) if not is_holdout(t) and not sources[i].startswith(OPEN_SOURCE)]
    kinds = ["chat" if sources[i].startswith(CHAT_SOURCE) else "bench" for i in keep]
    texts, labels = [texts[i] for i in keep], [labels[i] for i in keep]
    open_scores: dict[str, np.ndarray] = {}
    if outcomes is not None:
        rows, open_y = outcome_labels(outcomes)
        texts += [outcomes.texts[i] for i in rows]
        labels += open_y.tolist()
        kinds += ["open"] * len(rows)
        open_scores = {t: outcomes.scores[t][rows] for t in ("small", "medium", "large")}
    work_scores: dict[str, np.ndarray] = {}
    if tasks is not None:
        texts += tasks.texts
        labels += [0] * len(tasks.texts)
        kinds += ["work"] * len(tasks.texts)
        work_scores = tasks.scores
    train = load_chat(TRAIN_PATH)
    row_of = {t: i for i, t in enumerate(texts)}
    present = [i for i, t in enumerate(train.texts) if t in row_of]
    sub = ChatSet([train.ids[i] for i in present], [train.texts[i] for i in present], train.difficulty[present],
                  [train.categories[i] for i in present], [None] * len(present))
    pairs = [(row_of[sub.texts[e]], row_of[sub.texts[h]]) for e, h in category_pairs(sub)]
    return Mix(texts, np.asarray(labels), np.asarray(kinds), open_scores, pairs, work_scores)


def weights_of(mix: Mix, w: Weights) -> np.ndarray:
    """Each row's weight by `classifier.seed.label_weight`'s rule under `w`; the workload's rows ("work") 0."""
    return np.array([0.0 if kind == "work" else label_weight(kind, label, w.easy, w.hard, w.open)
                     for kind, label in zip(mix.kinds, mix.labels, strict=True)], dtype=float)


def evaluate_candidate(mix: Mix, d: families.Inputs, groups: np.ndarray, weights: Weights, sanity,
                       sanity_x: np.ndarray, args) -> Candidate:
    d.w = weights_of(mix, weights)
    train_rows = np.nonzero(d.w > 0)[0]
    bench = np.nonzero(mix.kinds == "bench")[0]
    opened = np.nonzero(mix.kinds == "open")[0]
    work = np.nonzero(mix.kinds == "work")[0]
    eval_rows = np.concatenate([bench, opened, work, np.nonzero(mix.kinds == "chat")[0]])
    oof = cross_val_proba(lambda tr, te: families.logistic(d, np.intersect1d(tr, train_rows), te, c=C),
                          len(mix.texts), 3, groups, args.folds, 1, seed=args.seed, eval_rows=eval_rows)
    loss = cv_report.log_loss_of(oof[:, bench], mix.labels[bench])
    report = (cv_report.two_tier(oof[:, opened], mix.open_scores["small"], mix.open_scores["large"],
                                 n_boot=args.boot, seed=args.seed) if len(opened) else {})
    work_report = (cv_report.two_tier(oof[:, work], mix.work_scores["small"], mix.work_scores["large"],
                                      n_boot=args.boot, seed=args.seed) if len(work) else {})
    scores = difficulty_score(oof[0])
    gate = bootstrap(lambda idx: pair_order(scores, [mix.chat_pairs[i] for i in idx]), len(mix.chat_pairs),
                     args.boot, args.seed)
    full = families.fit_linear_head(d.x[train_rows], d.y[train_rows], d.w[train_rows], 3, C, 0)
    pairs = agreement(difficulty_score(full.proba(sanity_x)), sanity, n_boot=args.boot, seed=args.seed)
    return Candidate(weights, loss, report, work_report, gate, pairs["explicit_pairs"], scores)


def choose(candidates: list[Candidate]) -> Candidate | None:
    """The rule of the module docstring; None when no candidate passes the chat check."""
    passing = [c for c in candidates if c.chat_gate[0] >= PAIR_GATE]
    if not passing:
        return None
    best_loss = min(c.outcome_log_loss for c in passing)
    near = [c for c in passing if c.outcome_log_loss <= best_loss + LOSS_SLACK]
    return max(near, key=lambda c: c.outcome_apgr)


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m classifier.outcome_weights", description=__doc__.split("\n")[0])
    parser.add_argument("--easy-weights", default="0,2,5,10,20,50", type=_floats, help="chat rows labelled small")
    parser.add_argument("--hard-weights", default="0,0.5,2", type=_floats, help="chat rows labelled medium or large")
    parser.add_argument("--open-weights", default="0", type=_floats,
                        help="open-ended rows; 0 by default: they are the default's only unseen open-ended check")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--boot", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None, help="keep embeddings here between runs")
    parser.add_argument("--data-dir", default=None, help="routing data, for the MMLU subjects (default "
                        "$AIO_ROUTING_DATA or ../shared/data/routing)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from classifier.evaluate import Embeddings
    from classifier.seed_embeddings import use_shipped

    try:
        outcomes = load_outcomes()
    except ClassifierError as exc:
        print(f"no open-ended outcomes ({exc}): candidates are compared on the benchmark rows only")
        outcomes = None
    try:
        tasks = load_task_outcomes()
    except ClassifierError as exc:
        print(f"no workload outcomes ({exc}): candidates are compared without them")
        tasks = None
    mix = build_mix(outcomes, tasks)
    emb = Embeddings(args.cache_dir)
    use_shipped(emb, mix.texts)
    sanity = load_chat()
    e = emb(mix.texts)
    d = families.Inputs(e, feature_matrix(mix.texts), mix.labels, None, 3, texts=mix.texts)
    sanity_x = np.hstack([emb(sanity.texts).astype(np.float64), feature_matrix(sanity.texts).astype(np.float64)])
    groups = near_duplicate_groups(e)
    counts = {k: int((mix.kinds == k).sum()) for k in ("bench", "chat", "open", "work")}
    print(f"mix: {counts}; {args.folds}-fold grouped CV, logistic head C={C}", flush=True)
    candidates = []
    grid = [Weights(ew, hw, ow) for ew in args.easy_weights for hw in args.hard_weights
            for ow in (args.open_weights if outcomes is not None else [0.0])]
    for weights in grid:
        c = evaluate_candidate(mix, d, groups, weights, sanity, sanity_x, args)
        candidates.append(c)
        parts = [f"{name} APGR {fmt(r['apgr'])} CPT(50%) {fmt(r['cpt50'], True)}"
                 for name, r in (("open", c.open_report), ("workload", c.work_report)) if r]
        print(f"{weights} outcome log loss {c.outcome_log_loss:.4f}  {'  '.join(parts)}  "
              f"chat gate (CV) {fmt(c.chat_gate, True)}", flush=True)
    chosen = choose(candidates)
    if chosen is None:
        print(f"no candidate orders {PAIR_GATE:.0%} of the chat training pairs out of fold: none may ship")
        return 1
    apgrs = [c.outcome_apgr for c in candidates]
    spread = f" (candidates' mean outcome APGR {min(apgrs):.3f}-{max(apgrs):.3f})"
    print(f"chosen: {chosen.weights}{spread}; the chat "
          f"sanity set's explicit pairs, trained on all the mix: {fmt(chosen.chat_pairs, True)}")
    heaviest = max(candidates, key=lambda c: (c.weights.hard, c.weights.easy, -c.weights.open))
    for c in [chosen] + ([heaviest] if heaviest is not chosen else []):
        try:
            rows = subject_rows(mix.texts, c.scores, args.data_dir)
        except (OSError, KeyError) as exc:
            print(f"no MMLU subjects ({exc}): set --data-dir or $AIO_ROUTING_DATA")
            break
        print(f"{c.weights}, out of fold:\n{format_rows(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
