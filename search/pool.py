"""Warm worker processes that build and measure candidates for a search.

MetaSchedule's ``PopenPoolExecutor`` starts a worker lazily, when its first job arrives, as
``python -m tvm.exec.popen_worker``: the job then waits for ``import tvm`` (1.5 s here with torch
installed) and, in the default builder, for every tensor intrinsic TVM ships (20 s). schedx's
pool starts its workers at once (before the parent has imported TVM itself, when the command
line asks for it early with :func:`prestart`), keeps torch out of them and registers only the
target's intrinsics (see :mod:`explorer.tvm_fast`), and keeps them for the whole search.

Each job ends as a :class:`CallResult` whose status is the store's :class:`store.Outcome`: a job
that raises or kills its process (a segfaulting candidate) is the caller's failure (a build or a
run error), one that runs past its time a ``TIMEOUT``, and the worker is replaced at once;
failures that are not the job's come back as ``INFRA_ERROR``. Nothing here imports TVM: the parent may create a pool first thing.
"""

from __future__ import annotations

import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from store.outcome import Outcome

START_TIMEOUT_S = 120.0  # a worker's start-up (imports, intrinsics) on a loaded machine


# the word for what a job does, in messages, by the failure its caller names
_VERB = {Outcome.BUILD_ERROR: "build", Outcome.RUN_ERROR: "run"}


@dataclass(frozen=True)
class CallResult:
    """How one job ended, as the store records it (:class:`store.Outcome`): ``OK`` (``value``
    holds the result); the caller's failure (``failed``: ``BUILD_ERROR``, ``RUN_ERROR``) when the
    job raised or killed its process (``crashed``: a segfaulting candidate); ``TIMEOUT``; or
    ``INFRA_ERROR``: not the job's fault (a worker that cannot start, a closed pool, a process
    killed from outside, an RPC device out of reach, an instruction this CPU lacks). ``message``
    says why, in words ("run crashed: ...")."""

    status: Outcome
    value: object = None
    message: str = ""
    crashed: bool = False

    @property
    def ok(self) -> bool:
        return self.status == Outcome.OK


