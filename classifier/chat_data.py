"""Everyday-chat prompts with a hand-assigned difficulty (see `classifier/data/README.md`) and how well a router's
score agrees with it.

- `chat_sanity.jsonl`: the sanity set. Never trained on and never used to choose anything; it only measures.
  Holds explicit easy/hard pairs of the same kind (`pair`) and unpaired prompts.
- `chat_train.jsonl`: different prompts written the same way, added to the classifier's training data so that
  it learns what everyday chat needs (the routing benchmarks are math word problems and multiple choice only).

Difficulty is ordinal, 1 (chit-chat, a lookup a child knows) to 5 (expert design, proofs, research synthesis).
As a tier label: 1–2 → small, 3 → medium, 4–5 → large (`difficulty_to_tier`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parent / "data"
SANITY_PATH = DATA_DIR / "chat_sanity.jsonl"
TRAIN_PATH = DATA_DIR / "chat_train.jsonl"
EASY_MAX, HARD_MIN = 2, 4  # "clearly easy" and "clearly hard" difficulties


@dataclass
class ChatSet:
    ids: list[str]
    texts: list[str]
    difficulty: np.ndarray  # (n,) 1..5
    categories: list[str]
    pairs: list[str | None]

    @property
    def tiers(self) -> np.ndarray:
        return difficulty_to_tier(self.difficulty)


def difficulty_to_tier(difficulty, n_tiers: int = 3) -> np.ndarray:
    """1–2 → 0 (small), 3 → 1 (medium), 4–5 → the largest tier; with two tiers, 3 counts as small."""
    d = np.asarray(difficulty, dtype=np.int64)
    if n_tiers == 2:
        return (d >= HARD_MIN).astype(np.int64)
    return np.where(d <= EASY_MAX, 0, np.where(d >= HARD_MIN, n_tiers - 1, 1)).astype(np.int64)


def load_chat(path: str | Path = SANITY_PATH) -> ChatSet:
    ids, texts, difficulty, categories, pairs = [], [], [], [], []
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            d = int(row["difficulty"])
            if not 1 <= d <= 5:
                raise ValueError(f"{path}:{number}: difficulty must be 1..5, got {d}")
            ids.append(str(row["id"]))
            texts.append(str(row["text"]))
            difficulty.append(d)
            categories.append(str(row["category"]))
            pairs.append(row.get("pair"))
    return ChatSet(ids, texts, np.asarray(difficulty, dtype=np.int64), categories, pairs)


def difficulty_score(proba) -> np.ndarray:
    """A router's "needs a larger tier" score for ranking: 1 − P(the small tier is good enough)."""
    return 1.0 - np.asarray(proba, dtype=np.float64)[:, 0]


def explicit_pairs(chat: ChatSet) -> list[tuple[int, int]]:
    """(easy index, hard index) of every explicit pair."""
    by_pair: dict[str, list[int]] = {}
    for i, p in enumerate(chat.pairs):
        if p:
            by_pair.setdefault(p, []).append(i)
    out = []
    for members in by_pair.values():
        if len(members) == 2:
            a, b = sorted(members, key=lambda i: chat.difficulty[i])
            if chat.difficulty[a] < chat.difficulty[b]:
                out.append((a, b))
    return out


def category_pairs(chat: ChatSet) -> list[tuple[int, int]]:
    """Every (clearly easy, clearly hard) pair of prompts of the same category."""
    out = []
    for cat in sorted(set(chat.categories)):
        idx = [i for i, c in enumerate(chat.categories) if c == cat]
        easy = [i for i in idx if chat.difficulty[i] <= EASY_MAX]
        hard = [i for i in idx if chat.difficulty[i] >= HARD_MIN]
        out += [(e, h) for e in easy for h in hard]
    return out


def pair_order(scores, pairs: list[tuple[int, int]]) -> float:
    """The share of pairs whose hard prompt scores strictly above the easy one."""
    scores = np.asarray(scores, dtype=np.float64)
    if not pairs:
        return float("nan")
    return float(np.mean([scores[h] > scores[e] for e, h in pairs]))


def agreement(scores, chat: ChatSet, n_boot: int = 1000, seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """Kendall's tau (tau-b) of scores vs difficulty, and the pairwise order on explicit and category pairs;
    each as (value, 5th, 95th percentile) of a bootstrap over prompts (over pairs for the pair shares)."""
    from scipy.stats import kendalltau

    scores = np.asarray(scores, dtype=np.float64)
    rng = np.random.default_rng(seed)
    n = len(scores)
    taus = [kendalltau(scores[s], chat.difficulty[s]).statistic for s in (rng.integers(0, n, n) for _ in range(n_boot))]
    out = {"kendall_tau": (float(kendalltau(scores, chat.difficulty).statistic), *_interval(taus))}
    for name, pairs in (("explicit_pairs", explicit_pairs(chat)), ("category_pairs", category_pairs(chat))):
        hits = np.array([scores[h] > scores[e] for e, h in pairs], dtype=np.float64)
        boot = [hits[rng.integers(0, len(hits), len(hits))].mean() for _ in range(n_boot)] if len(hits) else [np.nan]
        out[name] = (float(hits.mean()) if len(hits) else float("nan"), *_interval(boot))
    return out


def _interval(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    return (float(np.percentile(values, 5)), float(np.percentile(values, 95))) if len(values) else (np.nan, np.nan)
