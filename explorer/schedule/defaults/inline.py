"""First step of every default: fold the cheap blocks of a fused kernel into the blocks that use
them, so that what remains is one block per real computation.

- a spatial block (bias, activation, reshape, residual add) is computed inside its consumer
  (``compute_inline``), except a padding block that a convolution reads as a scalar broadcast
  (see :func:`_keeps_padding`) and a costly block (``exp``, ``erf``...) with several consumers
  or a consumer that broadcasts it (it would be computed once per consumer, or per point read);
- a spatial block whose only producer is spatial is folded into it (``reverse_compute_inline``).

TVM refuses what would be wrong (an output block, a producer read at other indices); a refusal
just leaves the block where it is."""

from __future__ import annotations

import math

import tvm
from tvm import s_tir
from tvm.tirx.analysis import undefined_vars

from explorer.schedule.bf16_dot import PACK_ATTR
from explorer.schedule.defaults.analysis import NotApplicable, block_facts, covers_its_producers, root_blocks
from explorer.schedule.defaults.tile_choice import vector_axis


# A grouped conv reads its input as one element across a tile of output channels, as an NHWC conv
# does, but through ``ff // w``, and its reductions are short (a group's channels times the taps):
# inlined, its border tests cost a share of each multiply-add; a padded copy costs a pass over the
# input that only a long reduction repays. Measured on AVX-512 (Zen 4, 2 cores), each kernel alone,
# caches flushed, in turns: inlined ran 0.64-0.90x the copy's time at 18-288 multiply-adds per
# output (RegNet's groups of 8, ResNeXt's of 4-32, FastViT's of 2), the same at 576-2304
# (ResNeSt's 64-256 channels a group), and 1.7x the copy's at 1024 (wav2vec2's positional conv,
# 32 taps over groups of 32 and 25 positions: most taps cross the border).
GROUPED_PAD_MIN_REDUCTION = 1024


def _try(fn, *args) -> bool:
    try:
        fn(*args)
    except s_tir.ScheduleError:
        return False
    return True


def _padded_innermost(sch: s_tir.Schedule, pad) -> bool:
    """Whether the padding's border test involves its innermost dimension (NCHW's width)."""
    blk = sch.get(pad)
    value = blk.body.value
    iters = [iv.var.name for iv in blk.iter_vars]
    tested = {v.name for v in undefined_vars(value.args[0])}
    return bool(iters) and iters[-1] in tested


def _keeps_padding(sch: s_tir.Schedule, pad, consumer) -> bool:
    """Whether ``consumer`` (a reduction) should read a padded copy rather than test the border in
    its own loads: yes when it reads the padded buffer as a scalar broadcast across its vector
    axis (an NHWC conv: one border test per multiply-add; a grouped one only with a long
    reduction, :data:`GROUPED_PAD_MIN_REDUCTION`) or along a padded innermost dimension (an NCHW
    conv: a border test per vector lane): the tests cost more than the copy; no when it reads
    whole vectors along an unpadded dimension (a depthwise conv or pool in NHWC: one test per
    vector, cheaper than the copy). Measurements: docs/notes/measurements.md."""
    facts = block_facts(sch, consumer)
    if facts.is_spatial:
        return False
    try:
        vec = vector_axis(facts)
    except NotApplicable:
        return True
    written = str(getattr(sch.get(pad).writes[0].source, "name", ""))
    along = [a for a in facts.reads if a.buffer == written and a.uses(vec)]
    if along and all(a.broadcast_along(vec) for a in along):  # a grouped conv: see GROUPED_PAD_MIN_REDUCTION
        return math.prod(facts.extents[k] for k in facts.reduce) >= GROUPED_PAD_MIN_REDUCTION
    return not along or _padded_innermost(sch, pad)


BROADCAST_READS = 4  # consumer points per value that make a costly block "broadcast" (an SE gate: H x W)


def _broadcast_to(sch: s_tir.Schedule, facts, consumers) -> bool:
    """Whether a consumer iterates over more points than the block computes: inlined there, each
    value would be computed again at every point that reads it (an SE block's sigmoid gate over
    1x1xC, times the HxWxC map: one ``exp`` per pixel and channel, not per channel, made EfficientNet's
    SE kernels 0.23 ms where the product alone takes 0.05). At least :data:`BROADCAST_READS` points a
    value: a padding consumer (an int8 image quantized, then padded to whole vector rows: 48 columns
    for 30) reads each value once and keeps the quantize inlined along its rows."""
    return any(block_facts(sch, c).volume >= BROADCAST_READS * facts.volume for c in consumers)


def inline_producers(sch: s_tir.Schedule) -> int:
    """``compute_inline`` every spatial block that may be (see the module docstring); returns how many."""
    done = 0
    progress = True
    while progress:
        progress = False
        for block in root_blocks(sch):
            facts = block_facts(sch, block)
            if not facts.is_spatial or PACK_ATTR in (sch.get(block).annotations or {}):
                continue  # (a bf16 kernel's packing block: its product reads bf16 bits, tensorized)
            consumers = sch.get_consumers(block)
            if not consumers:
                continue
            if facts.padding and any(_keeps_padding(sch, block, c) for c in consumers):
                continue
            if facts.costly and (len(consumers) > 1 or _broadcast_to(sch, facts, consumers)):
                continue
            if _try(sch.compute_inline, block):
                done += 1
                progress = True
                break
    return done


def fold_into_producer(sch: s_tir.Schedule, block) -> bool:
    """``reverse_compute_inline`` ``block`` if TVM accepts it and it covers what its producer writes
    (a slice of it would be written whole: :func:`covers_its_producers`); whether it was folded."""
    if not covers_its_producers(sch, block):
        return False
    try:
        sch.reverse_compute_inline(block)
    except (s_tir.ScheduleError, tvm.error.InternalError):
        # InternalError: TVM 0.27 fails a check instead of refusing a consumer that broadcasts
        # its producer (an SE block's 1x1xC gate times the 7x7xC map); nothing was changed yet
        return False
    return True


def inline_epilogues(sch: s_tir.Schedule) -> int:
    """``reverse_compute_inline`` spatial blocks into their one spatial producer; returns how many."""
    done = 0
    progress = True
    while progress:
        progress = False
        for block in root_blocks(sch):
            if not block_facts(sch, block).is_spatial:
                continue
            producers = sch.get_producers(block)
            if len(producers) != 1:
                continue
            producer = block_facts(sch, producers[0])
            if not producer.is_spatial or producer.padding:
                continue
            if fold_into_producer(sch, block):
                done += 1
                progress = True
                break
    return done


__all__ = ["fold_into_producer", "inline_epilogues", "inline_producers"]
