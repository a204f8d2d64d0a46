"""The bandwidth of the cores' L2 caches, for the roofline of a kernel whose bytes fit in them.

A model's small kernels read what the kernel before them has just written: small_cnn's max-pool
moves 80 KB from the L2 cache, several times faster than the large array copy of the calibration
(:mod:`explorer.measure.calibration`), and priced at that copy it read 5145 % of its roofline. The
figure is one core's copy within a quarter of its L2 cache, times the usable cores (each has an L2
of its own; one core is timed, so the others' load on a shared machine matters less), measured,
not a datasheet number.

Cache contract: one JSON file per hardware fingerprint beside the calibration's
(``<fingerprint hash>-l2.json`` in :func:`explorer.measure.calibration.cache_dir`), written
atomically; another :data:`VERSION` is measured again. Linux only reports the L2's size
(``/sys/devices/system/cpu``): elsewhere the figure is 0, and rooflines keep the copy's bandwidth.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from explorer.target.environment import hardware_fingerprint

VERSION = 1


@dataclass(frozen=True)
class CachePeak:
    hardware: str
    gbps: float  # copy bandwidth (read + write) within the L2 caches, all usable cores (0: unknown)
    nbytes: int  # the usable cores' L2 caches together: the bytes a kernel can keep in them
    version: int = VERSION

    def to_dict(self) -> dict:
        return asdict(self)


def l2_cache_bytes(cpu: int = 0) -> int:
    """Bytes of core ``cpu``'s L2 cache as Linux reports it (0 where it does not)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    for index in sorted(Path(f"/sys/devices/system/cpu/cpu{cpu}/cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() != "2" or (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        return int(size[:-1]) * units[size[-1]] if size[-1:] in units else int(size or 0)
    return 0


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


def measure_cache_peak() -> CachePeak:
    """Measure it (a fraction of a second)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    l2 = l2_cache_bytes()
    gbps = cores * copy_gbps(l2 // 4) if l2 else 0.0
    return CachePeak(hardware_fingerprint(), round(gbps, 1), l2 * cores)


def cache_peak(*, refresh: bool = False) -> CachePeak:
    """This machine's figure, measured on first use (or when ``refresh``) and cached."""
    from explorer.measure.calibration import cache_dir

    hw = hardware_fingerprint()
    path = cache_dir() / (hashlib.sha256(hw.encode()).hexdigest()[:16] + "-l2.json")
    if not refresh:
        try:
            data = json.loads(path.read_text())
            if data.get("hardware") == hw and data.get("version") == VERSION:
                return CachePeak(**data)
        except (OSError, ValueError, TypeError):
            pass
    peak = measure_cache_peak()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(peak.to_dict(), indent=2))
    os.replace(tmp, path)
    return peak


__all__ = ["CachePeak", "cache_peak", "copy_gbps", "l2_cache_bytes", "measure_cache_peak"]
