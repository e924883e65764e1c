"""Fair turns at the engine lock between the engine's loop and the callers that add or abort requests."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

LET_IN_TIMEOUT_S = 0.05


class Turnstile:
    """Lets callers that wait for the engine lock in between the loop's steps. A lock does not queue its waiters:
    the loop thread, releasing the lock at the end of a step and taking it again for the next, would win almost
    every time, and a request being added would wait several steps (its time to first token with it)."""

    def __init__(self, timeout_s: float = LET_IN_TIMEOUT_S) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._entering = 0
        self.timeout_s = timeout_s

    @contextlib.contextmanager
    def entering(self) -> Iterator[None]:
        """Around a caller's taking of the engine lock."""
        with self._changed:
            self._entering += 1
        try:
            yield
        finally:
            with self._changed:
                self._entering -= 1
                self._changed.notify_all()

    def let_in(self) -> None:
        """The loop, before taking the lock for a step: waits (briefly, at most timeout_s) for the callers already
        waiting to be through."""
        with self._changed:
            self._changed.wait_for(lambda: self._entering == 0, timeout=self.timeout_s)

    @property
    def num_entering(self) -> int:
        with self._changed:
            return self._entering
