"""Whether a process is alive: the one answer every room asks for (a job's worker, the measuring
lock's holder, a search's candidate claims, a UI process's upload folder)."""

from __future__ import annotations

import os


def process_alive(pid: int | None) -> bool:
    """Whether process ``pid`` runs on this machine: it exists (or exists and belongs to another
    user) and is not a zombie (a finished child nobody has reaped yet)."""
    if not pid or pid < 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:  # a pid no system has
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:  # no /proc (not Linux): os.kill said it exists
        return True


__all__ = ["process_alive"]
