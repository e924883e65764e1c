"""The machine a benchmark runs on: how busy its cores are, and a warning when others keep them busy."""
from __future__ import annotations

import os
import time


def busy_cpu_fraction(seconds: float = 0.5) -> float | None:
    """The fraction of all cores busy over `seconds` while this process sleeps (Linux /proc/stat; else None)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


def warn_if_busy() -> None:
    busy = busy_cpu_fraction()
    if busy is not None and busy > 0.25:
        print(f"WARNING: other processes keep {busy:.0%} of the {os.cpu_count()} cores busy: the timings will be "
              "unreliable (contended BLAS threads can run many times slower)")
