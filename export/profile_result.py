"""A profile of one model on one target, as data: its kernels' rows (:mod:`export.profile_rows`),
ONNX Runtime's and OpenVINO's figures beside them, the machine's peaks and memory tiers its
rooflines read against, and the notes of how it was taken (:func:`export.profile_run.profile_export`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from explorer.measure.families import FP32, FamilyPeak, peaks_line
from explorer.measure.memory_roof import MemoryRoof
from export.profile_rows import KernelTime
from store.values import DictValue


@dataclass(frozen=True)
class OrtNode(DictValue):
    """ONNX Runtime's time for one node of the ONNX graph (per run)."""

    node: str
    op_type: str
    seconds: float


@dataclass(frozen=True)
class Profile:
    """The profile of one model on one target (see the module docstring)."""

    workload: str
    target: str
    runs: int
    end_to_end_s: float  # median of plain runs (no instrument)
    kernels_s: float  # sum of the kernels' times (instrumented)
    other_s: float  # VM builtins between kernels (allocation, reshapes, ...)
    kernels: tuple[KernelTime, ...]
    ort: tuple[OrtNode, ...] = ()
    ort_s: float | None = None
    peak_gflops: float | None = None
    notes: tuple[str, ...] = field(default=())
    busy_note: str = ""  # other work ran on the machine meanwhile: how much ("" when quiet)
    instrument_s: float = 0.0  # the instrument's own cost per timed call, taken out of every row
    # the tiers the kernels' rooflines read their bandwidth from: the caches, then the large copy's
    # (None: no bandwidth measured, no rooflines)
    memory: MemoryRoof | None = None
    # the FLOP peak of the kernels' rooflines: the calibrated one, or the best GFLOPS a kernel with a
    # share of the time reached in this profile where that is higher (the calibration, a numpy
    # matmul, runs ~10% below the best kernels: headroom against it would miss that much)
    roofline_peak_gflops: float | None = None
    # OpenVINO f32 and its default precision beside TVM's plain runs (export.openvino_row.Anchor)
    openvino: tuple = ()
    # the bf16/int8 peaks the kernels of those families read against (after any raise)
    family_peaks: tuple[FamilyPeak, ...] = ()
    # each family's FLOP peak of its kernels' rooflines (roofline_peak_gflops is fp32's)
    roofline_peaks: dict = field(default_factory=dict)
    # the checks of the memory roof (explorer.measure.roof_check): a kernel above its roofline, what
    # was measured again or raised, or why its % roofline is blank (each also among ``notes``)
    roof_notes: tuple[str, ...] = ()
    # a bf16 bundle built again with every matmul in fp32 (as export ships it: the first missed its tolerance):
    # the kernels of that build the first did not have (its fp32 matmuls), which a bf16 search's records never reach
    unreached: tuple[str, ...] = ()

    def peaks(self) -> tuple[FamilyPeak, ...]:
        """The peaks this profile's kernels read against: fp32, then each other family a kernel of
        the model belongs to (one the CPU has no peak for reads "no bf16 peak")."""
        used = [f for f in dict.fromkeys(k.family for k in self.kernels) if f != FP32]
        known = {p.family: p for p in self.family_peaks}
        return (FamilyPeak(FP32, self.peak_gflops, "", "fp32"),
                *(known.get(f) or FamilyPeak(f, None, "not measured") for f in used))

    def peaks_text(self) -> str:
        """``peaks: fp32 477 GFLOPS, bf16 AMX 3339 GFLOPS``."""
        return peaks_line(self.peaks())

    @property
    def busy(self) -> bool:
        return bool(self.busy_note)

    @property
    def headroom_s(self) -> float | None:
        """What the kernels would save, together, if each ran at its roofline (the FLOP peak, or the
        bandwidth of where its bytes fit where they bind it): about the most any schedule, searched
        or written by hand, can take off this model on this machine. None without both peaks. An
        estimate: the calibrated peak is a little below what the best kernels reach."""
        if not self.peak_gflops or self.memory is None:
            return None
        return sum(k.headroom_s for k in self.kernels)

    def top(self, k: int = 5) -> list[KernelTime]:
        return list(self.kernels[:k])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["kernels"] = [k.to_dict() for k in self.kernels]
        d["headroom_s"] = self.headroom_s
        d["ort"] = [n.to_dict() for n in self.ort]
        d["openvino"] = [a.to_dict() for a in self.openvino]
        d["memory"] = self.memory.to_dict() if self.memory is not None else None
        return d


__all__ = ["OrtNode", "Profile"]
