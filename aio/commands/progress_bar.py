"""Stages and a bar on stderr while a long command runs, when stderr is a terminal; nothing otherwise (logs, CI)."""
from __future__ import annotations

import sys
import time

from aio.routing.progress import NoProgress, Progress


class TerminalProgress:
    """One line per finished stage (with its time), a live bar for the current one (rich)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bars, SpinnerColumn, TextColumn, \
            TimeElapsedColumn

        self._console = Console(stderr=True)
        self._bars = Bars(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=self._console, transient=True)
        self._bars.start()
        self._task = None
        self._name: str | None = None
        self._started = 0.0

    def _finish(self) -> None:
        if self._task is not None:
            self._bars.remove_task(self._task)
            self._console.print(f"  {self._name} ({time.perf_counter() - self._started:.1f} s)")
            self._task = None

    def stage(self, name: str, total: int | None = None) -> None:
        self._finish()
        self._name, self._started = name, time.perf_counter()
        self._task = self._bars.add_task(name, total=total)

    def advance(self, n: int = 1) -> None:
        if self._task is not None:
            self._bars.advance(self._task, n)

    def close(self) -> None:
        self._finish()
        self._bars.stop()


def progress_for_stderr() -> Progress:
    return TerminalProgress() if sys.stderr.isatty() else NoProgress()
