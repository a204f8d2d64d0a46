"""The machine's measured peaks, for "% of peak" and the roofline: cached per machine.

Peak compute is the best of two measurements, each the best of several runs: a compute-peak
kernel built with TVM for this machine's target (every FMA unit busy at the target's vector
width on every core, FLOPs counted exactly: :mod:`explorer.measure.peak_kernel`) and numpy's BLAS
on an fp32 matmul (2048^3, all cores, OpenBLAS pins lifted). Peak bandwidth is a large array copy
(bytes read + written per second). Both are measured, not datasheet numbers.

bf16 and int8 kernels run on other units than the fp32 FMAs: each of those instruction families has
its own peak (``families``: :class:`explorer.measure.families.FamilyPeak`), measured by its own
kernel (:mod:`explorer.measure.dot_peaks`: AMX ``tdpbf16ps``/``tdpbusd``, ``vdpbf16ps``,
``vpdpbusd``, ``vpmaddubsw``), and a kernel is read against its family's
(:meth:`Calibration.peak_for`). A family the CPU lacks is kept with no figure and the reason.

Cache contract: one JSON file per hardware fingerprint and CPU (LLVM's name of it, :attr:`Calibration.cpu`:
Zen 4 and Zen 5 guests share a fingerprint) in ``$XDG_CACHE_HOME/schedx/calibration``, written
atomically (other processes on the machine read it meanwhile). A calibration of another
:data:`CALIBRATION_VERSION`, or of another CPU, is measured again, nothing of it kept. One taken while other work kept the machine busy
(:class:`explorer.measure.machine_load.MachineLoad`) is *provisional*: it is measured again the first
time it is asked for on a quiet machine. A kernel measured above the peak raises it
(:func:`explorer.measure.peak_check.within_peak`): the raised figure names that kernel and
survives later measurements that come out lower; a kernel of a family raises that family's peak
only. A cached calibration without a family (written before families were measured) keeps its
fp32 figures and has the missing families measured (seconds); a raise of its fp32 peak by a kernel
named bf16 or int8 (which read against the one peak there was) is dropped when it is read.

A family's peak is that of the instructions the CPU has for it *as schedx sees it*: the same
machine with its AMX tiles hidden (``SCHEDX_CPU_FLAGS``, a VM) keeps the same hardware fingerprint
but runs bf16 on ``vdpbf16ps``. So each family's entry records its instruction set
(:attr:`FamilyPeak.isa`), the calibration keeps the peaks of the instruction sets not in use
(``other_families``), and a calibration read for a CPU whose instructions differ from its entries'
has those families measured for it (seconds, once: then both are kept).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from explorer.measure.instructions import FAMILIES
from explorer.measure.families import FP32, NO_INSTRUCTIONS, FamilyPeak, family_of_name
from explorer.target.environment import hardware_fingerprint

# 2: numpy measured without OpenBLAS core pins; 3: the FMA peak kernel beside numpy (best of
# both), the load at calibration time, provisional when busy, raised by kernels measured above it;
# 4: the vdpbf16ps peak kernel with 16 chains (12 under-read on Zen 5: explorer.measure.instructions);
# 5: no peak raised by a kernel whose FLOPs are mostly element-wise work (explorer.workload.product_flops):
# a version-4 peak may hold such a raise (efficientnet_b0's conv+SiLU raised a Zen 5's from 472.7 to 536.2)
CALIBRATION_VERSION = 5
MATMUL_N = 2048
QUIET_RECHECK_S = 60.0  # how often a process looks again whether a provisional calibration can be redone


@dataclass(frozen=True)
class Calibration:
    hardware: str
    peak_gflops: float  # the best of the FMA peak kernel and numpy's sgemm, or a kernel measured above both
    peak_gbps: float  # array copy, read + write
    measured_at: str
    version: int = 0  # how it was measured; older cached calibrations are measured again
    fma_gflops: float | None = None  # the compute-peak kernel's best run (None: it could not run)
    fma_kernel: str = ""  # what it was: "FMA kernel AVX512 16 lanes", or why it did not run
    numpy_gflops: float | None = None  # numpy sgemm's best run
    load_avg: float | None = None  # the 1-minute load average when it was measured
    other_cores: float | None = None  # cores other processes kept busy meanwhile
    cores: int | None = None
    provisional: bool = False  # measured on a busy machine: measured again when it is quiet
    raised_by: str = ""  # the kernel whose measured GFLOPS the peak was raised to ("" when none)
    families: tuple[FamilyPeak, ...] = ()  # the bf16 and int8 peaks (explorer.measure.dot_peaks)
    # the same families' peaks of this machine's other instruction sets (its tiles hidden, or not), kept
    other_families: tuple[FamilyPeak, ...] = ()
    # LLVM's name of the CPU it was measured on ("znver5"; "" where LLVM could not name it, or written before
    # stop 64): a cached calibration of another CPU under the same fingerprint (Zen 4 and Zen 5 guests both
    # read "AMD EPYC", avx512, 2 cores) is measured again, nothing of it kept
    cpu: str = ""

    def family(self, name: str) -> FamilyPeak | None:
        """The peak of instruction family ``name`` (``fp32`` included), None where never measured."""
        if name == FP32:
            return FamilyPeak(FP32, self.peak_gflops or None, self.source, "fp32", self.fma_gflops, self.raised_by)
        return next((f for f in self.families if f.family == name), None)

    def peak_for(self, name: str) -> float | None:
        """The peak a kernel of family ``name`` reads against (None where the CPU has no such units)."""
        found = self.family(name)
        return found.gflops if found else None

    def peaks(self) -> tuple[FamilyPeak, ...]:
        """Every family's peak, fp32 first."""
        return (self.family(FP32), *self.families)

    def for_instructions(self, isas: dict[str, str]) -> Calibration:
        """This calibration for a CPU whose instructions of each family are ``isas`` (family ->
        isa, :func:`explorer.measure.dot_peaks.instructions_of`): ``families`` the entries of those
        instruction sets (a family with none is :attr:`missing`), ``other_families`` the rest."""

        pool = self.families + self.other_families
        chosen = []
        for name in FAMILIES:
            isa = isas.get(name, "")
            candidates = [f for f in pool if f.family == name and f.matches(isa)]
            found = next((f for f in candidates if f.isa == isa), candidates[0] if candidates else None)
            chosen += [found] if found is not None else []
        return replace(self, families=tuple(chosen), other_families=tuple(f for f in pool if f not in chosen))

    @property
    def missing(self) -> tuple[str, ...]:
        """The families this calibration has no entry for (measured when it is next asked for)."""

        return tuple(f for f in FAMILIES if self.family(f) is None)

    @property
    def source(self) -> str:
        """What the peak figure is: a kernel that measured above the calibration, the FMA kernel or numpy."""
        if self.raised_by:
            return f"measured by {self.raised_by}"
        if self.fma_gflops and self.fma_gflops >= (self.numpy_gflops or 0.0):
            return self.fma_kernel
        return f"numpy sgemm {MATMUL_N}" if self.numpy_gflops else "unknown"

    def summary(self) -> str:
        """``peak: X GFLOPS (FMA kernel AVX512 16 lanes W / numpy sgemm Y), copy Z GB/s``, and
        whether the machine was busy."""
        fma = f"{self.fma_kernel} {self.fma_gflops:.1f}" if self.fma_gflops else f"no FMA kernel ({self.fma_kernel})"
        numpy_part = f"numpy sgemm {self.numpy_gflops:.1f}" if self.numpy_gflops else "no numpy figure"
        raised = f"; raised to a kernel's {self.peak_gflops:.1f}, {self.source}" if self.raised_by else ""
        text = f"peak: {self.peak_gflops:.1f} GFLOPS ({fma} / {numpy_part}{raised}), copy {self.peak_gbps:.1f} GB/s"
        if self.families:
            text += "; " + ", ".join(f.text() if f.gflops else f"no {f.family} peak ({f.kernel})"
                                     for f in self.families)
        if self.load_avg is not None:
            text += f", load {self.load_avg:.2f}"
        if self.provisional:
            text += (f" (provisional: other work kept {self.other_cores or 0:.1f} of {self.cores or '?'} cores busy; "
                     "measured again when the machine is quiet)")
        return text

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Calibration:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        for key in ("families", "other_families"):
            data[key] = tuple(FamilyPeak.from_dict(f) if isinstance(f, dict) else f for f in data.get(key) or ())
        cal = cls(**data)
        if cal.raised_by and family_of_name(cal.raised_by) != FP32:
            # written when every kernel read against the fp32 peak: a bf16/int8 kernel's raise is no fp32 figure
            cal = replace(cal, peak_gflops=round(max(cal.fma_gflops or 0.0, cal.numpy_gflops or 0.0), 1) or
                          cal.peak_gflops, raised_by="")
        return cal


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "schedx" / "calibration"


