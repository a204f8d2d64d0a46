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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

FP32 = "fp32"


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
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


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


__all__ = ["FP32", "FamilyPeak", "family_of_name", "kernel_family", "peaks_line"]
