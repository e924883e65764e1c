"""The end-to-end workload's TRAIN tasks with every tier's computed-truth outcome on the family demo
(`classifier/data/workload_outcomes.jsonl`, written by `python -m benchmarks.end_to_end.train_outcomes`): an
outcome-labelled set, like the open-ended one, that `classifier.outcome_weights` scores candidates on. It is never
trained on, and the workload's evaluation part is not in it (that stays the end-to-end benchmark's).

Each line: `id`, `category`, `difficulty`, `prompt` (the user message), `correct` ({tier: bool}). The router sees a
task as the server does: `messages_to_text` of its one user message. Quality is 1 for a right answer, 0 for a
wrong one.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from classifier.errors import ClassifierError
from classifier.features import messages_to_text
from classifier.open_ended import DATA_DIR, TIERS, Outcomes, read_jsonl, string_field

WORKLOAD_PATH = DATA_DIR / "workload_outcomes.jsonl"
PRODUCE = "python -m benchmarks.end_to_end.train_outcomes"


def _correct(path: Path, number: int, row: dict) -> dict[str, float]:
    correct = row.get("correct")
    if not isinstance(correct, dict) or any(not isinstance(correct.get(t), bool) for t in TIERS):
        raise ClassifierError(f"{path}:{number}: `correct` must map each of {TIERS} to true or false")
    return {t: float(correct[t]) for t in TIERS}


def load_task_outcomes(path: str | Path = WORKLOAD_PATH) -> Outcomes:
    """The file as `Outcomes` (scores 1 right, 0 wrong); `ClassifierError` if it is missing or malformed."""
    path = Path(path)
    rows = read_jsonl(path, PRODUCE)
    correct = [_correct(path, number, row) for number, row in rows]

    def column(key: str) -> list[str]:
        return [string_field(path, number, row, key) for number, row in rows]

    texts = [messages_to_text([{"role": "user", "content": prompt}]) for prompt in column("prompt")]
    return Outcomes(column("id"), column("category"), texts, {t: np.array([c[t] for c in correct]) for t in TIERS})
