"""Other processes keeping cores busy, started on purpose: ``schedx bench --busy N`` and the
busy-machine benchmark time a model beside ``N`` processes that spin (``while True: pass``), as a
user's build, browser or second model would. They are stopped (killed and reaped) on the way
out, whatever happened inside."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "while True: pass"


@contextmanager
def busy_processes(count: int) -> Iterator[list[subprocess.Popen]]:
    """``count`` spinning Python processes while the block runs (none for 0)."""
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(max(0, count)):
            procs.append(subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


__all__ = ["busy_processes"]
