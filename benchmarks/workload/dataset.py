"""The workload: CRUXEval-O rows and generated tasks as `Task`s, in a fixed train / eval split.

Split policy (deterministic for a seed, disjoint by id and by prompt):
- CRUX: rows of the routing data's train file go to `train`, rows of its dev file to `eval` (the data's own
  split, so a router trained on the routing data never sees an eval row). `crux_limit` rows each, drawn in a
  seeded order (`crux.load_crux`).
- generated: for each (category, difficulty) cell, the cell's tasks in index order; each goes to the split
  that `sha256(f"{seed}:{id}")` picks, until both splits hold their share of `n_generated` (spread evenly
  over the 16 cells). A question already drawn (in either split) is skipped, so no prompt is in both.

Every prompt ends with `ANSWER_INSTRUCTION`, the same text for every task. CRUX prompts keep the CRUXEval-O
question as stored and add `CRUX_VALUE_NOTE` before it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from probes import generated
from probes.crux import load_crux
from probes.split import HELD_OUT_CATEGORIES, split_of
from probes.task import ANSWER_INSTRUCTION, CRUX_VALUE_NOTE, Task, crux_task, generated_task, with_instruction

__all__ = ["ANSWER_INSTRUCTION", "CRUX_VALUE_NOTE", "DEFAULT_CRUX_LIMIT", "DEFAULT_N_GENERATED", "Task", "Workload",
           "crux_task", "generated_task", "load_workload", "split_of", "with_instruction"]

DEFAULT_N_GENERATED = 80
DEFAULT_CRUX_LIMIT = 40
# The benchmark's categories: those with a held-out half (the probe set also has knowledge and code tasks, all of
# them probed), the four it was built with, so the evaluation part stays the same tasks from run to run.
WORKLOAD_CATEGORIES = HELD_OUT_CATEGORIES


@dataclass(frozen=True)
class Workload:
    seed: int
    train: list[Task]
    eval: list[Task]
    crux_examined: dict[str, int] = field(default_factory=dict)  # split -> CRUX rows run
    crux_dropped: dict[str, dict[str, int]] = field(default_factory=dict)  # split -> reason -> rows

    def split(self, name: str) -> list[Task]:
        if name not in ("train", "eval"):
            raise ValueError(f"unknown split {name!r}")
        return self.train if name == "train" else self.eval


def _generated_split(seed: int, n_per_split: int) -> tuple[list[Task], list[Task]]:
    cells = [(c, d) for d in generated.DIFFICULTIES for c in WORKLOAD_CATEGORIES]
    quotas = [n_per_split // len(cells) + (i < n_per_split % len(cells)) for i in range(len(cells))]
    seen: set[str] = set()
    out: dict[str, list[Task]] = {"train": [], "eval": []}
    for (category, difficulty), quota in zip(cells, quotas):
        taken = {"train": 0, "eval": 0}
        for index, task in enumerate(generated.iter_cell(seed, category, difficulty)):
            if taken["train"] == quota and taken["eval"] == quota:
                break
            if index > 100 * quota + 200:
                raise ValueError(f"cell ({category}, {difficulty}) ran out of distinct questions: "
                                 f"{taken} of {quota} per split")
            which = split_of(task.id, seed)
            if taken[which] == quota or task.question in seen:
                continue
            seen.add(task.question)
            taken[which] += 1
            out[which].append(generated_task(task))
    return out["train"], out["eval"]


def load_workload(seed: int = 0, n_generated: int = DEFAULT_N_GENERATED,
                  crux_limit: int | None = DEFAULT_CRUX_LIMIT, *, data_dir: str | os.PathLike | None = None,
                  workers: int = 2) -> Workload:
    """The workload for `seed`: per split, `crux_limit` CRUX tasks (None: every usable row; 0: none, and the
    data folder is not read) and `n_generated` generated tasks. Raises FileNotFoundError when CRUX rows are
    asked for and the routing data is missing."""
    train, eval_ = _generated_split(seed, n_generated)
    examined, dropped = {}, {}
    if crux_limit is None or crux_limit > 0:
        for split, file_split, tasks in (("train", "train", train), ("eval", "dev", eval_)):
            crux = load_crux(file_split, limit=crux_limit, seed=seed, directory=data_dir, workers=workers)
            tasks[:0] = [crux_task(item) for item in crux.items]
            examined[split], dropped[split] = crux.examined, dict(crux.dropped)
    return Workload(seed, train, eval_, examined, dropped)
