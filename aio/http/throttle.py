"""Failed-attempt limiting per client, for the admin Bearer checks and the dashboard's sign-in form."""
from __future__ import annotations

import threading
import time
from collections import deque

MAX_CLIENTS = 10_000  # remembered addresses; beyond, the oldest entries are forgotten


class FailureLimiter:
    """At most `max_failures` failed attempts per client within `window_s`; then that client waits until the oldest
    of them leaves the window."""

    def __init__(self, max_failures: int, window_s: float) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, client: str, now: float | None = None) -> float | None:
        """Seconds until `client` may try again, or None when it may now."""
        now = time.monotonic() if now is None else now
        with self._lock:
            failures = self._failures.get(client)
            if failures is None:
                return None
            while failures and failures[0] <= now - self.window_s:
                failures.popleft()
            if len(failures) < self.max_failures:
                return None
            return failures[0] + self.window_s - now

    def failed(self, client: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            if client not in self._failures and len(self._failures) >= MAX_CLIENTS:
                self._failures.pop(next(iter(self._failures)))
            self._failures.setdefault(client, deque(maxlen=self.max_failures)).append(now)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)
