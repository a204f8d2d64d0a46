"""The machine's measured peaks, for "% of peak" and the roofline: cached per machine.

Peak compute is what the best-tuned library here reaches: numpy's BLAS on an fp32 matmul
(2048^3, all cores). Peak bandwidth is a large array copy (bytes read + written per second).
Both are practical peaks, measured, not datasheet numbers; they are recomputed when the
hardware fingerprint changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from explorer.environment import hardware_fingerprint


@dataclass(frozen=True)
class Calibration:
    hardware: str
    peak_gflops: float  # fp32 matmul through numpy's BLAS
    peak_gbps: float  # array copy, read + write
    measured_at: str

    def to_dict(self) -> dict:
        return asdict(self)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "schedx" / "calibration"


def _best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) if repeats < 3 else statistics.median(sorted(times)[: max(1, repeats // 2)])


def measure_peaks(matmul_n: int = 2048, copy_mb: int = 256) -> Calibration:
    """Run the two calibration benchmarks (about 2-3 s on two cores)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((matmul_n, matmul_n), dtype=np.float32)
    b = rng.standard_normal((matmul_n, matmul_n), dtype=np.float32)
    a @ b  # warm-up: threads, caches
    t = _best_of(lambda: a @ b, 5)
    gflops = 2 * matmul_n**3 / t / 1e9
    src = np.ones(copy_mb * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t = _best_of(lambda: np.copyto(dst, src), 5)
    gbps = 2 * src.nbytes / t / 1e9
    return Calibration(hardware_fingerprint(), round(gflops, 1), round(gbps, 1),
                       time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def calibration(*, refresh: bool = False) -> Calibration:
    """The cached calibration for this machine, measured on first use (or when ``refresh``)."""
    hw = hardware_fingerprint()
    path = cache_dir() / (hashlib.sha256(hw.encode()).hexdigest()[:16] + ".json")
    if not refresh and path.is_file():
        try:
            data = json.loads(path.read_text())
            if data.get("hardware") == hw:
                return Calibration(**data)
        except (ValueError, TypeError):
            pass
    cal = measure_peaks()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cal.to_dict(), indent=2))
    return cal
