"""Default schedule of a bf16 convolution's packing blocks (:mod:`explorer.passes.bf16_conv`): the
input rounded to bf16 once (``bf16_input``: padded, channels in pairs) and its im2col into panels of
16 pixels x pairs (``bf16_im2col``), the product itself tiled by :mod:`.bf16` as a dense one.

The im2col reads its input at pixel indices (``p // OW``, ``p % OW``) that no loop is affine in; run
as it is, the general rules keep its 32 values a panel row scalar, with the index arithmetic per
value (a 56 x 56 x 64 3x3 layer: 13 ms, against ~0.3 ms for its AMX product). Here each panel row
is one vector of 16 pixels x 2 (the index arithmetic vectorized, the loads gathered), rows in
parallel; the input's rounding runs its rows in parallel, the columns left to LLVM.
"""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.defaults.analysis import root_blocks

INPUT_BLOCK, IM2COL_BLOCK = "bf16_input", "bf16_im2col"


def _named(sch: s_tir.Schedule, name: str):
    return next((b for b in root_blocks(sch) if sch.get(b).name_hint == name), None)


def schedule_conv_packing(sch: s_tir.Schedule) -> list[str]:
    """Schedule a bf16 convolution's packing blocks (module docstring); what was done to each
    (nothing when the kernel has none)."""
    steps = []
    block = _named(sch, IM2COL_BLOCK)
    if block is not None:
        pp, k2, lane, kk = sch.get_loops(block)
        sch.parallel(sch.fuse(pp, k2))
        sch.vectorize(sch.fuse(lane, kk))
        steps.append(f"{IM2COL_BLOCK}: panel rows of 16 pixels x 2 as vectors (gathered), rows in parallel")
    block = _named(sch, INPUT_BLOCK)
    if block is not None:
        loops = sch.get_loops(block)
        sch.parallel(sch.fuse(*loops[:4]))
        steps.append(f"{INPUT_BLOCK}: rows in parallel")
    return steps


def scheduled_already(sch: s_tir.Schedule, name: str) -> bool:
    """Whether block ``name`` has a parallel loop already (scheduled with its product), or was split into
    parts by its product's schedule (``loop_partition``: a packing's padding apart from its input, blocks
    named ``name_...``), nothing left to schedule under that name. A block gone any other way: False (the
    next rule takes the kernel, as a failure should)."""
    from tvm.tirx import ForKind

    from explorer.ir.tir_walk import blocks

    try:
        block = sch.get_sblock(name)
    except Exception:  # noqa: BLE001 - gone
        return any(b.name_hint.startswith(f"{name}_") for b in blocks(sch.mod["main"]))
    return any(sch.get(loop).kind == ForKind.PARALLEL for loop in sch.get_loops(block))


__all__ = ["IM2COL_BLOCK", "INPUT_BLOCK", "schedule_conv_packing", "scheduled_already"]
