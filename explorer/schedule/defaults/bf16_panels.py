"""Default schedule of a block that packs an operand into bf16 panels (``[..., N/16, K/2, 16, 2]``:
16 columns x pairs along K, :func:`explorer.passes.bf16_attention.bf16_panels`), alone or with the
copy it is fused into (attention's heads split off the Q/K/V product's output).

The general rules see a transpose and leave it scalar, two elements at a time, in parallel. The
panel's loops ``p, k2, c, kk`` read ``b`` in one of two ways (the block's
:data:`~explorer.schedule.bf16_dot.PANEL_READ_ATTR`):

- by columns (V as it comes, ``b[.., 2 k2 + kk, 16 p + c]``): 16 columns of a row are contiguous,
  so ``c`` is a vector (two rows a pair, ``kk`` outside it), panels in parallel;
- by rows (K as it comes, for ``K^T``: ``b[.., 16 p + c, 2 k2 + kk]``): a pair is contiguous, 16
  of them 16 rows apart; vectors would gather or scatter, so the loops stay scalar in the panel's
  order for LLVM, panels in parallel.

Measured at one thread, BERT's heads (12 x 128 x 64, the bias add and the split fused in):
by columns 49 -> 11 us, by rows 56-80 -> 36 us (busy machine, same process, min of 7 x 200).
"""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.bf16_dot import PAIR, PANEL, PANEL_READ_ATTR
from explorer.schedule.defaults.machine import CpuSpec


def panel_read(sch: s_tir.Schedule, block) -> str:
    """How ``block``'s panels read their operand ("rows", "columns"), or "" where it packs no panels."""
    return str((sch.get(block).annotations or {}).get(PANEL_READ_ATTR, ""))


def schedule_panels(sch: s_tir.Schedule, block, cpu: CpuSpec) -> str | None:
    """Schedule the panel packing ``block`` (module docstring) and say how; None (nothing done)
    where it is not one, or its loops are not ``..., p, k2, c, kk``."""
    read = panel_read(sch, block)
    loops = sch.get_loops(block)
    extents = [int(sch.get(loop).extent) for loop in loops]
    if read not in ("rows", "columns") or len(loops) < 4 or extents[-2:] != [PANEL, PAIR]:
        return None
    *outer, _, c, kk = loops
    panels = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.parallel(panels)
    name = sch.get(block).name_hint
    if read == "columns":
        sch.reorder(kk, c)
        sch.vectorize(c)
        return f"{name}: bf16 panels by columns, 16 columns a vector, panels in parallel"
    return f"{name}: bf16 panels by rows, scalar in the panel's order, panels in parallel"


__all__ = ["panel_read", "schedule_panels"]
