"""probes: the built-in probe set (balanced, deterministic, never a held-out question) and the shipped CRUX rows."""
from __future__ import annotations

from collections import Counter

import pytest

from probes import generated
from probes.crux import data_dir, read_rows
from probes.crux_data import read_shipped
from probes.probe_set import RESERVED_PER_CELL, _interleave, probe_set
from probes.split import HELD_OUT, HELD_OUT_CATEGORIES, split_of


@pytest.fixture(scope="module")
def tasks():
    return probe_set(per_cell=4, n_crux=8)


def test_the_probe_set_is_deterministic_and_covers_every_cell(tasks):
    again = probe_set(per_cell=4, n_crux=8)
    assert [t.id for t in tasks] == [t.id for t in again]
    cells = Counter((t.category, t.difficulty) for t in tasks if t.source == "generated")
    assert set(cells) == {(c, d) for c in generated.CATEGORIES for d in generated.DIFFICULTIES}
    assert set(cells.values()) == {4}
    assert sum(t.source == "crux" for t in tasks) == 8
    assert len({t.prompt for t in tasks}) == len(tasks)


def test_no_probe_task_asks_a_reserved_held_out_question(tasks):
    for category, difficulty in {(t.category, t.difficulty) for t in tasks
                                 if t.source == "generated" and t.category in HELD_OUT_CATEGORIES}:
        reserved = []
        for task in generated.iter_cell(0, category, difficulty):
            if split_of(task.id, 0) == HELD_OUT:
                reserved.append(task.question)
            if len(reserved) == RESERVED_PER_CELL:
                break
        probed = [t for t in tasks if (t.category, t.difficulty) == (category, difficulty)]
        assert all(split_of(t.id, 0) != HELD_OUT for t in probed)
        assert not {t.prompt.split("\n\n")[0] for t in probed} & set(reserved)


def test_every_prefix_is_balanced():
    groups = [[f"a{i}" for i in range(8)], [f"b{i}" for i in range(2)], [f"c{i}" for i in range(4)]]
    order = _interleave(groups)
    assert sorted(order) == sorted(sum(groups, []))
    half = Counter(x[0] for x in order[:7])
    assert half == {"a": 4, "b": 1, "c": 2}


def test_the_shipped_crux_rows_are_the_train_file_rows():
    shipped = read_shipped()
    assert len(shipped) > 400 and all(r.split == "train" for r in shipped)
    if not (data_dir() / "zeroeval_3tier.train.csv").is_file():
        pytest.skip("the routing data is not here")
    rows, _ = read_rows("train")
    assert {r.id: (r.question, r.reference_correct) for r in rows} == \
        {r.id: (r.question, r.reference_correct) for r in shipped}
    dev, _ = read_rows("dev")
    assert not {r.question for r in dev} & {r.question for r in shipped}
