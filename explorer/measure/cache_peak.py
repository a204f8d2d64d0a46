"""The bandwidth of the caches and of memory as a model's kernels move bytes, for the roofline of a
kernel (:class:`explorer.measure.memory_roof.MemoryRoof`).

Each figure is what streaming kernels built with TVM for this machine move (:mod:`explorer.measure.
stream_kernel`: a read, a copy and an element-wise add, 512-bit vectors where the target has them,
every usable core at once), the fastest of the three, over bytes that fit in that tier and not in
the one before it:

- L1: half the L1 data caches. A reshape or a small mean moves what is in them at 1000-1360 GB/s on
  a 2-core Zen 5 guest: priced at the L2's, they would read above their roof.
- L2: a quarter and a half of the L2 caches (four times the L1s at least). A model's small kernels
  read what the kernel before them has just written: small_cnn's max-pool moves 80 KB from the L2
  cache, several times faster than the large array copy of the calibration
  (:mod:`explorer.measure.calibration`), and priced at that copy it read 5145 % of its roofline.
- L3: four times the L2 caches (16 MB at least), half the L3 at most (:func:`l3_probe_bytes`): bytes
  beyond the L2 caches that fit in the shared L3 (ResNet-18's 4.7 MB of bf16 weights) move faster
  than the large copy; priced at it, kernels read up to 117 % of their roofline. Where that size is
  under twice the L2 caches (an L3 hardly larger than them), the L3 is not streamed: what such a
  probe moves is the L2s' as much as the L3's.
- memory: four times every cache together (64 MB at least; not measured past
  :data:`MAX_MEMORY_PROBE`, nor without an L3 size): a victim L3 (AMD's) holds what the L2s do not,
  so a probe of twice the L3 alone could still be half in cache (a whole Sapphire Rapids socket: 112
  MB of L2s and 105 MB of L3). Every core streaming moves more than the calibration's one-core copy
  (35 against 42-47 GB/s for the add on the Zen 5 guest); the roof's memory tier is the higher of
  the two.

Before version 3 the figures were numpy's: one core's copy within the L2 times the L2 caches, and a
copy or a maximum on every core within the L3. numpy's call costs a microsecond (the L1 cannot be
timed so) and one core's copy is not what two cores' loads move (406 against 448-500 GB/s within the
L2s of the Zen 5 guest); numpy's figures are what is measured where the stream kernels cannot run
(``method`` says which).

Both are measured, not datasheet numbers; a figure is an upper bound's input, so each is the best of
several rounds, and one measured again keeps the higher of the two, except a provisional one (taken
on a busy machine) measured again on a quiet one: the quiet figures replace it. Figures measured
again on a busy machine are provisional only where one of them is kept (above the one before it):
where every busy figure came out lower, the quiet ones stand and stay quiet, so a later quiet
measurement never replaces them. A kernel measured above its roof has the roof measured again, then
its tier raised (:mod:`explorer.measure.roof_check`): ``raised`` names the tier, the kernel and the
figure the tier was measured at (the raise is at most :data:`explorer.measure.figure_check.MAX_RAISE`
times it), and a raised figure survives later measurements that come out lower, quiet ones too.

Cache contract: one JSON file per hardware fingerprint (its vector ISA included) and CPU (LLVM's name)
beside the calibration's (``<cache_name>-l2.json`` in :func:`explorer.measure.calibration.cache_dir`:
Zen 4 and Zen 5 guests of the same cache sizes keep a file each),
written atomically; another :data:`VERSION` is measured again, and so is one whose cache sizes
(``sizes``: the L1d, L2 and L3 bytes Linux reported when it was measured) are not this machine's
now: the fingerprint names a CPU's family, not its caches (a Zen 4 and a Zen 5 guest of 2 cores
share one). One measured while other work kept
the machine busy is provisional and measured again the first time it is asked for on a quiet
machine. Linux alone reports the caches' sizes (:mod:`explorer.measure.cache_sizes`): elsewhere the
figures are 0, and rooflines keep the copy's bandwidth.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from explorer.measure.cache_sizes import cache_units, level_bytes, level_count, unit_bytes, usable_cpus
from explorer.measure.calibration import cache_dir, cache_name, cached_json, write_json
from explorer.measure.memory_roof import MemoryRoof
from explorer.target.environment import hardware_fingerprint

# 2: the L3 tier; SMT siblings sharing an L2 count it once. 3: streaming kernels (read, copy, add) on
# every core at the target's vector width; the L1 tier; memory streamed by every core; raised tiers
VERSION = 3
MIN_L3_PROBE = 16 * 2**20  # the L3 is timed over at least this many bytes, and 4 times the L2 caches
MIN_MEMORY_PROBE = 64 * 2**20  # memory is streamed over at least this many bytes, and twice the L3
MAX_MEMORY_PROBE = 256 * 2**20  # beyond (an L3 of 480 MB): not streamed, the calibration's copy stands
QUIET_RECHECK_S = 60.0
FIELDS = {"L1": "l1_gbps", "L2": "gbps", "L3": "l3_gbps", "memory": "memory_gbps"}  # tier -> its CachePeak figure
TIERS = tuple(FIELDS)


@dataclass(frozen=True)
class CachePeak:
    hardware: str
    gbps: float  # bandwidth within the L2 caches, all usable cores (0: unknown)
    nbytes: int  # the usable cores' L2 caches together: the bytes a kernel can keep in them
    version: int = VERSION
    l3_gbps: float = 0.0  # bandwidth within the L3 beyond the L2 caches, all usable cores (0: unknown)
    l3_bytes: int = 0  # the usable cores' L3 caches together
    provisional: bool = False  # measured on a busy machine: measured again when it is quiet
    l1_gbps: float = 0.0  # bandwidth within the L1 data caches, all usable cores (0: unknown)
    l1_bytes: int = 0  # the usable cores' L1 data caches together
    memory_gbps: float = 0.0  # streamed from memory by every core (0: not measured)
    method: str = ""  # what measured it: "stream kernels 16 fp32 lanes, 2 cores", or "numpy copy (why)"
    # (tier, kernel, measured): tiers raised to a kernel measured above them, and their best figure measured
    raised: tuple[tuple[str, str, float], ...] = ()
    sizes: tuple[int, ...] = ()  # (L1d, L2, L3) bytes of the usable cores as measured (cache_sizes())

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CachePeak:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["raised"] = tuple((str(tier), str(kernel), float(measured))
                               for tier, kernel, measured in data.get("raised") or ())
        data["sizes"] = tuple(data.get("sizes") or ())
        return cls(**data)

    def figure(self, tier: str) -> float:
        """The bandwidth of ``tier`` (one of :data:`TIERS`; memory's: the streamed figure)."""
        return getattr(self, FIELDS[tier])

    def with_figure(self, tier: str, gbps: float) -> CachePeak:
        """This with ``tier``'s bandwidth set to ``gbps``."""
        return replace(self, **{FIELDS[tier]: float(gbps)})

    def at_least(self, old: CachePeak) -> CachePeak:
        """This with each figure at least ``old``'s, and ``old``'s raises where they still stand (see
        the module docstring): a figure measured again never lowers a roof, but a quiet measurement
        replaces a provisional one's figures (a raised tier's excepted). Provisional where a figure it
        keeps is a busy machine's (this one's above ``old``'s, or ``old``'s above this one's)."""
        raised = {tier for tier, _, _ in old.raised}
        kept = TIERS if self.provisional or not old.provisional else raised
        peak, busy = self, False
        for tier in TIERS:
            mine, theirs = self.figure(tier), old.figure(tier)
            if tier in kept and theirs > mine:
                peak, busy = peak.with_figure(tier, theirs), busy or (old.provisional and tier not in raised)
            else:  # this one's (a tie: busy only where both are)
                busy = busy or (self.provisional and (mine > theirs or old.provisional))
        standing = tuple((tier, kernel, max(measured, self.figure(tier))) for tier, kernel, measured in old.raised
                         if old.figure(tier) > self.figure(tier))
        return replace(peak, l3_bytes=peak.l3_bytes or old.l3_bytes, l1_bytes=peak.l1_bytes or old.l1_bytes,
                       raised=standing, provisional=busy)

    def memory_roof(self, memory_gbps: float | None) -> MemoryRoof | None:
        """The tiers of a kernel's roofline: these caches, then memory at the higher of ``memory_gbps``
        (the large copy's, :class:`explorer.measure.calibration.Calibration`'s ``peak_gbps``; None
        without it: no roofline) and the streamed figure."""
        memory = max(memory_gbps, self.memory_gbps) if memory_gbps else memory_gbps
        return MemoryRoof.of(memory, l2_gbps=self.gbps, l2_bytes=self.nbytes, l3_gbps=self.l3_gbps,
                             l3_bytes=self.l3_bytes, l1_gbps=self.l1_gbps, l1_bytes=self.l1_bytes)


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


def cache_sizes(units=None) -> tuple[int, int, int]:
    """The usable cores' L1 data, L2 and L3 caches' bytes as Linux reports them (0 for one it does not);
    ``units``: :func:`~explorer.measure.cache_sizes.cache_units` where the caller read them already."""
    units = cache_units() if units is None else units
    return level_bytes(1, units), level_bytes(2, units), level_bytes(3, units)


def l3_probe_bytes(l2_bytes: int, l3_bytes: int) -> int:
    """The bytes the L3 is timed over: well beyond the L2 caches (4 times them, :data:`MIN_L3_PROBE`
    at least: what they still hold of a stream is the L2's share, counted apart by the roofline),
    well within the L3 (half of it at most)."""
    return min(l3_bytes // 2, max(4 * l2_bytes, MIN_L3_PROBE))


def tier_probes(l1_bytes: int, l2_bytes: int, l3_bytes: int) -> dict[str, tuple[int, ...]]:
    """Tier -> the total bytes (every buffer and core together) its bandwidth is streamed over: sizes
    that fit in that tier and not in the one before it (see the module docstring); a tier the OS
    reports no size for, or one too small to tell from the one before it, is left out. Each size
    is more than every smaller cache together and at most half its own tier's."""
    probes: dict[str, tuple[int, ...]] = {}
    if l1_bytes:
        probes["L1"] = (l1_bytes // 2,)
    if l2_bytes and l2_bytes // 2 >= 4 * l1_bytes:
        probes["L2"] = tuple(sorted({max(l2_bytes // 4, 4 * l1_bytes), l2_bytes // 2}))
    if l3_bytes and l3_probe_bytes(l2_bytes, l3_bytes) >= 2 * l2_bytes:
        probes["L3"] = (l3_probe_bytes(l2_bytes, l3_bytes),)
    memory = max(4 * (l1_bytes + l2_bytes + l3_bytes), MIN_MEMORY_PROBE)
    if l3_bytes and memory <= MAX_MEMORY_PROBE:
        probes["memory"] = (memory,)
    return probes


def streamed(probes: dict[str, tuple[int, ...]], found: dict[str, dict[str, float]]) -> dict[str, float]:
    """Tier -> the fastest pattern at any of its sizes, from the stream kernels' ``found`` (size ->
    pattern -> GB/s, :func:`explorer.measure.stream_kernel.time_patterns`)."""
    return {tier: max((gbps for size in sizes for gbps in found.get(str(size), {}).values()), default=0.0)
            for tier, sizes in probes.items()}


def numpy_figures(cores: int, units) -> dict[str, float]:
    """The figures before version 3 (see the module docstring): the L2's and the L3's."""
    l2, l3 = level_bytes(2, units), level_bytes(3, units)
    figures = {"L2": level_count(2, units) * copy_gbps(unit_bytes(2, units) // 4) if l2 else 0.0}
    if l3 > l2:
        probe = l3_probe_bytes(l2, l3)
        figures["L3"] = max(parallel_gbps(probe, cores), parallel_gbps(probe, cores, read=True))
    return figures


def measure_cache_peak() -> CachePeak:
    """Measure it (a few seconds: TVM builds three small kernels in a child process), the machine's
    load sampled before and after; numpy's figures where the stream kernels cannot run."""
    from explorer.measure.machine_load import machine_load
    from explorer.measure.peak_kernel import measure_in_child

    units = cache_units()
    sizes = cache_sizes(units)
    l1, l2, l3 = sizes
    cores = len(usable_cpus())
    load = machine_load()
    child = measure_in_child(5, module="explorer.measure.stream_kernel") if tier_probes(*sizes) else {}
    if "gbps" in child:
        figures = streamed(child["probes"], child["gbps"])  # the sizes the child streamed, as it found them
        kernel = child.get("kernel") or {}
        method = f"stream kernels {kernel.get('lanes', '?')} fp32 lanes, {kernel.get('cores', cores)} cores"
    else:
        figures = numpy_figures(cores, units)
        method = "numpy copy" + (f" ({child['error']})" if child.get("error") else "")
    load = load.worst(machine_load())
    l3_gbps = figures.get("L3", 0.0)
    return CachePeak(hardware_fingerprint(), round(figures.get("L2", 0.0), 1), l2, l3_gbps=round(l3_gbps, 1),
                     l3_bytes=l3 if l3_gbps else 0, provisional=load.busy, l1_gbps=round(figures.get("L1", 0.0), 1),
                     l1_bytes=l1 if figures.get("L1") else 0, memory_gbps=round(figures.get("memory", 0.0), 1),
                     method=method, sizes=sizes)


_quiet_checked: dict[str, float] = {}  # hardware -> when this process last looked at the load


def _path(hardware: str):
    return cache_dir() / (cache_name(hardware) + "-l2.json")  # (one per fingerprint and CPU, as the calibration's)


def _cached(hardware: str) -> CachePeak | None:
    """The stored figures of ``hardware``, None where they are of another version or of other cache sizes."""
    peak = cached_json(_path(hardware), hardware, VERSION, CachePeak.from_dict)
    return peak if peak is not None and peak.sizes == cache_sizes() else None


def save(peak: CachePeak) -> CachePeak:
    """Store ``peak`` as its machine's figures (atomically: readers never see half a file)."""
    write_json(_path(peak.hardware), peak.to_dict())
    return peak


def _remeasured(old: CachePeak | None) -> CachePeak:
    """A new measurement, each figure the higher of it and ``old``'s (see the module docstring), stored."""
    peak = measure_cache_peak()
    if old is not None:
        peak = peak.at_least(old)
    save(peak)
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


__all__ = ["CachePeak", "MAX_MEMORY_PROBE", "MIN_MEMORY_PROBE", "TIERS", "VERSION", "cache_peak", "cache_sizes",
           "copy_gbps", "l3_probe_bytes", "measure_cache_peak", "numpy_figures", "parallel_gbps", "save", "streamed",
           "tier_probes"]
