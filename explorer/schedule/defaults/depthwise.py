"""The register tile of a depthwise convolution with channels as vectors (NHWC, groups = channels):
a few pixels of a row by one vector of channels, the kernel's taps unrolled.

Every operand of such a conv varies along the vector axis (each output channel reads its own
input channel and its own weights), so no operand is shared by the rows of a tile but the
weights: :func:`.tile_choice.choose_tiles`' model of a product (one broadcast serving a row of
vectors) prices it wrong and picked 14x16 and 7x32 tiles with the taps in a loop. With the taps
unrolled LLVM sees the whole tile's loads at once (a stride-1 conv's neighbouring pixels share
their inputs across taps) and the border tests of the inlined padding fold per tap.

The figures below: MobileNetV2's depthwise convs, each timed right after the kernel that writes its
input, alternated rounds (Intel Xeon KVM guest, AVX-512, 2 cores, load 1.7-2.6).
"""

from __future__ import annotations

import math

from explorer.schedule.defaults.analysis import BlockFacts
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.tile_choice import Tiling, choose_tiles, fits

# Pixels a tile spans, the first that divides the row (a tail of rows costs a write-back pass of
# its own, which a 9-tap reduction does not pay back). 7 measured best on 56-, 28- and 14-wide
# rows (56x56x144 stride 1, taps in a loop: 7 rows 0.81x the 14-row default, 8 rows 0.97x, 4
# rows 0.89x); MobileNet-family widths (112, 56, 28, 14, 7) all divide by 7.
ROW_TILES = (7, 8, 6, 5, 4)

# Channels up to this many vectors go into one tile whole (each pixel's channels contiguous in
# one task: 112x112x32 at 2 threads 7x32 0.93x the old default, 7x16 1.03x); more channels, one
# vector a tile (7x16 against 7x32, taps unrolled, 2 threads: 0.76-0.85x against 0.89-0.97x on
# 384-960 channels; 144 channels have no 32-wide tile). Channels in half vectors only (72, 120,
# 184, 200 on AVX-512) take half-vector tiles of twice the rows, as many lanes in flight (1 thread:
# 14x8 0.70-0.86x the product model's 28x8 and 14x8; 7x8 0.67x at 56 wide, 1.07x at 14).
WHOLE_PIXEL_VECTORS = 2

# Taps a depthwise conv may have (the product of its reduction's extents): all of them are unrolled
# into each tile, so a long reduction along the channels (a sum over 512 products of two maps, one
# per channel) is no depthwise conv: unrolled 512 x 7 times it took 3.4 s to compile. 64 covers 7x7.
MAX_TAPS = 64


def is_depthwise(facts: BlockFacts, vec: int, rows: int | None) -> bool:
    """Whether the block is a depthwise conv over ``vec`` (its channels): a reduction over at most
    :data:`MAX_TAPS` taps that slides a window (an operand has a dimension indexed by an output
    pixel and a tap together, as ``y + ry``), in which every operand, two at least (input and
    weights; not a pool), is read along ``vec`` in its innermost dimension, one element per
    channel (no group division, no broadcast)."""
    if rows is None or not facts.reduce or len(facts.reads) < 2:
        return False
    if math.prod(facts.extents[k] for k in facts.reduce) > MAX_TAPS:
        return False
    pixels = {k for k in facts.spatial if k != vec}
    if not any(d & pixels and any(facts.reduction[k] for k in d) for a in facts.reads for d in a.dims):
        return False
    return all(vec in a.stepped and vec in a.last and not any(vec in d for d in a.dims[:-1])
               and not any(k == vec for k, _ in a.groups) for a in facts.reads)


def first_divisor(extent: int, candidates: tuple[int, ...]) -> int | None:
    """The first of ``candidates`` (tiles in order of preference) that divides ``extent``, or None."""
    return next((c for c in candidates if extent % c == 0), None)


