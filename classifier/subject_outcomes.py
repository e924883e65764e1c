"""Where the weak model holds, by MMLU subject (issue 26): the seed data's outcomes per subject (weak and strong
accuracy, their gap) beside a router's mean "needs the strong model" score on the same rows, and the Spearman
correlation of the two across subjects. A router that learned from outcomes sends the subjects with a large gap
up and keeps those where the weak model holds (the gap near 0) down."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_ROWS = 20  # subjects with fewer scored rows are left out of the table and the correlation


@dataclass
class SubjectRow:
    subject: str
    n: int
    weak: float  # accuracy
    strong: float
    router: float  # mean 1 - P(small) of its rows


def subject_rows(texts: list[str], scores: np.ndarray, data_dir=None) -> list[SubjectRow]:
    """Rows of `texts` (with their router scores) that are RouteLLM MMLU train questions, per subject."""
    from classifier.data import load_routellm

    mmlu = load_routellm("mmlu", "train", data_dir)
    where = {t: i for i, t in enumerate(mmlu.texts)}
    by_subject: dict[str, list[tuple[int, float]]] = {}
    for text, score in zip(texts, scores):
        i = where.get(text)
        if i is not None and not np.isnan(score):
            by_subject.setdefault(mmlu.groups[i], []).append((i, float(score)))
    out = []
    for subject, items in sorted(by_subject.items()):
        if len(items) >= MIN_ROWS:
            idx = [i for i, _ in items]
            out.append(SubjectRow(subject, len(items), float(mmlu.correct[idx, 0].mean()),
                                  float(mmlu.correct[idx, 1].mean()), float(np.mean([s for _, s in items]))))
    return out


def correlation(rows: list[SubjectRow]) -> float:
    """Spearman of the router's mean score against the strong - weak gap, across subjects."""
    from scipy.stats import spearmanr

    if len(rows) < 3:
        return float("nan")
    return float(spearmanr([r.router for r in rows], [r.strong - r.weak for r in rows]).statistic)


def format_rows(rows: list[SubjectRow], show: int = 5) -> str:
    ordered = sorted(rows, key=lambda r: r.strong - r.weak)
    lines = [f"  MMLU subjects (>= {MIN_ROWS} rows: {len(rows)}), Spearman(router score, strong - weak gap) "
             f"{correlation(rows):.3f}; the {show} with the smallest and the largest gap:"]
    for r in ordered[:show] + ordered[-show:]:
        lines.append(f"    {r.subject:40s} n {r.n:4d}  weak {r.weak:.2f} strong {r.strong:.2f} "
                     f"gap {r.strong - r.weak:+.2f}  router {r.router:.3f}")
    return "\n".join(lines)
