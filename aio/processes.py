"""Whether another process still runs: for files a process leaves behind it (spill files, assembly locks)."""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while a process with this id exists (also when it belongs to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