def cache_name(hardware: str) -> str:
    """The stem of this machine's cached figures' file names (the calibration's, the cache bandwidths'):
    one per fingerprint and CPU (LLVM's name), so that CPUs one fingerprint names alike (Zen 4 and Zen 5
    guests) keep a file each where a cache folder is shared between them."""
    return hashlib.sha256(f"{hardware}/{_llvm_cpu()}".encode()).hexdigest()[:16]


def _cache_path(hardware: str) -> Path:
    return cache_dir() / (cache_name(hardware) + ".json")


def cached_json(path: Path, hardware: str, version: int, from_dict):
    """``from_dict`` of the figures stored at ``path`` for ``hardware`` at ``version`` (None: missing,
    unreadable, another machine's or another version's: measure them again)."""
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.get("hardware") == hardware and data.get("version") == version:
            return from_dict(data)
    except (OSError, ValueError, TypeError):
        pass
    return None


def write_json(path: Path, data: dict) -> None:
    """Store ``data`` at ``path`` atomically: other processes reading it meanwhile never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


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


def numpy_matmul_gflops(n: int, repeats: int = 5, *, native: bool = True, best: bool = False) -> float:
    """fp32 matmul GFLOPS of numpy's BLAS (the median of the faster half of ``repeats`` runs, or
    the fastest run with ``best``); ``native`` lifts the OpenBLAS pins (in a child)."""
    if native and any(v in os.environ for v in _OPENBLAS_PINS):
        import subprocess
        import sys

        env = {k: v for k, v in os.environ.items() if k not in _OPENBLAS_PINS}
        code = (f"from explorer.measure.calibration import numpy_matmul_gflops as f; "
                f"print(f({n}, {repeats}, native=False, best={best}))")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                             cwd=str(Path(__file__).resolve().parents[2]))
        if out.returncode == 0 and out.stdout.strip():
            return float(out.stdout.strip().splitlines()[-1])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up: threads, caches
    seconds = min(_best_of(lambda: a @ b, 1) for _ in range(repeats)) if best else _best_of(lambda: a @ b, repeats)
    return 2 * n**3 / seconds / 1e9


def measure_families(repeats: int = 5) -> tuple[FamilyPeak, ...]:
    """Every instruction family's peak (:mod:`explorer.measure.dot_peaks`, in a child process, about
    a second per family): a family the CPU lacks, or whose kernel failed, has no figure and says why."""
    from explorer.measure.dot_peaks import measure_in_child

    found = measure_in_child(repeats)
    peaks = []
    for family in FAMILIES:
        got = found.get(family) or {"error": "not measured"}
        if got.get("gflops"):
            kernel = got["kernel"]
            peaks.append(FamilyPeak(family, float(got["gflops"]), kernel["label"], kernel["instruction"]["label"],
                                    float(got["gflops"]), isa=kernel["instruction"]["isa"],
                                    fp32_ratio=got.get("fp32_ratio")))
        else:  # (no isa: a kernel that failed to run is measured again when next asked for another CPU)
            peaks.append(FamilyPeak(family, None, got.get("error", "not measured"),
                                    isa=NO_INSTRUCTIONS if got.get("isa") == NO_INSTRUCTIONS else ""))
    return tuple(peaks)


def measure_peaks(matmul_n: int = MATMUL_N, copy_mb: int = 256, *, repeats: int = 5, fma: bool = True,
                  dots: bool = True) -> Calibration:
    """Run the calibration benchmarks (several seconds on two cores): the FMA peak kernel and the
    bf16/int8 ones (in child processes; ``fma=False``, ``dots=False`` skip them: those families then
    read "not measured"), numpy's sgemm and an array copy, each the best of ``repeats`` runs, with
    the machine's load sampled before and after."""
    from explorer.measure.machine_load import machine_load
    from explorer.measure.peak_kernel import measure_in_child

    load = machine_load()
    kernel = measure_in_child(repeats) if fma else {"error": "not measured"}
    families = measure_families(repeats) if dots else tuple(FamilyPeak(f, None, "not measured") for f in FAMILIES)
    numpy_gflops = numpy_matmul_gflops(matmul_n, repeats, best=True)
    src = np.ones(copy_mb * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t = min(_best_of(lambda: np.copyto(dst, src), 1) for _ in range(repeats))
    gbps = 2 * src.nbytes / t / 1e9
    load = load.worst(machine_load())
    fma_gflops = kernel.get("gflops")
    peak = max(fma_gflops or 0.0, numpy_gflops)
    return Calibration(hardware_fingerprint(), round(peak, 1), round(gbps, 1),
                       time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), CALIBRATION_VERSION,
                       fma_gflops=fma_gflops, fma_kernel=kernel["kernel"]["label"] if fma_gflops else kernel["error"],
                       numpy_gflops=round(numpy_gflops, 1), load_avg=round(os.getloadavg()[0], 2),
                       other_cores=load.other_cores, cores=load.cores, provisional=load.busy, families=families,
                       cpu=_llvm_cpu())


