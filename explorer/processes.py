"""Whether a process is alive: the one answer every room asks for (a job's worker, the measuring
lock's holder, a search's candidate claims, a UI process's upload folder, a temp folder's maker).

A pid alone can mislead: on a busy machine pids are reused within minutes, and a dead process's
pid may belong to another one now. Where its start time was recorded with it
(:func:`process_started`), :func:`process_alive` compares that too."""

from __future__ import annotations

import os


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (state first), or None (no such process, no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def process_started(pid: int | None = None) -> int | None:
    """When process ``pid`` (default: this one) started, in clock ticks after boot (the 22nd field
    of ``/proc/PID/stat``): with the pid, it names one process for good. None where unknown."""
    fields = _stat_fields(os.getpid() if pid is None else pid)
    try:
        return int(fields[19]) if fields else None  # field 22, counted from field 3 (the state)
    except (IndexError, ValueError):
        return None


def process_alive(pid: int | None, started: int | None = None) -> bool:
    """Whether process ``pid`` runs on this machine: it exists (or exists and belongs to another
    user) and is not a zombie (a finished child nobody has reaped yet); with ``started`` (its
    :func:`process_started`), and it is that process, not a later one given the same pid."""
    if not pid or pid < 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OverflowError:  # a pid no system has
        return False
    fields = _stat_fields(pid)
    if fields is None:  # no /proc (not Linux): os.kill said it exists
        return True
    if fields[0] == "Z":
        return False
    return started is None or process_started(pid) in (None, started)


__all__ = ["process_alive", "process_started"]
