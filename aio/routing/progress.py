"""How long jobs (`aio retrain`) report where they are: named stages, some with a count of items."""
from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def stage(self, name: str, total: int | None = None) -> None:
        """A new stage begins (the previous one is done); `total` items when it has a count."""

    def advance(self, n: int = 1) -> None:
        """`n` more items of the current stage are done."""

    def close(self) -> None:
        """The job is over."""


class NoProgress:
    """Reports nothing (not a terminal, tests)."""

    def stage(self, name: str, total: int | None = None) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass
