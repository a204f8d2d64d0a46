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
and its unmeasured candidates are not recorded). Whatever the process is doing then (loading a
model, extracting tasks, training the cost model: work with no batch boundary), it ends within
``HARD_EXIT_S``: a watchdog runs the ``on_exit`` callbacks (their ``LAST_WORDS_S`` are part of
that time) and exits with 130 (143 for SIGTERM). While the search starts (:meth:`StopRequest.starting`:
nothing measured, nothing to finish) the watchdog does not wait: a second signal ends the process
after the last words.
That loses nothing: every batch is one SQLite transaction, and a dead search's claims and scratch
folder are cleared by the next one. Nothing here imports TVM: a job process sets its handlers up
first thing.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

INTERRUPTED = "interrupted"  # Ctrl-C (SIGINT)
TERMINATED = "terminated"  # SIGTERM: `schedx jobs stop`, a service manager
TIME_UP = "time budget"  # --minutes
FAILED = "failed"  # a batch could not be written (disk full, database gone read-only)
HARD_EXIT_S = 10.0  # after a second signal the process ends within this, whatever it is doing
LAST_WORDS_S = 2.0  # what the on_exit callbacks get before that exit
_EXIT_STATUS = {INTERRUPTED: 130, TERMINATED: 143}

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
        self.started = time.monotonic()  # the command's start: a time budget (--minutes) counts from here
        self.deadline = self.started + minutes * 60 if minutes else None
        # batches the search asked for and those measured since its first: MetaSchedule asks for
        # several before the first is measured (a round over every task), so a batch's length is
        # the search's time over the batches measured, and those in flight are still to come
        self._batches = [0, 0]  # started, done
        self._search_began: float | None = None
        self._last_done = 0.0
        self.on_hard: list[Callable[[], None]] = []
        self.on_exit: list[Callable[[], None]] = []  # last words before a watchdog's exit
        self.exit_after_s: float | None = None  # set by signals_stop: the watchdog's delay
        self._watchdog: threading.Timer | None = None

    def request(self, reason: str) -> None:
        with self._lock:
            if not self._event.is_set():
                self.reason = reason
                self._event.set()

    def urgent(self) -> None:
        """Stop now: what the batch in flight has not measured yet is abandoned; with a watchdog
        (``exit_after_s``), the process ends within that many seconds if the stop has not."""
        self.hard = True
        _call_all(self.on_hard)
        if self.exit_after_s is not None and self._watchdog is None:  # the last words count in the delay
            self._watchdog = threading.Timer(max(0.0, self.exit_after_s - LAST_WORDS_S), self._exit_now)
            self._watchdog.daemon = True
            self._watchdog.start()

    @contextmanager
    def starting(self) -> Iterator[StopRequest]:
        """Within the block (a search starting: loading, checking, workers starting; nothing
        measured yet), a second signal ends the process at once, after the ``on_exit`` callbacks,
        instead of waiting for a batch boundary that is not there (no effect without a watchdog)."""
        saved = self.exit_after_s
        if saved is not None:
            self.exit_after_s = 0.0
        try:
            yield self
        finally:
            self.exit_after_s = saved

    def cancel_watchdog(self) -> None:
        """The stop completed in time: no forced exit."""
        if self._watchdog is not None:
            self._watchdog.cancel()

    def _exit_now(self) -> None:
        last_words = threading.Thread(target=_call_all, args=(self.on_exit,), daemon=True)
        last_words.start()  # bounded: the main thread may hold a lock they wait for
        last_words.join(LAST_WORDS_S)
        os._exit(_EXIT_STATUS.get(self.reason, 143))

    def set_minutes(self, minutes: float | None, *, since: float | None = None) -> None:
        """A time budget of ``minutes`` from ``since`` (a ``time.monotonic()``; default now; None or
        0 minutes: none)."""
        start = time.monotonic() if since is None else since
        self.deadline = start + minutes * 60 if minutes else None

    def batch_starting(self) -> bool:
        """Called before each batch is generated: whether to stop instead (the stop is then
        requested). Under a time budget a batch starts only when, after the batches still in
        flight, it would end nearer the deadline than stopping now does, a batch's length being
        the search's seconds per batch measured so far: the budget is kept to within about half a
        batch instead of overrun by a whole round of them."""
        now = time.monotonic()
        if self.should_stop():
            return True
        if self._search_began is None:
            self._search_began = now
        started, done = self._batches
        if done and self.deadline is not None:
            per_batch = (self._last_done - self._search_began) / done
            in_flight = max(0, started - done)
            if not worth_starting(per_batch, self.deadline - in_flight * per_batch, now):
                self.request(TIME_UP)
                return True
        self._batches[0] += 1
        return False

    def batch_done(self) -> None:
        """A batch asked for by :meth:`batch_starting` was measured (batches before it are not counted)."""
        if self._search_began is not None:
            self._batches[1] += 1
            self._last_done = time.monotonic()

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


def worth_starting(seconds: float, deadline: float | None, now: float | None = None) -> bool:
    """Whether a piece of work expected to take ``seconds`` (the last one's length) should start
    before ``deadline`` (a ``time.monotonic()``; None: no deadline): only when it would end nearer
    the deadline than stopping now does, that is when more than half of it fits."""
    if deadline is None:
        return True
    return deadline - (time.monotonic() if now is None else now) >= seconds / 2


def _call_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in list(callbacks):
        try:
            callback()
        except Exception:  # noqa: BLE001 - stopping must not fail half-way
            pass


@contextmanager
def signals_stop(stop: StopRequest, signums=(signal.SIGINT, signal.SIGTERM),
                 hard_exit_s: float | None = HARD_EXIT_S) -> Iterator[StopRequest]:
    """Within the block, SIGINT and SIGTERM set ``stop`` instead of raising, and a second one
    ends the process within ``hard_exit_s`` (None: never forced; see the module docstring); the
    previous handlers come back afterwards. Outside the main thread (Streamlit's script threads)
    signals cannot be handled and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {}
    stop.exit_after_s = hard_exit_s
    try:
        for signum in signums:
            previous[signum] = signal.signal(signum, stop.on_signal)
        yield stop
    finally:
        stop.cancel_watchdog()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


__all__ = ["FAILED", "HARD_EXIT_S", "INTERRUPTED", "StopRequest", "TERMINATED", "TIME_UP", "signals_stop"]