def _row_tile(extent: int, candidates: tuple[int, ...]) -> int | None:
    """The first candidate that divides ``extent``, or ``extent`` itself when no larger than one
    (candidates come filtered by :func:`.tile_choice.fits`, which fewer rows always pass)."""
    if not candidates:
        return None
    if extent <= max(candidates):
        return extent
    return first_divisor(extent, candidates)


def _fitting(facts: BlockFacts, vec: int, cpu: CpuSpec, row_tiles: tuple[int, ...], vec_tile: int) -> tuple[int, ...]:
    """The row tiles that fit the registers as a product's tile does (:func:`.tile_choice.fits`)
    and, their taps unrolled, hold at most half the registers as accumulators: LLVM keeps each
    row's input in a register of its own across a row of taps (neighbouring pixels share them).
    AVX2's 12x4 (half vectors, twice the rows) spilled (147 stack accesses against 8x4's 37) and
    ran 1.06-1.07x 8x4's time (20 channels at 48 wide, 36 at 24; Xeon KVM guest, 1 thread, load 2)."""
    vectors = math.ceil(vec_tile / cpu.lanes(facts.dtype))
    return tuple(rt for rt in row_tiles if fits(facts, vec, cpu, rt, vec_tile) and rt * vectors <= cpu.registers // 2)


def depthwise_tiling(facts: BlockFacts, vec: int, rows: int | None, cpu: CpuSpec) -> Tiling | None:
    """The tile for a depthwise conv (:func:`is_depthwise`), or None: not one, or its rows or
    channels have no tile here (the product's model decides then)."""
    if not is_depthwise(facts, vec, rows):
        return None
    lanes = cpu.lanes(facts.dtype)
    channels, extent = facts.extents[vec], facts.extents[rows]
    if lanes < 2:
        return None
    if channels % lanes == 0:
        vectors = channels // lanes
        row_tile = _row_tile(extent, _fitting(facts, vec, cpu, ROW_TILES, lanes))
        whole = (vectors <= WHOLE_PIXEL_VECTORS and row_tile is not None
                 and bool(_fitting(facts, vec, cpu, (row_tile,), channels)))
        vec_tile = channels if whole else lanes
    elif channels % (lanes // 2) == 0:  # half vectors (MobileNetV3's 72, 120, 184, 200 channels on AVX-512)
        vec_tile = lanes // 2
        doubled = _fitting(facts, vec, cpu, tuple(2 * rt for rt in ROW_TILES), vec_tile)
        row_tile = _row_tile(extent, doubled or _fitting(facts, vec, cpu, ROW_TILES, vec_tile))
    else:
        return None
    if row_tile is None:
        return None
    tasks = math.prod(facts.extents[k] for k in facts.spatial) // (row_tile * vec_tile)
    return Tiling(vec=vec, rows=rows, vec_tile=vec_tile, row_tile=row_tile, tasks=tasks, taps_unrolled=True)


def choose_conv_tiles(facts: BlockFacts, vec: int, rows: int | None, cpu: CpuSpec, tails: bool = True,
                      rank: int = 0, streams: bool = False) -> tuple[Tiling, int | None]:
    """:func:`.tile_choice.choose_tiles`, with a depthwise conv's own tile first: ``rank`` 0 is
    that tile, ``rank`` n the product model's rank n-1 (so its best stays a variant a search
    measures); any other block ranks as the model does. Returns the tile and the product model's
    rank it is (None: the depthwise conv's own), the rank :func:`.pixel_rows.pixel_rows` ranks by."""
    own = depthwise_tiling(facts, vec, rows, cpu)
    if own is not None:
        if rank == 0:
            return own, None
        rank -= 1
    return choose_tiles(facts, vec, rows, cpu, tails, rank, streams), rank


__all__ = ["MAX_TAPS", "ROW_TILES", "WHOLE_PIXEL_VECTORS", "choose_conv_tiles", "depthwise_tiling", "first_divisor",
           "is_depthwise"]
