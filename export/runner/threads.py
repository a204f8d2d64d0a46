"""How TVM's thread pool is set up for a bundle: how many threads, whether they are pinned, and how
long an idle worker spins before it sleeps. Set in the environment before TVM's pool starts (at the
first run); TVM reads these variables once. Part of a bundle's ``run.py`` (:mod:`export.runner`).

Why the spin count (issue 51 item 5). TVM cuts a parallel loop into one fixed chunk per thread and
waits for every chunk; between kernels an idle worker spins (300000 ``sched_yield`` calls by
default) before it sleeps. On a machine where other processes keep the cores busy, a spinning
worker spends its share of the CPU spinning, and the scheduler then runs it last when a chunk is
waiting for it; a worker that sleeps at once is woken as an interactive task and runs promptly.
On a quiet machine, though, spinning workers answer the next kernel sooner (the figures:
docs/notes/measurements.md, "Busy machine"). So ``run.py`` reads the load
as it starts (``procs_running`` less its own threads) and lets workers sleep at once only when
other threads are runnable then (:func:`spin_count_for`; TVM reads the spin count once per
process). ``benchmarks/bench_busy.py`` measures it again. A user's own value of
``TVM_THREAD_POOL_SPIN_COUNT`` is kept.

:class:`ThreadChoice` (``run.py --adapt-threads``, off by default) also drops to the cores other
processes leave free while timing; it was not measured better than sleeping workers, so it stays
opt-in.
"""

from __future__ import annotations

import os
import time
from collections.abc import MutableMapping

SPIN_COUNT = 0  # TVM_THREAD_POOL_SPIN_COUNT a bundle starts with beside other runnable work, unless the user set one


def spin_count_for(others: int | None) -> str | None:
    """The spin count for a process that starts while ``others`` threads of other processes are
    runnable: :data:`SPIN_COUNT` when any are, else None (TVM's default: on a quiet machine spinning
    workers answer the next kernel sooner)."""
    return str(SPIN_COUNT) if others else None


def sampled_others(samples: int = 5, gap_s: float = 0.002) -> int | None:
    """The median of a few :func:`runnable_others` readings (one reading is a single moment)."""
    readings = []
    for _ in range(samples):
        r = runnable_others()
        if r is not None:
            readings.append(r)
        time.sleep(gap_s)
    return sorted(readings)[len(readings) // 2] if readings else None


def usable_cores() -> int:
    """The cores this process may run on. TVM's own default thread count is half the hardware
    threads on x86 (it assumes hyper-threading): one thread on a 2-core VM, half the speed."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_environment(threads: int | None = None, environ: MutableMapping[str, str] | None = None,
                       others: int | None = None) -> dict:
    """Set TVM's thread-pool variables in ``environ`` (default: this process's) before TVM's pool
    starts, and return the ones that apply: ``threads`` (else the user's ``TVM_NUM_THREADS`` or
    ``OMP_NUM_THREADS``, else the usable cores), unpinned workers, and the spin count
    :func:`spin_count_for` gives for ``others`` runnable threads of other processes (see the module
    docstring); a value the user set is kept, except the thread count ``threads`` names."""
    env = os.environ if environ is None else environ
    if threads:
        env["TVM_NUM_THREADS"] = str(threads)
    elif not env.get("TVM_NUM_THREADS") and not env.get("OMP_NUM_THREADS"):  # TVM reads both
        env["TVM_NUM_THREADS"] = str(usable_cores())
    # unpinned workers: pinned, every parallel kernel waits for a worker whose core another process
    # holds (a Whisper encoder 116 ms instead of 1.4 ms beside two busy processes on 2 cores)
    env.setdefault("TVM_BIND_THREADS", "0")
    spin = spin_count_for(others)
    if spin is not None:
        env.setdefault("TVM_THREAD_POOL_SPIN_COUNT", spin)
    keys = ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "TVM_BIND_THREADS", "TVM_THREAD_POOL_SPIN_COUNT")
    return {k: env[k] for k in keys if env.get(k) is not None}


def threads_for(others: int, cores: int, most: int) -> int:
    """Threads for the next run when ``others`` threads of other processes are runnable on
    ``cores`` cores: the cores they leave free, at least 1 and at most ``most`` (as OpenMP's
    dynamic threads do with the load average). A kernel waits for its slowest chunk, so a thread
    that must share a core with another process's makes every kernel wait for it."""
    return max(1, min(most, cores - max(0, others)))


def runnable_others() -> int | None:
    """Threads of other processes runnable right now: ``procs_running`` of ``/proc/stat`` less
    this process's own running threads (None where there is no ``/proc``)."""
    try:
        with open("/proc/stat") as f:
            running = next(int(line.split()[1]) for line in f if line.startswith("procs_running"))
        own = 0
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/stat") as f:
                    own += f.read().rpartition(")")[2].split()[0] == "R"
            except OSError:  # the thread ended meanwhile
                continue
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return max(0, running - own)


class ThreadChoice:
    """Before each run, the threads :func:`threads_for` gives for the load now (read at most every
    ``every_s`` seconds; the most other threads of the last ``window`` readings, so a moment's lull
    does not bring back a thread that would wait), applied through TVM's
    ``runtime.config_threadpool`` when it changes. ``most``: the threads TVM's pool started with."""

    def __init__(self, most: int, *, cores: int | None = None, every_s: float = 0.1, window: int = 3,
                 read=runnable_others, apply=None) -> None:
        self.most, self.cores, self.every_s = most, cores or usable_cores(), every_s
        self.readings: list[int] = []
        self.window, self.read, self.apply = window, read, apply
        self.threads, self.read_at, self.changes = most, float("-inf"), 0

    def before_run(self) -> int:
        now = time.monotonic()
        if self.most <= 1 or now - self.read_at < self.every_s:
            return self.threads
        self.read_at = now
        others = self.read()
        if others is None:
            return self.threads
        self.readings = (self.readings + [others])[-self.window:]
        want = threads_for(max(self.readings), self.cores, self.most)
        if want != self.threads:
            (self.apply or _config_threadpool)(want)
            self.threads, self.changes = want, self.changes + 1
        return self.threads


def _config_threadpool(threads: int) -> None:
    import tvm

    tvm.get_global_func("runtime.config_threadpool")(1, threads)  # 1: TVM's "big cores" mode, then `threads`


__all__ = ["SPIN_COUNT", "ThreadChoice", "runnable_others", "sampled_others", "spin_count_for", "thread_environment",
           "threads_for", "usable_cores"]
