"""Failed-attempt throttling per client (admin Bearer checks): after `max_failures` failures within `window_s`,
the client is refused for `lockout_s` (doubling with each further lockout, up to `max_lockout_s`)."""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

MAX_CLIENTS = 10_000  # remembered addresses; beyond, the oldest entries are forgotten


@dataclass
class _Client:
    failures: deque[float] = field(default_factory=deque)
    blocked_until: float = 0.0
    lockouts: int = 0


@dataclass
class FailureThrottle:
    max_failures: int = 10
    window_s: float = 60.0
    lockout_s: float = 30.0
    max_lockout_s: float = 900.0
    _clients: dict[str, _Client] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def blocked_for(self, client: str) -> float:
        """Seconds `client` must still wait (0: it may try)."""
        with self._lock:
            state = self._clients.get(client)
            return max(0.0, state.blocked_until - time.monotonic()) if state is not None else 0.0

    def failed(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            if client not in self._clients and len(self._clients) >= MAX_CLIENTS:
                self._clients.pop(next(iter(self._clients)))
            state = self._clients.setdefault(client, _Client())
            state.failures.append(now)
            while state.failures and state.failures[0] < now - self.window_s:
                state.failures.popleft()
            if len(state.failures) >= self.max_failures:
                state.blocked_until = now + min(self.max_lockout_s, self.lockout_s * 2 ** state.lockouts)
                state.lockouts += 1
                state.failures.clear()

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._clients.pop(client, None)