def save(cal: Calibration) -> Calibration:
    """Store ``cal`` as this machine's calibration (atomically: readers never see half a file)."""
    write_json(_cache_path(cal.hardware), cal.to_dict())
    return cal


def _cached(hardware: str) -> Calibration | None:
    """The stored calibration, its families those of this machine's instructions as schedx sees them
    now (:meth:`Calibration.for_instructions`)."""
    from explorer.measure.dot_peaks import host_instructions

    cal = cached_json(_cache_path(hardware), hardware, CALIBRATION_VERSION, Calibration.from_dict)
    if cal is None or cal.cpu != _llvm_cpu():  # (another CPU under the same fingerprint: nothing of it is kept)
        return None
    return cal.for_instructions(host_instructions())


def _llvm_cpu() -> str:
    """LLVM's name of this CPU ("" where it has none): what tells apart CPUs one fingerprint names alike."""
    from explorer.target.host import host_cpu

    return host_cpu().llvm_cpu


def _remeasured(old: Calibration | None) -> Calibration:
    """A new measurement; a peak a kernel raised (fp32 or a family's) stays where the new figure
    comes out lower."""
    cal = replace(measure_peaks(), cpu=_llvm_cpu())  # (this machine's figures: its CPU's name is the key)
    if old is not None and old.raised_by and old.peak_gflops > cal.peak_gflops:
        cal = replace(cal, peak_gflops=old.peak_gflops, raised_by=old.raised_by)
    if old is not None:
        isa_now = {n.family: n.isa for n in cal.families}
        kept = {f.family: f for f in old.families if f.raised_by and f.isa in ("", isa_now.get(f.family))}
        cal = replace(cal, families=tuple(
            replace(f, gflops=kept[f.family].gflops, raised_by=kept[f.family].raised_by)
            if f.family in kept and (kept[f.family].gflops or 0.0) > (f.gflops or 0.0) else f for f in cal.families))
        new = {(f.family, f.isa) for f in cal.families}
        cal = replace(cal, other_families=tuple(f for f in old.families + old.other_families
                                                if f.isa and (f.family, f.isa) not in new))
    return save(cal)


def _with_families(cal: Calibration) -> Calibration:
    """``cal`` with the families it lacks measured and stored (see the module docstring)."""

    measured = {f.family: f for f in measure_families()}
    families = cal.families + tuple(measured[f] for f in cal.missing if f in measured)
    return save(replace(cal, families=tuple(sorted(families, key=lambda f: FAMILIES.index(f.family)))))


_quiet_checked: dict[str, float] = {}  # hardware -> when this process last looked at the load
_families_tried: set[str] = set()  # hardware whose missing families this process measured


def calibration(*, refresh: bool = False) -> Calibration:
    """The cached calibration for this machine, measured on first use (or when ``refresh``);
    a provisional one is measured again once the machine is quiet (looked at no more than every
    :data:`QUIET_RECHECK_S` seconds per process)."""
    hw = hardware_fingerprint()
    cached = _cached(hw)
    if cached is None or refresh:
        return _remeasured(cached)
    if cached.missing and hw not in _families_tried:  # a failed family is tried again once a process
        _families_tried.add(hw)
        cached = _with_families(cached)
    if cached.provisional and time.monotonic() - _quiet_checked.get(hw, -QUIET_RECHECK_S) >= QUIET_RECHECK_S:
        from explorer.measure.machine_load import machine_load

        _quiet_checked[hw] = time.monotonic()
        if not machine_load().busy:
            return _remeasured(cached)
    return cached


