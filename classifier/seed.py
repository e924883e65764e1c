"""The seed training set shipped with the classifier: `classifier/seed/seed_train.csv.gz` (text, label, source).

Built by `python -m classifier.build_default` from the train splits of the routing data only:
- zeroeval_3tier: 3-tier labels from the Llama trio (the cheapest correct tier; small when none is), source
  `zeroeval:<task>`;
- routellm_gsm8k / routellm_mmlu: weak (Mixtral-8x7B) correct → 0, only the strong model (GPT-4) correct → 2,
  neither → 0, source `routellm:<set>`. Mixtral sits between our medium and large tiers and GPT-4 above the
  large one, so "only GPT-4 answers" means "needs the large tier"; mapping weak-correct to the small tier is the
  cheap side of the uncertainty (the quality knob and the monitor move traffic up when that is wrong).
- the hand-labelled everyday-chat prompts (`classifier/data/chat_train.jsonl`; difficulty 1–2 → 0, 3 → 1,
  4–5 → 2), source `chat:<category>`: the benchmarks hold no chat, and without these the router learned that
  short means hard. `build_default` weights them by `CHAT_EASY_WEIGHT` (labelled small) and `CHAT_HARD_WEIGHT`
  (labelled medium or large; 0 today: those rows stay out of training);
- the open-ended prompts labelled by outcome (`classifier.open_ended.outcome_labels`), source `open:<category>`,
  at `OPEN_WEIGHT`, when that is above 0 (today it is 0: cross-validation did not favour them).
`aio retrain` merges it with the labelled request log.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
from pathlib import Path

import numpy as np

SEED_PATH = Path(__file__).resolve().parent / "seed" / "seed_train.csv.gz"
WEAK_STRONG_TO_TIER = (0, 2)  # RouteLLM two-tier labels → AIO's three tiers
HOLDOUT_PERCENT = 15
CHAT_SOURCE = "chat:"
OPEN_SOURCE = "open:"
# Training weights of the default's hand-labelled chat rows and outcome-labelled open-ended rows, chosen by
# cross-validation on outcome labels (`python -m classifier.outcome_weights`; docs/routing.md). A chat row labelled
# small says the small tier answers "hi": an outcome nobody doubts, which no benchmark row covers. One labelled
# medium or large is an impression that the small tier fails, which outcome data contradicts for writing.
CHAT_EASY_WEIGHT = 10.0
CHAT_HARD_WEIGHT = 0.0
OPEN_WEIGHT = 0.0  # 0: the open-ended prompts stay out of the seed data (and out of `aio retrain`'s)

csv.field_size_limit(1 << 24)


def build_seed_rows(data_folder=None) -> tuple[list[str], list[int], list[str]]:
    from classifier.data import ROUTELLM_SETS, load_routellm, load_zeroeval

    texts, labels, sources = [], [], []
    z = load_zeroeval("train", data_folder)
    texts += z.texts
    labels += [int(v) for v in z.labels]
    sources += [f"zeroeval:{g}" for g in z.groups]
    for name in ROUTELLM_SETS:
        r = load_routellm(name, "train", data_folder)
        texts += r.texts
        labels += [WEAK_STRONG_TO_TIER[int(v)] for v in r.labels]
        sources += [f"routellm:{name}"] * len(r.texts)
    from classifier.chat_data import TRAIN_PATH, difficulty_to_tier, load_chat

    chat = load_chat(TRAIN_PATH)
    texts += chat.texts
    labels += [int(v) for v in difficulty_to_tier(chat.difficulty)]
    sources += [f"{CHAT_SOURCE}{c}" for c in chat.categories]
    from classifier.open_ended import OUTCOMES_PATH, load_outcomes, outcome_labels

    if OPEN_WEIGHT > 0 and OUTCOMES_PATH.is_file():
        outcomes = load_outcomes(OUTCOMES_PATH)
        rows, open_labels = outcome_labels(outcomes)
        texts += [outcomes.texts[i] for i in rows]
        labels += open_labels.tolist()
        sources += [f"{OPEN_SOURCE}{outcomes.categories[i]}" for i in rows]
    return texts, labels, sources


def label_weight(kind: str, label: int, easy: float, hard: float, open_ended: float) -> float:
    """The training weight of one row by its kind: "chat" rows by their label (`easy` for small, `hard` above),
    "open" (open-ended) rows `open_ended`, any other row (the benchmarks' outcomes) 1. `aio retrain` and the
    shipped default pass the module's weights (`seed_weight`); `classifier.outcome_weights` searches others."""
    if kind == "chat":
        return easy if int(label) == 0 else hard
    return open_ended if kind == "open" else 1.0


def seed_weight(source: str, label: int) -> float:
    """The training weight of one seed row (`label_weight`), its kind told by its source."""
    kind = "chat" if source.startswith(CHAT_SOURCE) else "open" if source.startswith(OPEN_SOURCE) else "outcome"
    return label_weight(kind, label, CHAT_EASY_WEIGHT, CHAT_HARD_WEIGHT, OPEN_WEIGHT)


def seed_weights(sources, labels) -> np.ndarray:
    """`seed_weight` of every row; rows at 0 are left out of training."""
    return np.array([seed_weight(s, label) for s, label in zip(sources, labels, strict=True)])


def is_holdout(text: str) -> bool:
    """The fixed hash split that `aio retrain` judges candidates on: the shipped default never trains on it."""
    return int(hashlib.sha1(text.encode("utf-8")).hexdigest()[:8], 16) % 100 < HOLDOUT_PERCENT


def write_seed_data(texts, labels, sources, path: Path = SEED_PATH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(path, "wb", mtime=0) as raw:  # mtime 0: the same data gives the same bytes
        with open_text(raw) as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(["text", "label", "source"])
            writer.writerows(zip(texts, labels, sources))
    return path


def open_text(raw):
    import io

    return io.TextIOWrapper(raw, encoding="utf-8", newline="")


def load_seed_data(path: str | Path | None = None) -> tuple[list[str], list[int], list[str]]:
    """(texts, labels, sources) of the shipped seed training set."""
    path = Path(path) if path is not None else SEED_PATH
    texts, labels, sources = [], [], []
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            texts.append(row["text"])
            labels.append(int(row["label"]))
            sources.append(row["source"])
    return texts, labels, sources


def label_counts(labels) -> list[int]:
    return np.bincount(np.asarray(labels, dtype=np.int64), minlength=3).tolist()
