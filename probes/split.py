"""Which generated tasks are held out for evaluation: half of every (category, difficulty) cell of the
`HELD_OUT_CATEGORIES`, by a seeded hash of the task's id. The built-in probe set draws only from the other half,
and never asks a question that a held-out task asks, so a benchmark that evaluates on the held-out half never
scores a task the deployment probed. The other categories (knowledge, code) are never evaluated on: every task
of theirs may be probed."""
from __future__ import annotations

import hashlib

HELD_OUT = "eval"
PROBED = "train"
HELD_OUT_CATEGORIES = ("arithmetic", "strings_lists", "dates_units", "logic")


def split_of(task_id: str, seed: int) -> str:
    """"train" or "eval" for a generated task, from a seeded hash of its id."""
    digest = hashlib.sha256(f"{seed}:{task_id}".encode()).digest()
    return HELD_OUT if digest[0] % 2 == 0 else PROBED
