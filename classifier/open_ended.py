"""The open-ended routing check (issue 26): 80 prompts in MT-Bench's eight categories, answered by every tier
and scored by outcome, not by anyone's impression of difficulty, and a router evaluated on those scores as
RouteLLM evaluates MT-Bench.

- `open_ended.jsonl` (`load_prompts`): the prompts, written by hand for AIO (`id`, `category`, `text`, and
  `reference`, the exact final answer, where the answer is one computable value).
- `open_ended_outcomes.jsonl` (`load_outcomes`), written by `python -m benchmarks.open_ended`: per prompt and
  tier a score from 1 to 10, by computed truth where the prompt has a reference (10 right, 1 wrong), else
  the large tier's rating as a judge; null where a request failed or the judge's reply held no rating.

`evaluate`: weak = small (then medium), strong = large, quality = mean score; the router's "needs the strong
model" score is 1 − P(label ≤ weak tier) (for weak = small: 1 − P(small)). Prompts with a null score for the
weak or the strong tier are left out of that pair.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from classifier import cv_report
from classifier.cv import bootstrap, fmt
from classifier.errors import ClassifierError

DATA_DIR = Path(__file__).resolve().parent / "data"
PROMPTS_PATH = DATA_DIR / "open_ended.jsonl"
OUTCOMES_PATH = DATA_DIR / "open_ended_outcomes.jsonl"
CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
TIERS = ("small", "medium", "large")
PAIRS = (("small", "large"), ("medium", "large"))
OUTCOME_TOLERANCE = 1.0  # a tier within a point (of 1-10) of the large tier's answer is good enough
PRODUCE = "python -m benchmarks.open_ended --out classifier/data/open_ended_outcomes.jsonl"


@dataclass(frozen=True)
class OpenPrompt:
    id: str
    category: str
    text: str
    reference: str | None


@dataclass
class Outcomes:
    ids: list[str]
    categories: list[str]
    texts: list[str]
    scores: dict[str, np.ndarray]  # tier -> (n,) scores 1..10, nan where null


@dataclass
class PairReport:
    weak: str
    strong: str
    n: int  # prompts with both scores
    left_out: int  # prompts with a null score for the weak or the strong tier
    weak_mean: float
    strong_mean: float
    figures: dict[str, tuple[float, float, float]] | None  # cv_report.two_tier's keys; None when undefined
    spearman: tuple[float, float, float]  # router score against the per-prompt gap (strong − weak)
    reason: str | None = None  # why `figures` is None


@dataclass
class CategoryRow:
    category: str
    n: int
    router: float  # mean "needs the strong model" score
    gap: float  # mean strong score − mean weak score


@dataclass
class OpenEndedReport:
    pairs: list[PairReport]
    categories: list[CategoryRow]  # the first pair's


def read_jsonl(path: Path, produce: str = PRODUCE) -> list[tuple[int, dict]]:
    """(line number, object) per non-empty line; `ClassifierError` naming `produce` when the file is missing."""
    if not path.is_file():
        raise ClassifierError(f"{path} does not exist; produce it with `{produce}`")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ClassifierError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ClassifierError(f"{path}:{number}: expected a JSON object")
        rows.append((number, row))
    if not rows:
        raise ClassifierError(f"{path} holds no rows")
    return rows


def string_field(path: Path, number: int, row: dict, key: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value:
        raise ClassifierError(f"{path}:{number}: `{key}` must be a non-empty string")
    return value


def _category(path: Path, number: int, row: dict) -> str:
    category = string_field(path, number, row, "category")
    if category not in CATEGORIES:
        raise ClassifierError(f"{path}:{number}: unknown category {category!r} (expected one of {CATEGORIES})")
    return category


def load_prompts(path: str | Path = PROMPTS_PATH) -> list[OpenPrompt]:
    path = Path(path)
    prompts = []
    for number, row in read_jsonl(path):
        reference = row.get("reference")
        if reference is not None and not isinstance(reference, str):
            raise ClassifierError(f"{path}:{number}: `reference` must be a string")
        prompts.append(OpenPrompt(string_field(path, number, row, "id"), _category(path, number, row),
                                  string_field(path, number, row, "text"), reference))
    return prompts


def _score(path: Path, number: int, row: dict, tier: str) -> float:
    entry = row.get(tier)
    if not isinstance(entry, dict) or "score" not in entry:
        raise ClassifierError(f"{path}:{number}: `{tier}` must be an object with a `score`")
    score = entry["score"]
    if score is None:
        return np.nan
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 1 <= score <= 10:
        raise ClassifierError(f"{path}:{number}: `{tier}.score` must be a number from 1 to 10 or null, got {score!r}")
    return float(score)


def load_outcomes(path: str | Path = OUTCOMES_PATH) -> Outcomes:
    """The outcomes file; `ClassifierError` if it is missing, malformed, or lacks the small or large tier."""
    path = Path(path)
    rows = read_jsonl(path)
    tiers = [t for t in TIERS if t in rows[0][1]]
    for needed in ("small", "large"):
        if needed not in tiers:
            raise ClassifierError(f"{path}: no `{needed}` tier's scores (run the benchmark with that tier)")
    scores = {t: np.array([_score(path, number, row, t) for number, row in rows]) for t in tiers}
    return Outcomes([string_field(path, n, r, "id") for n, r in rows], [_category(path, n, r) for n, r in rows],
                    [string_field(path, n, r, "text") for n, r in rows], scores)


def outcome_labels(outcomes: Outcomes, tolerance: float = OUTCOME_TOLERANCE) -> tuple[np.ndarray, np.ndarray]:
    """(the prompts every tier has a score for, their training label: the cheapest tier whose score is within
    `tolerance` of the large tier's; small when every tier failed alike, as the seed data labels such rows)."""
    scores = np.stack([outcomes.scores[t] for t in TIERS], axis=1)
    rows = np.nonzero(~np.isnan(scores).any(axis=1))[0]
    good = scores[rows] >= scores[rows, -1:] - tolerance
    return rows, good.argmax(axis=1).astype(np.int64)


def needs_strong(proba: np.ndarray, weak_index: int) -> np.ndarray:
    """1 − P(label ≤ weak_index): the router's score for "the weak tier is not enough"."""
    return 1.0 - np.cumsum(np.asarray(proba, dtype=np.float64), axis=1)[:, weak_index]


def spearman(x: np.ndarray, y: np.ndarray, n_boot: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """Spearman's rho with a 90% bootstrap interval over rows (nan where either side is constant)."""
    from scipy.stats import spearmanr

    def rho(idx: np.ndarray) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a constant resample: rho is nan, which bootstrap drops
            return float(spearmanr(x[idx], y[idx]).statistic)

    return bootstrap(rho, len(x), n_boot, seed)


def evaluate_pair(outcomes: Outcomes, proba: np.ndarray, weak: str, strong: str, n_boot: int = 1000,
                  seed: int = 0) -> PairReport:
    w, s = outcomes.scores[weak], outcomes.scores[strong]
    keep = ~(np.isnan(w) | np.isnan(s))
    w, s, score = w[keep], s[keep], needs_strong(proba, TIERS.index(weak))[keep]
    nan3 = (np.nan, np.nan, np.nan)
    if not keep.any():
        return PairReport(weak, strong, 0, len(keep), np.nan, np.nan, None, nan3, "no prompt has both scores")
    rho = spearman(score, s - w, n_boot, seed)
    report = PairReport(weak, strong, int(keep.sum()), int((~keep).sum()), float(w.mean()), float(s.mean()), None,
                        rho)
    if s.mean() <= w.mean():
        report.reason = (f"PGR is undefined: the {strong} tier's mean score ({s.mean():.2f}) is not above the "
                         f"{weak} tier's ({w.mean():.2f})")
        return report
    collapsed = np.stack([1.0 - score, score], axis=1)[None]  # two_tier reads 1 − column 0 as the score
    report.figures = cv_report.two_tier(collapsed, w, s, n_boot=n_boot, seed=seed)
    return report


def category_rows(outcomes: Outcomes, proba: np.ndarray, weak: str, strong: str) -> list[CategoryRow]:
    w, s = outcomes.scores[weak], outcomes.scores[strong]
    score = needs_strong(proba, TIERS.index(weak))
    cats = np.array(outcomes.categories)
    rows = []
    for category in CATEGORIES:
        mine = (cats == category) & ~(np.isnan(w) | np.isnan(s))
        if mine.any():
            rows.append(CategoryRow(category, int(mine.sum()), float(score[mine].mean()),
                                    float(s[mine].mean() - w[mine].mean())))
    return rows


def evaluate(outcomes: Outcomes, proba, n_boot: int = 1000, seed: int = 0) -> OpenEndedReport:
    """Every pair (weak tier, large) the outcomes and the classifier's tiers allow; `proba` is the classifier's
    (n, n_tiers) probabilities for `outcomes.texts`."""
    proba = np.asarray(proba, dtype=np.float64)
    if proba.ndim != 2 or len(proba) != len(outcomes.texts):
        raise ClassifierError(f"proba must be ({len(outcomes.texts)}, n_tiers), got shape {proba.shape}")
    pairs = [evaluate_pair(outcomes, proba, weak, strong, n_boot, seed) for weak, strong in PAIRS
             if weak in outcomes.scores and strong in outcomes.scores and TIERS.index(weak) < proba.shape[1] - 1]
    return OpenEndedReport(pairs, category_rows(outcomes, proba, *PAIRS[0]))


def format_pair(pair: PairReport) -> str:
    head = (f"{pair.weak} vs {pair.strong} ({pair.n} prompts, {pair.left_out} left out for a null score): mean "
            f"score {pair.weak_mean:.2f} vs {pair.strong_mean:.2f}; router score 1 - P(label <= {pair.weak})")
    figures = pair.reason if pair.figures is None else cv_report.format_two_tier(pair.figures)
    return f"{head}\n    {figures}\n    Spearman(router score, {pair.strong} - {pair.weak} gap) {fmt(pair.spearman)}"


def format_report(report: OpenEndedReport) -> str:
    lines = ["  " + format_pair(p).replace("\n", "\n  ") for p in report.pairs]
    if report.categories:
        weak, strong = PAIRS[0]
        lines.append(f"  {'category':<11s} {'n':>3s}  P({weak} is not enough)  {strong} - {weak} gap")
        lines += [f"  {r.category:<11s} {r.n:3d}  {r.router:22.2f}  {r.gap:+14.2f}" for r in report.categories]
    return "\n".join(lines)
