"""The built-in probe set: tasks with a computed truth that `aio calibrate` sends to every tier, so routing learns
how well the tiers actually served answer (docs/routing.md, "Probing the tiers").

Policy:
- Generated tasks (arithmetic, strings and lists, dates and units, logic, knowledge, code): per (category,
  difficulty) cell, the tasks of the probed half (`split.PROBED`) in index order,
  skipping any question that one of the cell's first `RESERVED_PER_CELL` held-out tasks asks (the tasks a benchmark
  evaluates on), and any question already drawn.
- CRUXEval-O: the shipped rows of the routing data's train file (`crux_data`), in a seeded order, each with its
  truth computed in the sandbox; a row whose truth cannot be computed is skipped.
- Order: every group (a cell, or CRUX) is spread evenly over the list, so any prefix is a balanced sample: a slow
  tier that gets only the first k tasks still sees every kind.
"""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

from . import generated
from .crux import compute_truth, CruxItem
from .crux_data import read_shipped
from .split import HELD_OUT, HELD_OUT_CATEGORIES, PROBED, split_of
from .task import Task, crux_task, generated_task

PROBE_SEED = 0  # the generators' seed; the held-out half is the same one the end-to-end benchmark evaluates on
RESERVED_PER_CELL = 20  # held-out questions per cell a probe never asks (a benchmark's eval part uses <= this many)
DEFAULT_PER_CELL = 8
DEFAULT_CRUX = 40
MAX_SCAN = 5_000  # indices looked at per cell before it counts as exhausted


def probe_set(per_cell: int = DEFAULT_PER_CELL, n_crux: int = DEFAULT_CRUX, seed: int = PROBE_SEED,
              workers: int = 2) -> list[Task]:
    """The probe tasks in their balanced order (deterministic for the arguments)."""
    groups = [_cell_tasks(seed, category, difficulty, per_cell)
              for difficulty in generated.DIFFICULTIES for category in generated.CATEGORIES]
    groups.append(_crux_tasks(seed, n_crux, workers))
    return _interleave(groups)


def _cell_tasks(seed: int, category: str, difficulty: int, wanted: int) -> list[Task]:
    reserved: set[str] = set()
    drawn: list[generated.GeneratedTask] = []
    seen: set[str] = set()
    for index, task in enumerate(generated.iter_cell(seed, category, difficulty)):
        if index >= MAX_SCAN or (len(drawn) >= wanted and (len(reserved) >= RESERVED_PER_CELL
                                                          or category not in HELD_OUT_CATEGORIES)):
            break
        if category in HELD_OUT_CATEGORIES and split_of(task.id, seed) == HELD_OUT:
            if len(reserved) < RESERVED_PER_CELL:
                reserved.add(task.question)
        elif task.question not in seen and len(drawn) < 4 * wanted + RESERVED_PER_CELL:
            seen.add(task.question)
            drawn.append(task)
    return [generated_task(t) for t in drawn if t.question not in reserved][:wanted]


def _crux_tasks(seed: int, wanted: int, workers: int) -> list[Task]:
    if wanted <= 0:
        return []
    rows = sorted(read_shipped(), key=lambda r: r.id)
    random.Random(f"probe-crux:{seed}").shuffle(rows)
    tasks: list[Task] = []
    position = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        while len(tasks) < wanted and position < len(rows):
            batch = rows[position:position + wanted - len(tasks)]
            position += len(batch)
            for row, truth in zip(batch, pool.map(lambda r: compute_truth(r.source, r.call), batch)):
                if truth.ok:
                    tasks.append(crux_task(CruxItem(row, truth.value)))
    return tasks


def _interleave(groups: list[list[Task]]) -> list[Task]:
    """Each group's i-th task at position (i + 0.5) / len(group): an even spread; ties keep the groups' order."""
    keyed = [((i + 0.5) / len(group), g, task) for g, group in enumerate(groups) for i, task in enumerate(group)]
    return [task for *_, task in sorted(keyed, key=lambda k: k[:2])]


__all__ = ["DEFAULT_CRUX", "DEFAULT_PER_CELL", "PROBED", "PROBE_SEED", "RESERVED_PER_CELL", "probe_set"]
