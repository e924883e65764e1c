"""The engine's step: admit what the inbox holds, schedule, run the model (or the speculator around it), and turn
the sampled tokens into outputs. A failure while serving one sequence ends that sequence alone.

`Engine` (tiers/engine/llm_engine.py) builds the parts, takes requests in and runs this step, inline (`generate`) or on
its loop thread (`stream`); the speculator, when there is one, is used through its `plan` / `execute` /
`verified` calls only, so this module imports nothing of `tiers.engine.spec_decode`.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from tiers.engine.errors import REQUEST_INVALID, describe_failure
from tiers.engine.inbox import Inbox
from tiers.engine.isolation import execute_isolated
from tiers.engine.model_runner import ModelRunner
from tiers.engine.output_processor import OutputProcessor
from tiers.engine.outputs import RequestOutput
from tiers.engine.sampler import SamplerOutput
from tiers.engine.scheduler import ScheduledSequence, Scheduler, SchedulerOutput
from tiers.engine.sequence import Sequence

if TYPE_CHECKING:
    from tiers.engine.spec_decode.speculator import Speculator

logger = logging.getLogger("tiers.engine.llm_engine")  # the engine's log, as before the step had a module of its own


class EngineCore:
    def __init__(self, runner: ModelRunner, speculator: Speculator | None, scheduler: Scheduler,
                 output_processor: OutputProcessor, inbox: Inbox, lock: threading.RLock, max_model_len: int) -> None:
        self.runner = runner
        self.speculator = speculator
        self.scheduler = scheduler
        self.output_processor = output_processor
        self.inbox = inbox
        self.lock = lock  # the engine's: held for a whole step
        self.max_model_len = max_model_len
        self.num_steps = 0

    def step(self) -> list[RequestOutput]:
        """One scheduler/model step. A failure while serving one sequence ends that sequence with an error (its
        blocks freed) and the others go on; only a failure of the engine's own bookkeeping raises."""
        with self.lock:
            outputs: list[RequestOutput] = []
            self.admit_pending(outputs)
            if self.speculator is not None:
                self.speculator.plan(self.scheduler.running, self.scheduler.num_pending_prefill_tokens(),
                                     self.max_model_len)
            sched = self.scheduler.schedule()
            if not sched.scheduled:
                assert not self.scheduler.has_unfinished(), "requests are waiting but none can be scheduled"
                return outputs
            self.num_steps += 1
            sampled = execute_isolated(sched.scheduled, lambda: self._execute(sched),
                                       lambda s: self.runner.execute([s]).get(0),
                                       lambda seq, exc: self._fail(seq, exc, outputs))
            self._update(sched, sampled, outputs)
            return outputs

    def _execute(self, sched: SchedulerOutput) -> dict[int, SamplerOutput]:
        if self.speculator is None:
            return self.runner.execute(sched.scheduled)
        return self.speculator.execute(sched.scheduled, self.runner.execute)

    def _update(self, sched: SchedulerOutput, sampled: dict[int, SamplerOutput], outputs: list[RequestOutput]
                ) -> None:
        for i, s in enumerate(sched.scheduled):
            if s.seq.is_finished:  # failed in this step
                continue
            try:
                self._update_sequence(s, sampled.get(i), outputs)
            except Exception as exc:  # noqa: BLE001 - this sequence's own failure (its grammar, its stop strings)
                self._fail(s.seq, exc, outputs)

    def _update_sequence(self, s: ScheduledSequence, out: SamplerOutput | None, outputs: list[RequestOutput]
                         ) -> None:
        seq = s.seq
        was_decoding = seq.num_output_tokens > 0 and s.num_new_tokens == 1 + s.num_spec_tokens
        seq.num_computed_tokens += s.num_new_tokens
        if out is None:
            return
        if self.speculator is not None and (out.num_draft_tokens or was_decoding):
            self.speculator.verified(seq, out.num_draft_tokens, out.num_accepted)
        reason = self.output_processor.append_tokens(seq, out.token_ids, out.logprobs, outputs)
        if reason is not None:
            self.finish(seq, reason, outputs)

    def _fail(self, seq: Sequence, exc: Exception, outputs: list[RequestOutput]) -> None:
        """Ends one sequence whose serving raised `exc` (its own failure: logged with its traceback); the engine
        goes on."""
        if not seq.is_finished:
            message, kind = describe_failure(exc)
            logger.warning("request %s failed: %s", seq.request_id, message, exc_info=kind != REQUEST_INVALID)
            self.finish(seq, "error", outputs, error=message, error_kind=kind)

    def admit_pending(self, outputs: list[RequestOutput]) -> None:
        added, aborted = self.inbox.take()
        for seq in added:
            self.scheduler.add(seq)
        for seq in aborted:
            self.finish(seq, "abort", outputs)

    def finish(self, seq: Sequence, reason: str, outputs: list[RequestOutput], error: str | None = None,
                error_kind: str | None = None) -> None:
        self.scheduler.finish(seq, reason, discard_cached=reason == "error")
        self.inbox.live.pop(seq.request_id, None)
        self.output_processor.finish(seq, outputs, error, error_kind)
