"""Stopping a search cleanly: on Ctrl-C, SIGTERM (``schedx jobs stop``), a time budget, or a
failure to write a batch.

Why not an exception: MetaSchedule's ``tune_tasks`` is C++ that calls back into Python (builder,
runner, measure callbacks, cost model). A ``KeyboardInterrupt`` raised in one of them crosses the
FFI as a bare ``RuntimeError`` (its type is lost), unwinds C++ frames half-way through a batch,
and, landing in the wrong place (XGBoost training, TVM's thread pool), has crashed the process
with a segfault (rc 139). So a signal only *requests* a stop (:class:`StopRequest`), and the
search honours it at the next batch boundary: every task's search strategy
(:class:`search.strategy.StoppableSearch`) then proposes no more candidates, which is how MetaSchedule itself
ends a task whose search space is used up; ``tune_tasks`` returns normally, with every finished
batch in the store. A second signal makes it urgent (``hard``): the caller's ``on_hard``
callbacks run (the search closes its worker pool, so the batch in flight ends within a second
and its unmeasured candidates are not recorded). Nothing here imports TVM: a job process sets
its handlers up first thing.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

INTERRUPTED = "interrupted"  # Ctrl-C (SIGINT)
TERMINATED = "terminated"  # SIGTERM: `schedx jobs stop`, a service manager
TIME_UP = "time budget"  # --minutes
FAILED = "failed"  # a batch could not be written (disk full, database gone read-only)

_REASON_OF_SIGNAL = {signal.SIGINT: INTERRUPTED, signal.SIGTERM: TERMINATED}


class StopRequest:
    """A search's stop flag: set by a signal handler, a time budget or the search itself; read at
    batch boundaries. Thread-safe; setting it again keeps the first reason."""

    def __init__(self, minutes: float | None = None) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.reason = ""
        self.hard = False
        self.signals = 0
        self.deadline = time.monotonic() + minutes * 60 if minutes else None
        self.on_hard: list[Callable[[], None]] = []

    def request(self, reason: str) -> None:
        with self._lock:
            if not self._event.is_set():
                self.reason = reason
                self._event.set()

    def urgent(self) -> None:
        """Stop now: what the batch in flight has not measured yet is abandoned."""
        self.hard = True
        for callback in list(self.on_hard):
            try:
                callback()
            except Exception:  # noqa: BLE001 - stopping must not fail half-way
                pass

    def set_minutes(self, minutes: float | None) -> None:
        """A time budget from now (None or 0: none)."""
        self.deadline = time.monotonic() + minutes * 60 if minutes else None

    def should_stop(self) -> bool:
        if self._event.is_set():
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.request(TIME_UP)
            return True
        return False

    @property
    def interrupted(self) -> bool:
        """Stopped by a signal (the job is 'stopped', not 'done')."""
        return self._event.is_set() and self.reason in (INTERRUPTED, TERMINATED)

    def on_signal(self, signum: int, _frame=None) -> None:
        """A signal handler: the first signal requests a stop, the next one makes it urgent."""
        self.signals += 1
        if self.signals == 1 or not self._event.is_set():
            self.request(_REASON_OF_SIGNAL.get(signum, TERMINATED))
        else:
            self.urgent()


@contextmanager
def signals_stop(stop: StopRequest, signums=(signal.SIGINT, signal.SIGTERM)) -> Iterator[StopRequest]:
    """Within the block, SIGINT and SIGTERM set ``stop`` instead of raising (see the module
    docstring); the previous handlers come back afterwards. Outside the main thread (Streamlit's
    script threads) signals cannot be handled and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {}
    try:
        for signum in signums:
            previous[signum] = signal.signal(signum, stop.on_signal)
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


__all__ = ["FAILED", "INTERRUPTED", "StopRequest", "TERMINATED", "TIME_UP", "signals_stop"]