# A crash by one of these is the candidate's; SIGILL is the machine's: the code uses an
# instruction this CPU does not have, whatever the schedule (the target does not fit the host).
_CRASH_SIGNALS = {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGABRT"}


class _WorkerDied(Exception):
    def __init__(self, message: str, infra: bool) -> None:
        super().__init__(message)
        self.infra = infra


class _Worker:
    """One worker process and the two pipes to it; used by one thread at a time."""

    def __init__(self, init: tuple[Callable, tuple] | None) -> None:
        self.init = init
        self.proc: subprocess.Popen | None = None
        self.closed = False
        self.start()

    def start(self) -> None:
        import cloudpickle

        if self.closed:
            return
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        from explorer.target.environment import threads_env  # (imports no TVM)

        self.proc = subprocess.Popen([sys.executable, "-m", "search.pool_worker", str(to_child_r), str(from_child_w)],
                                     env=threads_env(),
                                     pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.rfd, self.wfd = from_child_r, to_child_w
        self.started_ok: bool | None = None if self.init else True
        self.start_error = ""
        if self.init:  # sent now, answered before the first job's answer
            self._send(cloudpickle.dumps((*self.init, Outcome.INFRA_ERROR), protocol=pickle.HIGHEST_PROTOCOL))

    def kill(self) -> None:
        """Kill the process (a call waiting on it returns at once); its pipes stay open."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def stop(self) -> None:
        if self.proc is None:
            return
        self.kill()
        self.proc.wait()
        for fd in (self.rfd, self.wfd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def _ready(self) -> str:
        """Start the process if needed and wait for its start-up; '' when ready, else why not.
        A start-up that fails is tried once more (a passing fault should not cost the search)."""
        for attempt in range(2):
            if self.proc is None:
                self.start()
            if self.proc is None:
                return "the worker pool is closed"
            if self.started_ok is None:
                status, value = self._receive(START_TIMEOUT_S)
                self.started_ok = status == Outcome.OK
                self.start_error = "" if self.started_ok else str(value)
            if self.started_ok:
                return ""
            if attempt == 0:
                self.restart()
        return f"the worker process could not start: {self.start_error}"

    def call(self, fn: Callable, args: tuple, timeout: float, failed: Outcome) -> CallResult:
        import cloudpickle

        verb = _VERB.get(failed, "job")
        try:
            why_not = self._ready()
            if why_not:
                return CallResult(Outcome.INFRA_ERROR, message=why_not)
            self._send(cloudpickle.dumps((fn, args, failed), protocol=pickle.HIGHEST_PROTOCOL))
            status, value = self._receive(timeout)
        except TimeoutError:
            self.restart()
            return CallResult(Outcome.TIMEOUT, message=f"{verb} timed out after {timeout:.0f} s")
        except _WorkerDied as died:
            self.restart()
            if died.infra:
                return CallResult(Outcome.INFRA_ERROR, message=str(died))
            return CallResult(failed, message=f"{verb} crashed: {died}", crashed=True)
        except BaseException:  # interrupted between a job and its answer: that answer must not leak
            self.restart()
            raise
        if status == Outcome.OK:
            return CallResult(Outcome.OK, value=value)
        if status == Outcome.INFRA_ERROR:
            return CallResult(Outcome.INFRA_ERROR, message=str(value))
        return CallResult(failed, message=f"{verb} failed: {value}")

    def _send(self, data: bytes) -> None:
        try:
            os.write(self.wfd, struct.pack("<Q", len(data)))
            view = memoryview(data)
            while view:
                view = view[os.write(self.wfd, view):]
        except OSError as err:
            raise self._death(f"the worker process went away ({err})") from None

    def _receive(self, timeout: float):
        import cloudpickle

        deadline = time.monotonic() + timeout
        size = struct.unpack("<Q", self._read(8, deadline))[0]
        return cloudpickle.loads(self._read(size, deadline))

    def _read(self, n: int, deadline: float) -> bytes:
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError()
            ready, _, _ = select.select([self.rfd], [], [], left)
            if not ready:
                raise TimeoutError()
            chunk = os.read(self.rfd, min(n - got, 1 << 20))
            if not chunk:
                raise self._death("the worker process exited")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _death(self, fallback: str) -> _WorkerDied:
        """Why the process went: the candidate's fault (it crashed it) or not (see :class:`CallResult`)."""
        try:
            code = self.proc.wait(timeout=2) if self.proc is not None else None
        except subprocess.TimeoutExpired:
            code = None
        if self.closed:
            return _WorkerDied("the worker pool was closed", infra=True)
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            if name in _CRASH_SIGNALS:
                return _WorkerDied(f"the candidate crashed its process ({name})", infra=False)
            if name == "SIGILL":
                return _WorkerDied("illegal instruction (SIGILL): the code uses an instruction this CPU does not "
                                   "have; the target does not fit this machine (use --target cpu)", infra=True)
            return _WorkerDied(f"the worker process was killed from outside ({name})", infra=True)
        return _WorkerDied(fallback if code is None else f"{fallback} with status {code}", infra=code is None)


class WarmPool:
    """``size`` worker processes, started now, each first running ``init`` (a function and its
    arguments, e.g. :func:`search.worker_jobs.prepare`)."""

    def __init__(self, size: int, *, init: tuple[Callable, tuple] | None = None) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one worker, got {size}")
        self.size = size
        self.init = init
        self._workers = [_Worker(init) for _ in range(size)]
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for w in self._workers:
            self._idle.put(w)
        self._threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="schedx-pool")
        self._closed = self._released = False

    def call(self, fn: Callable, *args, timeout: float, failed: Outcome = Outcome.RUN_ERROR) -> CallResult:
        """Run ``fn(*args)`` in the next free worker; waits for one to be free. ``failed``: what
        the job raising or crashing its process means to the caller (a build or a run error)."""
        if self._closed:
            return CallResult(Outcome.INFRA_ERROR, message="the worker pool is closed")
        worker = self._idle.get()
        try:
            return worker.call(fn, args, timeout, failed)
        finally:
            self._idle.put(worker)

    def map(self, fn: Callable, items: Iterable[tuple], *, timeout: float,
            failed: Outcome = Outcome.RUN_ERROR) -> list[CallResult]:
        """``fn(*item)`` for every item, spread over the workers; results in order."""
        return list(self._threads.map(lambda item: self.call(fn, *item, timeout=timeout, failed=failed), list(items)))

    def abandon(self) -> None:
        """Kill the workers now and take no more calls, without waiting for anything: safe in a
        signal handler (calls in flight return at once as ``INFRA_ERROR``; :meth:`close` still releases
        the workers afterwards)."""
        self._closed = True
        for w in self._workers:
            w.closed = True
            w.kill()

    def close(self, wait_s: float = 10.0) -> None:
        """Kill the workers (calls in flight return at once, as crashed), then release them."""
        if self._released:
            return
        self._closed = self._released = True
        for w in self._workers:
            w.closed = True
            w.kill()
        self._threads.shutdown(wait=True, cancel_futures=True)
        back, deadline = 0, time.monotonic() + wait_s  # every call has handed its worker back
        while back < self.size and time.monotonic() < deadline:
            try:
                self._idle.get(timeout=0.1)
                back += 1
            except queue.Empty:
                pass
        for w in self._workers:
            w.stop()

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_prestarted: dict[tuple, WarmPool] = {}
_lock = threading.Lock()


def default_size() -> int:
    """One worker per core: builds run in parallel, measurements one at a time."""
    return max(1, os.cpu_count() or 2)


def prestart(size: int | None = None, intrinsics: tuple[str, ...] | None = None) -> None:
    """Start a search's workers now, so that they import TVM while this process does too;
    :func:`take` hands them to the search (``search.tune.tune`` asks for them). ``intrinsics``:
    the target's (:attr:`explorer.target.Target.intrinsics`; None: this machine's CPU)."""
    from search.worker_jobs import prepare  # imports no TVM

    key = (size or default_size(), intrinsics)
    with _lock:
        if key not in _prestarted:
            _prestarted[key] = WarmPool(key[0], init=(prepare, (intrinsics,)))


def release_prestarted() -> None:
    """Close pools :func:`prestart` started that no search took (the command failed first)."""
    with _lock:
        left = list(_prestarted.values())
        _prestarted.clear()
    for pool in left:
        pool.close()


def take(size: int | None = None, intrinsics: tuple[str, ...] | None = None) -> WarmPool:
    """The pool :func:`prestart` started for these arguments, or a new one (a prestarted pool
    for other arguments is closed)."""
    from search.worker_jobs import prepare

    key = (size or default_size(), intrinsics)
    with _lock:
        pool = _prestarted.pop(key, None)
        others = list(_prestarted.values())
        _prestarted.clear()
    for other in others:
        other.close()
    return pool if pool is not None else WarmPool(key[0], init=(prepare, (intrinsics,)))
