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

CALIBRATION_VERSION = 2  # 2: numpy measured without OpenBLAS core pins


@dataclass(frozen=True)
class Calibration:
    hardware: str
    peak_gflops: float  # fp32 matmul through numpy's BLAS
    peak_gbps: float  # array copy, read + write
    measured_at: str
    version: int = 0  # how it was measured; older cached calibrations are measured again

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


# Some machines pin OpenBLAS to an older kernel (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE) because
# old OpenBLAS builds misbehave on their CPU; a current numpy then runs at half speed (measured
# here: 237 vs 471 GFLOPS). The peak is taken without them, in a child process of its own.
_OPENBLAS_PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def numpy_matmul_gflops(n: int, repeats: int = 5, *, native: bool = True) -> float:
    """fp32 matmul GFLOPS of numpy's BLAS; ``native`` lifts the OpenBLAS pins (in a child)."""
    if native and any(v in os.environ for v in _OPENBLAS_PINS):
        import subprocess
        import sys

        env = {k: v for k, v in os.environ.items() if k not in _OPENBLAS_PINS}
        code = f"from explorer.measure.calibration import numpy_matmul_gflops as f; print(f({n}, {repeats}, native=False))"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                             cwd=str(Path(__file__).resolve().parents[2]))
        if out.returncode == 0 and out.stdout.strip():
            return float(out.stdout.strip().splitlines()[-1])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up: threads, caches
    return 2 * n**3 / _best_of(lambda: a @ b, repeats) / 1e9


def measure_peaks(matmul_n: int = 2048, copy_mb: int = 256) -> Calibration:
    """Run the two calibration benchmarks (a few seconds on two cores)."""
    gflops = numpy_matmul_gflops(matmul_n)
    src = np.ones(copy_mb * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t = _best_of(lambda: np.copyto(dst, src), 5)
    gbps = 2 * src.nbytes / t / 1e9
    return Calibration(hardware_fingerprint(), round(gflops, 1), round(gbps, 1),
                       time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), CALIBRATION_VERSION)


def calibration(*, refresh: bool = False) -> Calibration:
    """The cached calibration for this machine, measured on first use (or when ``refresh``)."""
    hw = hardware_fingerprint()
    path = cache_dir() / (hashlib.sha256(hw.encode()).hexdigest()[:16] + ".json")
    if not refresh and path.is_file():
        try:
            data = json.loads(path.read_text())
            if data.get("hardware") == hw and data.get("version") == CALIBRATION_VERSION:
                return Calibration(**data)
        except (ValueError, TypeError):
            pass
    cal = measure_peaks()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cal.to_dict(), indent=2))
    return cal
