"""Failure isolation in an engine step: a sequence whose serving raises is ended alone.

Policy: a step runs batched. When the batched step raises, each scheduled sequence runs again by itself, without
its draft tokens, so only a sequence that fails on its own is ended and the others keep their step. Running one
again is safe: nothing of the failed attempt was kept but KV writes, which the retry makes again for the same
positions. A batch of one that fails is that sequence's failure. The cost, one forward per sequence, is paid on
the failure path only.
"""
from __future__ import annotations

import logging
from typing import Callable

from tiers.engine.sampler import SamplerOutput
from tiers.engine.scheduler import ScheduledSequence
from tiers.engine.sequence import Sequence

logger = logging.getLogger(__name__)


def execute_isolated(scheduled: list[ScheduledSequence], execute_batch: Callable[[], dict[int, SamplerOutput]],
                     execute_one: Callable[[ScheduledSequence], SamplerOutput | None],
                     fail: Callable[[Sequence, Exception], None]) -> dict[int, SamplerOutput]:
    """{index in `scheduled`: output} of the sequences that sampled; `fail` ends each sequence that raised."""
    try:
        return execute_batch()
    except Exception as exc:  # noqa: BLE001 - isolated below
        if len(scheduled) == 1:
            fail(scheduled[0].seq, exc)
            return {}
        logger.warning("a step of %d sequences failed (%s); running them one by one", len(scheduled),
                       type(exc).__name__)
    sampled: dict[int, SamplerOutput] = {}
    for i, s in enumerate(scheduled):
        s.num_new_tokens -= s.num_spec_tokens
        s.seq.clear_draft()
        try:
            out = execute_one(s)
        except Exception as exc:  # noqa: BLE001 - this sequence's own failure
            fail(s.seq, exc)
            continue
        if out is not None:
            sampled[i] = out
    return sampled
