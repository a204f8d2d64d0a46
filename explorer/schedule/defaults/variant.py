"""One row of the default CPU rules: the choices the ``full`` rule can take otherwise. The rules'
own fallbacks (:data:`explorer.schedule.defaults.apply.RULES`) and the variants a search
measures (:data:`explorer.schedule.defaults.variants.VARIANTS`, ``BF16_VARIANTS``) are both
written as these rows."""

from __future__ import annotations

from dataclasses import dataclass

from store.values import DictValue

BF16_ISAS = ("amx", "avx512bf16")  # explorer.schedule.bf16_dot's instruction sets, as CpuSpec.bf16_dot names them


@dataclass(frozen=True)
class DefaultVariant(DictValue):
    """One way the default rules can choose otherwise (all fields at their defaults: the default).

    The ``bf16_*`` fields choose for a bf16 product (:mod:`.bf16`): ``bf16_isa`` the instructions
    (``avx512bf16`` on an AMX CPU: ``vdpbf16ps`` instead of tiles), and in that instruction's
    units the block one call computes: for ``avx512bf16`` ``bf16_rows`` rows per ``vdpbf16ps``
    step by ``bf16_cols`` panels of 16 channels, for ``amx`` a grid of ``bf16_rows`` x
    ``bf16_cols`` tiles of 16 x 16 (0: the rule's own choice). Sizes need a named ``bf16_isa``;
    a variant whose instructions or sizes do not fit a kernel is no variant of it."""

    # the register tile by choose_tiles' ranking (0: the one its model prefers); for a depthwise conv
    # 0 is its own tile (.depthwise) and n the model's rank n-1
    rank: int = 0
    pixels: bool = True  # two output axes as one axis of rows, where the model gains
    tails: bool = True  # the rows a tile leaves over in a tile of their own (else tiles that divide them)
    bf16_isa: str = ""  # a bf16 product's instructions ("": the CPU's best that fits)
    bf16_rows: int = 0
    bf16_cols: int = 0

    def __post_init__(self):
        if self.bf16_isa not in ("", *BF16_ISAS):
            raise ValueError(f"bf16_isa must be one of {BF16_ISAS} or empty, got {self.bf16_isa!r}")
        if (self.bf16_rows or self.bf16_cols) and not self.bf16_isa:
            raise ValueError("bf16_rows and bf16_cols are counted in an instruction's units: name its bf16_isa")

    @property
    def bf16_label(self) -> str:
        """The bf16 choice in words ("" when it is the rule's own)."""
        if not self.bf16_isa:
            return ""
        if self.bf16_isa == "amx":
            return f"AMX tdpbf16ps, {self.bf16_rows or 'its'} x {self.bf16_cols or 'its'} tiles a call"
        if not (self.bf16_rows or self.bf16_cols):
            return "vdpbf16ps at its own sizes"
        return f"vdpbf16ps steps of {self.bf16_rows or 'its'} rows x {self.bf16_cols or 'its'} panels"

    @property
    def label(self) -> str:
        parts = ([f"tile ranked {self.rank + 1}"] if self.rank else []) + \
            ([] if self.pixels else ["rows not fused"]) + ([] if self.tails else ["no tail tile"]) + \
            ([self.bf16_label] if self.bf16_isa else [])
        return "default rules, " + ", ".join(parts) if parts else "default rules"


__all__ = ["BF16_ISAS", "DefaultVariant"]
