"""The engine's requests by id, and those added or aborted since the last step. Callers hand requests in under the
engine's lock; the step takes them at its start."""
from __future__ import annotations

from collections import deque

from tiers.engine.sampling_params import InvalidRequestError
from tiers.engine.sequence import Sequence


class Inbox:
    def __init__(self) -> None:
        self.live: dict[str, Sequence] = {}  # taken by a step, not finished
        self.added: deque[Sequence] = deque()
        self.aborted: deque[str] = deque()  # request ids

    def add(self, seqs: list[Sequence]) -> None:
        """Raises InvalidRequestError for a request id in use (all or none are added)."""
        for seq in seqs:
            if seq.request_id in self.live or any(p.request_id == seq.request_id for p in self.added):
                raise InvalidRequestError(f"request id {seq.request_id!r} is already in use")
        self.added.extend(seqs)

    def __bool__(self) -> bool:
        return bool(self.added or self.aborted)

    def take(self) -> tuple[list[Sequence], list[Sequence]]:
        """The sequences added since the last take (live from now on), and the unfinished ones aborted."""
        added = list(self.added)
        self.added.clear()
        for seq in added:
            self.live[seq.request_id] = seq
        aborted = [seq for request_id in dict.fromkeys(self.aborted)
                   if (seq := self.live.get(request_id)) is not None and not seq.is_finished]
        self.aborted.clear()
        return added, aborted
