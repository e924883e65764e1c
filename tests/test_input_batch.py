"""The step's row selection: the rows that sample, out of a forward's hidden states."""
from __future__ import annotations

import pytest
import torch

from tiers.engine.input_batch import select_rows


@pytest.mark.parametrize("rows", [[0], [3], [2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6], [4, 2], [0, 2, 3], [1, 1], [5, 4, 3]])
def test_selected_rows_equal_indexing_and_are_a_view_only_when_consecutive(rows):
    hidden = torch.randn(7, 5)
    picked = select_rows(hidden, rows)
    assert torch.equal(picked, hidden[torch.tensor(rows)])
    consecutive = rows == list(range(rows[0], rows[0] + len(rows)))
    assert (picked.data_ptr() == hidden[rows[0]].data_ptr()) == consecutive
    assert picked.is_contiguous()
