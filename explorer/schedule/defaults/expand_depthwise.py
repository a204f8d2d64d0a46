"""The default schedule of an expansion computed inside its depthwise conv
(:mod:`explorer.passes.expand_depthwise_kernel`): parallel over bands of output rows; in each band
the padded input rows, the expansion (a register tile of :data:`EXPANSION_PIXELS` pixels by two
vectors of channels, its bias and activation written from the registers into the band's map) and
the depthwise conv over the band's map (a tile of a few pixels by two vectors, taps unrolled, as
:mod:`.depthwise`), its epilogue written from the tile.

Band height, measured on MobileNetV2's 16 -> 96 @112 stride 2 (Intel Xeon KVM guest, AVX-512,
1 thread, alternated with the two kernels alone, load 1.1-1.5; ratios to the pair): 2 rows 0.99,
4 rows 0.84, 7 rows 0.80, 14 rows 0.85 (more rows, less recompute, but a map past the L2's share);
the expansion's tile 6x32 0.80 against 6x48 0.90, 3x96 0.93, 19x16 1.02; the depthwise tile 7x32
against 7x16 0.80 / 0.82, 8x16 0.94.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from explorer.passes.expand_depthwise_kernel import (DEPTHWISE, EXPAND, EXPANSION_PIXELS, INPUT, MAP,
                                                     ROLE_ATTR)
from explorer.schedule.defaults.analysis import NotApplicable, root_blocks
from explorer.schedule.defaults.depthwise import ROW_TILES, first_divisor
from explorer.schedule.defaults.machine import CpuSpec

# output rows a band: the first that divides the output's rows into a multiple of the cores' bands (else
# the first that divides them); 7 measured best (module docstring)
BAND_ROWS = (7, 8, 6, 5, 4, 3, 2, 1)
CHANNEL_VECTORS = 2  # vectors of channels in a tile (expansion and depthwise), where the channels divide


def expand_depthwise_blocks(sch: s_tir.Schedule) -> dict | None:
    """The kernel's blocks by role (input, expand, map, depthwise) and ``epilogue`` (the blocks after
    the depthwise conv, in order), or None when ``sch`` is not such a kernel."""
    roles: dict = {}
    epilogue: list = []
    for block in root_blocks(sch):
        role = sch.get(block).annotations.get(ROLE_ATTR)
        if role is not None:
            roles[str(role)] = block
        elif DEPTHWISE in roles:
            epilogue.append(block)
    if set(roles) != {INPUT, EXPAND, MAP, DEPTHWISE}:
        return None
    return {**roles, "epilogue": epilogue}


@dataclass(frozen=True)
class BandTiles:
    """The depthwise conv's tile in the bands' schedule: ``pixels`` of an output row by ``channels``."""

    pixels: int
    channels: int


def band_tiles(out_width: int, channels: int, lanes: int) -> BandTiles | None:
    """The tile :func:`schedule_expand_depthwise` takes for a fused kernel of ``channels`` channels and
    output rows ``out_width`` wide on vectors of ``lanes`` (the expansion's tile has as many channels);
    None where it takes none: no depthwise tile of :data:`.depthwise.ROW_TILES` divides the row, or the
    channels are no whole vectors. The pass asks this before it rewrites (else the kernel would fall to
    a rule that works through the whole map), so that the two never disagree."""
    pixels = first_divisor(out_width, ROW_TILES)
    vectors = next((v for v in (CHANNEL_VECTORS, 1) if channels % (v * lanes) == 0), None)
    return None if pixels is None or vectors is None else BandTiles(pixels, vectors * lanes)


def _vectorize_last(sch: s_tir.Schedule, block, lanes: int) -> None:
    """The block's innermost loop split into vectors of ``lanes`` (whole, if shorter), the vector
    loop vectorized."""
    loop = sch.get_loops(block)[-1]
    extent = int(sch.get(loop).extent)
    if extent > lanes and extent % lanes == 0:
        loop = sch.split(loop, [None, lanes])[1]
    sch.vectorize(loop)


def schedule_expand_depthwise(sch: s_tir.Schedule, blocks: dict, cpu: CpuSpec) -> list[str]:
    """Schedule the kernel (module docstring); its steps, one line. Raises ``NotApplicable`` or TVM's
    ``ScheduleError`` where a shape does not fit (the caller tries the next rule)."""
    lanes = cpu.lanes("float32")
    dw, expand, mp, inp = blocks[DEPTHWISE], blocks[EXPAND], blocks[MAP], blocks[INPUT]
    n, h, w, c, ry, rx = sch.get_loops(dw)
    out_h, out_w, channels = (int(sch.get(loop).extent) for loop in (h, w, c))
    tiles = band_tiles(out_w, channels, lanes)
    if tiles is None:
        raise NotApplicable(f"no depthwise tile of {ROW_TILES} pixels divides the {out_w}-wide rows, "
                            f"or {channels} channels are no whole vectors of {lanes}")
    band = next((b for b in BAND_ROWS if out_h % b == 0 and (out_h // b) % cpu.cores == 0), None) \
        or first_divisor(out_h, BAND_ROWS)  # 1 divides every height

    hb, hi = sch.split(h, [None, band])
    wo, wi = sch.split(w, [None, tiles.pixels])
    co, ci = sch.split(c, [None, tiles.channels])
    sch.reorder(hb, hi, wo, co, ry, rx, wi, ci)
    cu, cv = sch.split(ci, [None, lanes])
    for loop in (ry, rx, wi, cu):
        sch.unroll(loop)
    sch.vectorize(cv)
    *inlined, last = blocks["epilogue"] or [None]
    for block in inlined:
        sch.compute_inline(block)
    if last is not None:
        sch.reverse_compute_at(last, co)
        _vectorize_last(sch, last, lanes)

    sch.compute_at(mp, hb)
    row, pw, pc = sch.get_loops(mp)[-3:]
    map_rows = int(sch.get(row).extent)
    pwo, pwi = sch.split(pw, [None, EXPANSION_PIXELS])
    pco, pci = sch.split(pc, [None, tiles.channels])
    sch.reorder(pwo, pco, pwi, pci)
    sch.compute_at(expand, pco)
    ew, ec, ek = sch.get_loops(expand)[-3:]
    eco, eci = sch.split(ec, [None, lanes])
    sch.reorder(ek, ew, eco, eci)
    for loop in (ew, eco):
        sch.unroll(loop)
    sch.vectorize(eci)
    _vectorize_last(sch, mp, lanes)
    sch.compute_at(inp, hb)
    _vectorize_last(sch, inp, lanes)

    sch.parallel(hb)
    sch.decompose_reduction(expand, ek)
    sch.decompose_reduction(dw, ry)
    return [f"expansion inside the depthwise conv: bands of {band} output rows ({map_rows} expanded rows), "
            f"expansion tile {EXPANSION_PIXELS}x{tiles.channels}, depthwise tile {tiles.pixels}x{tiles.channels}, "
            "taps unrolled"]


__all__ = ["BAND_ROWS", "CHANNEL_VECTORS", "BandTiles", "band_tiles", "expand_depthwise_blocks", "schedule_expand_depthwise"]
