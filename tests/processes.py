"""Processes a test run started, found by a marker in their environment (inherited by every child:
UI servers, background search jobs, pool workers), so that none outlives a test or the suite."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

RUN_MARKER = "SCHEDX_TEST_RUN"


def marked(key: str, value: str) -> list[tuple[int, str]]:
    """``(pid, command line)`` of this machine's processes whose environment has ``key=value``."""
    needle = f"{key}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":  # finished, not yet reaped
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append((int(entry.name), cmd))
    return found


def kill_marked(key: str, value: str, *, grace_s: float = 5.0) -> list[tuple[int, str]]:
    """SIGTERM, then SIGKILL after ``grace_s``, every process marked ``key=value``; the ones found."""
    found = marked(key, value)
    for pid, _ in found:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + grace_s
    while time.time() < deadline and marked(key, value):
        time.sleep(0.2)
    for pid, _ in marked(key, value):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return found


def leftovers(value: str, *, wait_s: float = 10.0) -> list[tuple[int, str]]:
    """Processes of this test run still alive after ``wait_s`` (pool workers notice a dead parent
    within a second or two)."""
    deadline = time.time() + wait_s
    while True:
        left = marked(RUN_MARKER, value)
        if not left or time.time() > deadline:
            return left
        time.sleep(0.5)
