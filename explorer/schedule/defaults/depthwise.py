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
from explorer.schedule.defaults.tile_choice import Tiling, choose_tiles

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


def is_depthwise(facts: BlockFacts, vec: int, rows: int | None) -> bool:
    """Whether the block is a depthwise conv over ``vec`` (its channels): a reduction over taps
    in which every operand, two at least (input and weights; not a pool), is read along ``vec``
    in its innermost dimension, one element per channel (no group division, no broadcast)."""
    if rows is None or not facts.reduce or len(facts.reads) < 2:
        return False
    return all(vec in a.stepped and vec in a.last and not any(vec in d for d in a.dims[:-1])
               and not any(k == vec for k, _ in a.groups) for a in facts.reads)


def _row_tile(extent: int, candidates: tuple[int, ...]) -> int | None:
    if extent <= max(candidates):
        return extent
    return next((rt for rt in candidates if extent % rt == 0), None)


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
        row_tile = _row_tile(extent, ROW_TILES)
        whole = vectors <= WHOLE_PIXEL_VECTORS and row_tile is not None and row_tile * vectors <= cpu.accumulators
        vec_tile = channels if whole else lanes
    elif channels % (lanes // 2) == 0:  # half vectors (MobileNetV3's 72, 120, 184, 200 channels on AVX-512)
        vec_tile = lanes // 2
        doubled = tuple(2 * rt for rt in ROW_TILES if 2 * rt <= cpu.accumulators)
        row_tile = _row_tile(extent, doubled or ROW_TILES)
    else:
        return None
    if row_tile is None:
        return None
    tasks = math.prod(facts.extents[k] for k in facts.spatial) // (row_tile * vec_tile)
    return Tiling(vec=vec, rows=rows, vec_tile=vec_tile, row_tile=row_tile, tasks=tasks, taps_unrolled=True)


def choose_conv_tiles(facts: BlockFacts, vec: int, rows: int | None, cpu: CpuSpec, tails: bool = True,
                      rank: int = 0, streams: bool = False) -> Tiling:
    """:func:`.tile_choice.choose_tiles`, with a depthwise conv's own tile first: ``rank`` 0 is
    that tile, ``rank`` n the product model's n-th (so its best stays a variant a search
    measures); any other block ranks as the model does."""
    own = depthwise_tiling(facts, vec, rows, cpu)
    if own is not None:
        if rank == 0:
            return own
        rank -= 1
    return choose_tiles(facts, vec, rows, cpu, tails, rank, streams)


__all__ = ["ROW_TILES", "WHOLE_PIXEL_VECTORS", "choose_conv_tiles", "depthwise_tiling", "is_depthwise"]
