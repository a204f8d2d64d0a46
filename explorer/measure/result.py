"""The outcome of building, running and verifying one schedule, as plain data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from store.outcome import Outcome


@dataclass(frozen=True)
class MeasureResult:
    """One measurement. ``status`` is how it ended (the store's :class:`store.outcome.Outcome`:
    ok, build_error, run_error, verify_failed or timeout); a failure keeps its ``error`` and never
    a latency that could be ranked."""

    status: Outcome
    flops: int
    target: str
    error: str = ""
    latencies: tuple[float, ...] = ()  # seconds per run, one per repeat
    number: int = 0  # runs averaged in each repeat
    median_s: float | None = None
    mean_s: float | None = None
    std_s: float | None = None
    gflops: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    verified: bool | None = None
    build_seconds: float | None = None
    environment: dict = field(default_factory=dict)
    peak_gflops: float | None = None
    peak_gbps: float | None = None
    arithmetic_intensity: float | None = None
    peak_note: str = ""  # the kernel read above the calibrated peak: what was done (explorer.measure.peak_check)
    peak_family: str = "fp32"  # whose peak peak_gflops is: fp32, bf16 or int8 (GOPS) (explorer.measure.families)
    # False: the figure read further above the peak than a calibration may be raised by (peak_note says so): no % peak
    peak_trusted: bool = True

    @property
    def ok(self) -> bool:
        return self.status == Outcome.OK

    @property
    def percent_of_peak(self) -> float | None:
        if self.gflops is None or not self.peak_gflops or not self.peak_trusted:
            return None
        return 100.0 * self.gflops / self.peak_gflops

    @property
    def roofline_gflops(self) -> float | None:
        """What the roofline allows at this arithmetic intensity: min(peak, AI x bandwidth)."""
        if not (self.peak_gflops and self.peak_gbps and self.arithmetic_intensity):
            return None
        return min(self.peak_gflops, self.arithmetic_intensity * self.peak_gbps)

    def with_peaks(self, peak_gflops: float | None, peak_gbps: float | None, note: str = "",
                   trusted: bool = True) -> MeasureResult:
        return replace(self, peak_gflops=peak_gflops, peak_gbps=peak_gbps, peak_note=note, peak_trusted=trusted)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["latencies"] = list(self.latencies)
        d["percent_of_peak"] = self.percent_of_peak
        d["roofline_gflops"] = self.roofline_gflops
        return d

    @classmethod
    def from_dict(cls, d: dict) -> MeasureResult:
        known = {f for f in cls.__dataclass_fields__}
        d = {k: v for k, v in d.items() if k in known}
        d["latencies"] = tuple(d.get("latencies", ()))
        if "status" in d:
            d["status"] = Outcome(d["status"])
        return cls(**d)
