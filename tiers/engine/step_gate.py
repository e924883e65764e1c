"""One model step at a time per process on the CPU.

Policy: on a CPU every engine step already uses all the cores it was given (OpenMP threads in the native kernels
and in torch). Two engines of one process stepping at once (`aio serve` runs one engine per tier) put twice as
many threads on the cores, and OpenMP's barriers then wait on threads the OS has descheduled: both steps run
several times slower than they would one after the other. So CPU engines take turns, in the order they asked
(a ticket lock: an engine that releases the gate cannot take it straight back while another waits). Engines on a
GPU never take the gate: the device queues their work.
"""
from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext


class TicketLock:
    """A first-come, first-served lock (not reentrant)."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._next_ticket = 0
        self._now_serving = 0

    def __enter__(self) -> TicketLock:
        with self._changed:
            ticket = self._next_ticket
            self._next_ticket += 1
            while ticket != self._now_serving:
                self._changed.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self._now_serving += 1
            self._changed.notify_all()

    @property
    def num_waiting(self) -> int:
        """Holders and waiters: tickets handed out and not yet released."""
        with self._changed:
            return self._next_ticket - self._now_serving


CPU_STEP_GATE = TicketLock()


def step_gate(device_type: str) -> AbstractContextManager:
    """The gate an engine on `device_type` holds around each step."""
    return CPU_STEP_GATE if device_type == "cpu" else nullcontext()
