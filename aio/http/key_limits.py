"""Per-key limits (set with `aio keys create/update`): requests per minute, tokens per minute and requests in
flight, enforced per replica over a sliding minute. A refused request gets 429 with `Retry-After`; every answer
to a limited key carries OpenAI's `x-ratelimit-*` headers."""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from aio.api.errors import APIError
from aio.db.keys import ApiKeyInfo

WINDOW_S = 60.0


class KeyLimitExceeded(APIError):
    def __init__(self, message: str, retry_after_s: float, headers: dict[str, str]) -> None:
        super().__init__(429, message, code="rate_limit_exceeded", retry_after_s=retry_after_s)
        self.rate_headers = headers


@dataclass
class _KeyUsage:
    requests: deque[float] = field(default_factory=deque)  # arrival times in the window
    tokens: deque[tuple[float, int]] = field(default_factory=deque)  # (finish time, tokens) in the window
    in_flight: int = 0

    def trim(self, now: float) -> None:
        while self.requests and self.requests[0] <= now - WINDOW_S:
            self.requests.popleft()
        while self.tokens and self.tokens[0][0] <= now - WINDOW_S:
            self.tokens.popleft()

    def tokens_used(self) -> int:
        return sum(n for _, n in self.tokens)


def _duration(seconds: float) -> str:
    """OpenAI's reset format: "1s", "6m0s"."""
    seconds = max(0, math.ceil(seconds))
    return f"{seconds // 60}m{seconds % 60}s" if seconds >= 60 else f"{seconds}s"


@dataclass
class Admission:
    """A request let in: `finish(tokens)` once it ends (idempotent)."""
    limiter: "KeyLimiter | None"
    key_id: int | None
    headers: dict[str, str]
    _done: bool = False

    def finish(self, tokens: int) -> None:
        if not self._done and self.limiter is not None:
            self._done = True
            self.limiter._finish(self.key_id, tokens)


class KeyLimiter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usage: dict[int, _KeyUsage] = {}

    def admit(self, key: ApiKeyInfo | None) -> Admission:
        """Let the request in or raise KeyLimitExceeded (429)."""
        if key is None or (key.rpm_limit is None and key.tpm_limit is None and key.max_streams is None):
            return Admission(None, None, {})
        now = time.monotonic()
        with self._lock:
            usage = self._usage.setdefault(key.id, _KeyUsage())
            usage.trim(now)
            headers = self._headers(key, usage, now)
            refusal = self._refusal(key, usage, now)
            if refusal is not None:
                message, retry_after = refusal
                raise KeyLimitExceeded(message, retry_after, headers)
            usage.requests.append(now)
            usage.in_flight += 1
            headers = self._headers(key, usage, now)
        return Admission(self, key.id, headers)

    @staticmethod
    def _refusal(key: ApiKeyInfo, usage: _KeyUsage, now: float) -> tuple[str, float] | None:
        if key.max_streams is not None and usage.in_flight >= key.max_streams:
            return (f"this API key has {usage.in_flight} requests in flight, its limit is {key.max_streams}; "
                    "retry when one finishes", 1.0)
        if key.rpm_limit is not None and len(usage.requests) >= key.rpm_limit:
            return (f"this API key is limited to {key.rpm_limit} requests per minute",
                    usage.requests[0] + WINDOW_S - now)
        if key.tpm_limit is not None and usage.tokens_used() >= key.tpm_limit:
            return (f"this API key is limited to {key.tpm_limit} tokens per minute",
                    usage.tokens[0][0] + WINDOW_S - now)
        return None

    @staticmethod
    def _headers(key: ApiKeyInfo, usage: _KeyUsage, now: float) -> dict[str, str]:
        headers = {}
        if key.rpm_limit is not None:
            reset = usage.requests[0] + WINDOW_S - now if usage.requests else 0.0
            headers.update({"x-ratelimit-limit-requests": str(key.rpm_limit),
                            "x-ratelimit-remaining-requests": str(max(0, key.rpm_limit - len(usage.requests))),
                            "x-ratelimit-reset-requests": _duration(reset)})
        if key.tpm_limit is not None:
            reset = usage.tokens[0][0] + WINDOW_S - now if usage.tokens else 0.0
            headers.update({"x-ratelimit-limit-tokens": str(key.tpm_limit),
                            "x-ratelimit-remaining-tokens": str(max(0, key.tpm_limit - usage.tokens_used())),
                            "x-ratelimit-reset-tokens": _duration(reset)})
        return headers

    def _finish(self, key_id: int, tokens: int) -> None:
        with self._lock:
            usage = self._usage.get(key_id)
            if usage is None:
                return
            usage.in_flight -= 1
            if tokens > 0:
                usage.tokens.append((time.monotonic(), tokens))
