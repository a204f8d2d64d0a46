"""Named moments where the fault-injection suite (``make test-faults``) can hold a process, so that
a signal or a kill lands there rather than wherever a race puts it.

``SCHEDX_FAULT_HOLD=NAME:SECONDS`` holds the process at the point ``NAME`` for that long, after
touching the file ``SCHEDX_FAULT_MARK`` (when set) to say it got there. Unset (always, outside
tests), a point costs one environment lookup. A held process still takes signals: holding is
Python's ``time.sleep``, which runs signal handlers as they come.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

HOLD_VAR = "SCHEDX_FAULT_HOLD"
MARK_VAR = "SCHEDX_FAULT_MARK"


def hold(point: str) -> None:
    """Hold here if the environment names this point (see the module docstring)."""
    spec = os.environ.get(HOLD_VAR)
    if not spec:
        return
    name, _, seconds = spec.partition(":")
    if name != point:
        return
    mark = os.environ.get(MARK_VAR)
    if mark:
        Path(mark).touch()
    end = time.monotonic() + float(seconds or 60)
    while time.monotonic() < end:
        time.sleep(0.05)


__all__ = ["HOLD_VAR", "MARK_VAR", "hold"]
