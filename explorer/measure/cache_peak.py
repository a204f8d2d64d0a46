"""The bandwidth of the caches, for the roofline of a kernel whose bytes fit in them
(:class:`explorer.measure.memory_roof.MemoryRoof`).

L2: a model's small kernels read what the kernel before them has just written: small_cnn's max-pool
moves 80 KB from the L2 cache, several times faster than the large array copy of the calibration
(:mod:`explorer.measure.calibration`), and priced at that copy it read 5145 % of its roofline. The
figure is one core's copy within a quarter of its L2 cache, times the usable cores' L2 caches (one
core is timed, so the others' load on a shared machine matters less).

L3: bytes beyond the L2 caches that fit in the shared L3 (ResNet-18's 4.7 MB of bf16 weights) move
faster than the large copy; priced at it, kernels read up to 117 % of their roofline. The figure is
the faster of a copy and a read (a kernel that mostly reads weights moves its bytes faster than a
copy, whose destination is read before it is written) of several times the L2 caches' bytes, on
every usable core at once (the L3 is shared: each core's part of it is not the whole).

Both are measured, not datasheet numbers; a figure is an upper bound's input, so each is the best of
several rounds, and one measured again keeps the higher of the two.

Cache contract: one JSON file per hardware fingerprint beside the calibration's
(``<fingerprint hash>-l2.json`` in :func:`explorer.measure.calibration.cache_dir`), written
atomically; another :data:`VERSION` is measured again. One measured while other work kept the
machine busy is provisional and measured again the first time it is asked for on a quiet machine.
Linux alone reports the caches' sizes (:mod:`explorer.measure.cache_sizes`): elsewhere the figures
are 0, and rooflines keep the copy's bandwidth.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from explorer.measure.cache_sizes import cache_units, level_bytes, level_count, unit_bytes, usable_cpus
from explorer.measure.calibration import cache_dir, cached_json, write_json
from explorer.measure.memory_roof import MemoryRoof
from explorer.target.environment import hardware_fingerprint

VERSION = 2  # 2: the L3 tier; SMT siblings sharing an L2 count it once
MIN_L3_PROBE = 16 * 2**20  # the L3 is timed over at least this many bytes, and 4 times the L2 caches
QUIET_RECHECK_S = 60.0


@dataclass(frozen=True)
class CachePeak:
    hardware: str
    gbps: float  # copy bandwidth (read + write) within the L2 caches, all usable cores (0: unknown)
    nbytes: int  # the usable cores' L2 caches together: the bytes a kernel can keep in them
    version: int = VERSION
    l3_gbps: float = 0.0  # bandwidth within the L3 beyond the L2 caches, all usable cores (0: unknown)
    l3_bytes: int = 0  # the usable cores' L3 caches together
    provisional: bool = False  # measured on a busy machine: measured again when it is quiet

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CachePeak:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def memory_roof(self, memory_gbps: float | None) -> MemoryRoof | None:
        """The tiers of a kernel's roofline: these caches, then memory at ``memory_gbps`` (the large
        copy's, :class:`explorer.measure.calibration.Calibration`'s ``peak_gbps``; None without it)."""
        return MemoryRoof.of(memory_gbps, l2_gbps=self.gbps, l2_bytes=self.nbytes, l3_gbps=self.l3_gbps,
                             l3_bytes=self.l3_bytes)


def copy_gbps(nbytes: int, repeats: int = 20, copies: int = 200) -> float:
    """One core's copy bandwidth (read + write) with source and destination ``nbytes`` together:
    the fastest of ``repeats`` rounds of ``copies`` copies (numpy's own cost per call included)."""
    n = max(1024, nbytes // 2 // 4)
    src, dst = np.ones(n, dtype=np.float32), np.empty(n, dtype=np.float32)
    best = float("inf")
    for _ in range(repeats + 1):  # the first round warms the cache
        start = time.perf_counter()
        for _ in range(copies):
            np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return copies * 2 * src.nbytes / best / 1e9


def parallel_gbps(nbytes: int, threads: int, *, read: bool = False, repeats: int = 12, round_bytes: float = 4e8
                  ) -> float:
    """The bandwidth of ``threads`` threads at once, each streaming its share of ``nbytes`` (a copy,
    source and destination together, read + write; or, ``read``, the maximum of each of two vectors:
    numpy's own loops, single-threaded, releasing the GIL): the bytes of a round over its slowest thread's best time."""
    n = max(1024, nbytes // threads // 2 // 4)
    arrays = [(np.ones(n, dtype=np.float32), np.ones(n, dtype=np.float32)) for _ in range(threads)]
    passes = max(3, int(round_bytes / (threads * 2 * 4 * n)))
    best = [float("inf")] * threads
    barrier = threading.Barrier(threads)

    def stream(i: int) -> None:
        a, b = arrays[i]
        step = (lambda: (a.max(), b.max())) if read else (lambda: np.copyto(b, a))
        step()  # warms the cache
        for _ in range(repeats):
            barrier.wait()
            start = time.perf_counter()
            for _ in range(passes):
                step()
            best[i] = min(best[i], time.perf_counter() - start)

    workers = [threading.Thread(target=stream, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return threads * passes * 2 * 4 * n / max(best) / 1e9


def l3_probe_bytes(l2_bytes: int, l3_bytes: int) -> int:
    """The bytes the L3 is timed over: well beyond the L2 caches (4 times them, :data:`MIN_L3_PROBE`
    at least: what they still hold of a stream is the L2's share, counted apart by the roofline),
    well within the L3 (half of it at most)."""
    return min(l3_bytes // 2, max(4 * l2_bytes, MIN_L3_PROBE))


def measure_cache_peak() -> CachePeak:
    """Measure it (about a second), the machine's load sampled before and after."""
    from explorer.measure.machine_load import machine_load

    units = cache_units()
    l2, l3 = level_bytes(2, units), level_bytes(3, units)
    cores = len(usable_cpus())
    load = machine_load()
    gbps = level_count(2, units) * copy_gbps(unit_bytes(2, units) // 4) if l2 else 0.0
    l3_gbps = 0.0
    if l3 > l2:
        probe = l3_probe_bytes(l2, l3)
        l3_gbps = max(parallel_gbps(probe, cores), parallel_gbps(probe, cores, read=True))
    load = load.worst(machine_load())
    return CachePeak(hardware_fingerprint(), round(gbps, 1), l2, l3_gbps=round(l3_gbps, 1),
                     l3_bytes=l3 if l3_gbps else 0, provisional=load.busy)


_quiet_checked: dict[str, float] = {}  # hardware -> when this process last looked at the load


def _path(hardware: str):
    return cache_dir() / (hashlib.sha256(hardware.encode()).hexdigest()[:16] + "-l2.json")


def _cached(hardware: str) -> CachePeak | None:
    return cached_json(_path(hardware), hardware, VERSION, CachePeak.from_dict)


def _remeasured(old: CachePeak | None) -> CachePeak:
    """A new measurement, each figure the higher of it and ``old``'s (see the module docstring), stored."""
    peak = measure_cache_peak()
    if old is not None:
        peak = replace(peak, gbps=max(peak.gbps, old.gbps), l3_gbps=max(peak.l3_gbps, old.l3_gbps),
                       l3_bytes=peak.l3_bytes or old.l3_bytes)
    write_json(_path(peak.hardware), peak.to_dict())
    _quiet_checked[peak.hardware] = time.monotonic()  # just measured: no need to look at the load again yet
    return peak


def cache_peak(*, refresh: bool = False) -> CachePeak:
    """This machine's figures, measured on first use (or when ``refresh``) and cached; provisional
    ones are measured again once the machine is quiet (looked at no more than every
    :data:`QUIET_RECHECK_S` seconds per process)."""
    hw = hardware_fingerprint()
    cached = _cached(hw)
    if cached is None or refresh:
        return _remeasured(cached)
    if cached.provisional and time.monotonic() - _quiet_checked.get(hw, -QUIET_RECHECK_S) >= QUIET_RECHECK_S:
        from explorer.measure.machine_load import machine_load

        _quiet_checked[hw] = time.monotonic()
        if not machine_load().busy:
            return _remeasured(cached)
    return cached


__all__ = ["CachePeak", "cache_peak", "copy_gbps", "l3_probe_bytes", "measure_cache_peak", "parallel_gbps"]