def raise_peak(cal: Calibration, gflops: float, kernel: str, family: str = FP32) -> Calibration:
    """``cal`` with the peak of ``family`` raised to ``gflops`` measured by ``kernel``, stored when it
    is this machine's calibration (see :func:`explorer.measure.peak_check.within_peak`)."""
    if family == FP32:
        raised = replace(cal, peak_gflops=float(gflops), raised_by=kernel)
    else:
        old = cal.family(family) or FamilyPeak(family, None, "not measured")
        new = replace(old, gflops=float(gflops), raised_by=kernel)
        raised = replace(cal, families=tuple(new if f.family == family else f for f in cal.families)
                         + (() if cal.family(family) else (new,)))
    mine = cal.hardware == hardware_fingerprint() and cal.version == CALIBRATION_VERSION and cal.cpu == _llvm_cpu()
    return save(raised) if mine else raised


def measured_rate(target, family: str) -> float | None:
    """The ``family`` peak kernel's measured figure over the fp32 FMA kernel's on this machine, where
    ``target`` is this machine's CPU as schedx sees it (from its calibration, measured once and
    cached: :func:`explorer.measure.calibration.calibration`); None for another CPU, where nothing
    was measured, or where either figure is missing. Both are micro-kernels of one instruction
    each, so the ratio is of the instructions' rates (the vdpbf16ps one here: 0.50-0.57); the two
    timed in one process one after the other (:attr:`FamilyPeak.fp32_ratio`) where the calibration
    has it, else the two figures of the calibration (which may have been measured at other loads).
    On a machine with no calibration cached yet, the first caller measures it (a few seconds, once)."""
    from explorer.target import host_target

    if target.cross or target.features != host_target().features:
        return None
    cal = calibration()
    peak, fp32 = cal.family(family), cal.fma_gflops or cal.peak_gflops
    if peak is not None and peak.fp32_ratio:
        return peak.fp32_ratio
    figure = peak and (peak.measured or peak.gflops)
    return figure / fp32 if figure and fp32 else None


__all__ = ["CALIBRATION_VERSION", "Calibration", "FamilyPeak", "cache_dir", "cache_name", "cached_json", "calibration",
           "measure_families", "measure_peaks", "measured_rate", "numpy_matmul_gflops", "raise_peak", "save", "write_json"]
