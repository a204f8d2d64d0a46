"""Instruction families: which peak a kernel is read against, and that peak as data.

A bf16 kernel runs on the bf16 units (``vdpbf16ps``, AMX ``tdpbf16ps``), an int8 one on the int8
units (``vpdpbusd``, ``vpmaddubsw``, AMX ``tdpbusd``); everything else on the fp32 FMA units. Each
family has its own calibrated peak (:mod:`explorer.measure.dot_peaks`), and a kernel's % of peak,
roofline and "above the peak" check use its family's.

How a kernel's family is told: by the block annotations the passes that write these kernels set
on them, the same marks the schedules find them by: :data:`explorer.schedule.bf16_dot.BF16_ATTR`
on every bf16 product (``dense_bf16``, ``conv2d_bf16``) and
:data:`explorer.schedule.int8_dot.WEIGHT_MAX_ATTR` on every int8 one (``conv2d_nhwc_int8``,
``dense_int8``). They survive fusion and scheduling, unlike a function's name, which a fused
task may not carry. :func:`family_of_name` reads a name where only a name is left (an old record).

A family's peak is that of one instruction set (``isa``: AMX tiles, or ``vdpbf16ps`` alone, ...):
the same machine seen with its tiles hidden (``SCHEDX_CPU_FLAGS``, or a VM that hides them) runs its
bf16 kernels on ``vdpbf16ps``, and reads them against that instruction's peak, not the tiles'
(:meth:`FamilyPeak.matches`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

FP32 = "fp32"
NO_INSTRUCTIONS = "none"  # the isa of a family the CPU has no instructions for


@dataclass(frozen=True)
class FamilyPeak:
    """One family's peak on this machine: ``gflops`` (GOPS for int8; None where the CPU has no such
    instructions or it could not be measured, ``kernel`` then says why), what measured it, the
    kernel's own best figure, and the kernel whose figure raised it above that ("" when none)."""

    family: str
    gflops: float | None
    kernel: str  # "bf16 AMX tdpbf16ps kernel, 4 tiles", or why there is no figure
    label: str = ""  # short: "bf16 AMX" ("" when absent)
    measured: float | None = None
    raised_by: str = ""
    # the instruction set the figure is of (explorer.measure.instructions.Instruction.isa: "amx",
    # "avx512bf16", ...; NO_INSTRUCTIONS where the CPU has none; "" where not known: any)
    isa: str = ""
    # its kernel's figure over the fp32 FMA kernel's timed right after it in the same process (None: not
    # timed so): the instructions' relative rate, which holds on a busy machine where each figure swings
    fp32_ratio: float | None = None

    def matches(self, isa: str) -> bool:
        """Whether this is the peak of a CPU whose instructions of the family are ``isa`` (an entry of
        no known instruction set, written before they were recorded, matches any where it has a figure;
        a failed measurement, which has none, matches nothing: it is measured again)."""
        return self.isa == isa or (not self.isa and self.gflops is not None)

    @property
    def unit(self) -> str:
        return "GOPS" if self.family == "int8" else "GFLOPS"

    @property
    def source(self) -> str:
        return f"measured by {self.raised_by}" if self.raised_by else self.kernel

    def text(self) -> str:
        """``bf16 AMX 3339 GFLOPS``, or ``no bf16 peak`` where absent."""
        if not self.gflops:
            return f"no {self.family} peak"
        raised = f" (raised by {self.raised_by})" if self.raised_by else ""
        return f"{self.label or self.family} {self.gflops:.0f} {self.unit}{raised}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> FamilyPeak:
        """Read back; an entry stored before the instruction set was recorded has it read from its
        label (``bf16 AMX`` is ``amx``)."""
        known = set(cls.__dataclass_fields__)
        peak = cls(**{k: v for k, v in data.items() if k in known})
        if "isa" not in data and peak.label:
            from explorer.measure.instructions import INSTRUCTIONS

            row = next((i for i in INSTRUCTIONS if i.label == peak.label), None)
            peak = peak if row is None else replace(peak, isa=row.isa)
        return peak


def peaks_line(peaks) -> str:
    """``peaks: fp32 477 GFLOPS, bf16 AMX 3339 GFLOPS, int8 AMX 6974 GOPS`` for :class:`FamilyPeak` s."""
    return "peaks: " + ", ".join(p.text() for p in peaks)


def kernel_family(mod) -> str:
    """``bf16``, ``int8`` or ``fp32``: the family of a kernel (a PrimFunc or a module of them) from its
    blocks' annotations (see the module docstring)."""
    import tvm

    from explorer.ir.tir_walk import blocks
    from explorer.schedule.bf16_dot import BF16_ATTR
    from explorer.schedule.int8_dot import WEIGHT_MAX_ATTR

    funcs = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)] \
        if isinstance(mod, tvm.IRModule) else [mod]
    for func in funcs:
        for block in blocks(func):
            keys = set((block.annotations or {}).keys())
            if BF16_ATTR in keys:
                return "bf16"
            if WEIGHT_MAX_ATTR in keys:
                return "int8"
    return FP32


def family_of_name(name: str) -> str:
    """A kernel's family read from its name alone (``fused_conv2d_bf164_add6`` is bf16), where no
    module is left to read: ``fp32`` unless the name says ``bf16`` or ``int8``."""
    low = name.lower()
    return "bf16" if "bf16" in low else "int8" if "int8" in low else FP32


__all__ = ["FP32", "NO_INSTRUCTIONS", "FamilyPeak", "family_of_name", "kernel_family", "peaks_line"]
