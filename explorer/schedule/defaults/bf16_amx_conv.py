"""Default schedule of a direct bf16 convolution (``conv2d_nhwc_bf16``,
:mod:`explorer.passes.bf16_conv_nhwc`) on AMX-BF16 tiles (:mod:`explorer.schedule.amx_bf16_conv`),
the int8 AMX rule's shape (:mod:`.int8_amx`):

    parallel(n, h, w / rows, o / (16 nt)) . [rows x 16 nt over all taps and channels: one AMX call]
    then, in the same parallel iteration, the epilogue of that tile (bias, residual add, relu)

with the output channels outermost instead where the weights outweigh the input (ResNet's last
stages: each core streams its share of the weights once, not once per output row). A kernel tiled
across rows (loops n, p, o, rh, rw, c: a 7x7 map) gets tiles of 16 pixels, two where they divide,
its row copy and epilogue after it (its tiles are no box of output pixels). Where the input
outweighs the weights, one call takes several grids of tiles (:data:`GROUPED_CALLS`). The call's
own ``tilezero`` is the sums' init: the init TVM keeps after tensorize is dropped. The packing
block (``bf16_nhwc_input``: the input rounded and padded) runs its rows in parallel, channels
vectorized, before.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from tvm import s_tir

from explorer.passes.bf16_conv_nhwc import FLAT_ATTR, INPUT_NAME, ROW_STRIDE_ATTR
from explorer.schedule.amx_bf16_conv import K_CHANNELS, AmxBf16Conv, register, row_taps_fit
from explorer.schedule.amx_int8 import GRIDS
from explorer.schedule.bf16_dot import PANEL
from explorer.schedule.defaults.analysis import NotApplicable, root_blocks
from explorer.schedule.defaults.epilogue import epilogue_per_tile, vectorize_epilogue
from explorer.schedule.defaults.int8_amx import IMPORT_PRAGMA, TILE_REGISTERS
from explorer.schedule.defaults.machine import CpuSpec

# One call computes several grids of tiles (more pixels of the output row, more channels), loading
# the tile configuration once and allocating one buffer of sums: 3x3 64 -> 64 @56, one thread,
# 0.201-0.207 -> 0.191-0.200 ms (the 7x7 stem level: in perf its wait moved from the ldtilecfg to
# the tile loads). False: one grid a call, as before.
GROUPED_CALLS = True
MIN_CALLS_PER_CORE = 4  # the calls a core gets at least (load balance between the cores)
MAX_CALL_SUMS = 32 * 1024  # bytes of fp32 sums one call stores for its epilogue (they stay in L1)


def amx_conv_call(sch: s_tir.Schedule, block, cpu: CpuSpec) -> AmxBf16Conv:
    """The AMX call that computes ``block`` (a ``conv2d_nhwc_bf16`` kernel: loops n, h, w, o, rh,
    rw, c, or n, p, o, rh, rw, c tiled across rows) on ``cpu``; raises :class:`NotApplicable` where the CPU has no AMX-BF16 or the kernel
    does not fit its tiles."""
    if cpu.bf16_dot != "amx":
        raise NotApplicable("this CPU has no AMX-BF16 tiles (the direct NHWC convolution needs them)")
    loops = sch.get_loops(block)
    if len(loops) not in (6, 7):
        raise NotApplicable("not a conv2d_nhwc_bf16 block (loops n, h, w, o, rh, rw, c; or n, p, o, rh, rw, c)")
    extents = [int(sch.get(loop).extent) for loop in loops]
    rows, cols, kh, kw, k = extents[-5:]
    flat = int((sch.get(block).annotations or {}).get(FLAT_ATTR, 0))
    if len(loops) == 6:  # tiled across output rows: pixels padded to tiles of 16 (two where they allow)
        if not flat or rows % 16 or k % K_CHANNELS:
            raise NotApplicable("a flat conv2d_nhwc_bf16 wants its pixels in 16s and channels in 32s")
        mt = 2 if rows % 32 == 0 else 1
        nt = 2 if cols % (2 * PANEL) == 0 and mt * 2 + mt + 2 <= TILE_REGISTERS else 1
        return _grouped(sch, block, AmxBf16Conv(16, mt, nt, k, 1, kh, kw, flat=flat), rows, cols, extents[:-5], cpu)
    if cols % PANEL:
        raise NotApplicable("output channels not padded to the 16-channel panel")
    row_taps = k % K_CHANNELS != 0
    if row_taps and not row_taps_fit(k, kw):
        raise NotApplicable(f"{k} input channels: AMX tiles want multiples of {K_CHANNELS}, or a kernel row "
                            "of at most 32 values")
    grid = next(((m, mt) for m, mt in GRIDS if rows % (m * mt) == 0), None)
    if grid is None:
        raise NotApplicable(f"{rows} output pixels a row split into no tiles of 7-16 rows")
    m, mt = grid
    nt = 2 if cols % (2 * PANEL) == 0 and mt * 2 + mt + 2 <= TILE_REGISTERS else 1
    stride = int((sch.get(block).annotations or {}).get(ROW_STRIDE_ATTR, 1))
    return _grouped(sch, block, AmxBf16Conv(m, mt, nt, k, stride, kh, kw, row_taps), rows, cols, extents[:-5], cpu)


def _grouped(sch: s_tir.Schedule, block, dot: AmxBf16Conv, rows: int, cols: int, outer: list[int],
             cpu: CpuSpec) -> AmxBf16Conv:
    """``dot`` with as many grids a call as keep :data:`MIN_CALLS_PER_CORE` calls a core and
    :data:`MAX_CALL_SUMS` bytes of sums a call: first more channels (all of a pixel's), then more
    pixels of the row (:data:`GROUPED_CALLS`). Not where the weights outweigh the input (they
    stream from memory once, each B tile used by the calls of every row in turn: 3x3 512 @7 and
    128 @28 were 2-4% slower grouped, 3x3 64 @56 4% faster)."""
    if not GROUPED_CALLS or _bytes(sch, block, weights=True) > _bytes(sch, block, weights=False):
        return dot
    tiles = prod(outer) * (rows // dot.rows) * (cols // dot.cols)

    def fits(gr: int, gc: int) -> bool:
        return (tiles // (gr * gc) >= MIN_CALLS_PER_CORE * cpu.cores
                and dot.rows * gr * dot.cols * gc * 4 <= MAX_CALL_SUMS)

    def most(count: int, ok) -> int:
        return max((g for g in range(1, count + 1) if count % g == 0 and ok(g)), default=1)

    gc = most(cols // dot.cols, lambda g: fits(1, g))
    gr = most(rows // dot.rows, lambda g: fits(g, gc))
    return replace(dot, row_groups=gr, col_groups=gc)


def tile_amx_conv(sch: s_tir.Schedule, block, cpu: CpuSpec) -> str:
    """Tile ``block`` into AMX calls and its epilogue per tile (module docstring), schedule its
    packing block; raises :class:`NotApplicable` where :func:`amx_conv_call` does."""
    dot = amx_conv_call(sch, block, cpu)
    loops = sch.get_loops(block)
    name = sch.get(block).name_hint
    outer, row, col, reduce = loops[:-5], loops[-5], loops[-4], loops[-3:]
    weights_first = _bytes(sch, block, weights=True) > _bytes(sch, block, weights=False)
    col_o, col_i = sch.split(col, [None, dot.cols])
    row_o, row_i = sch.split(row, [None, dot.rows])
    order = [col_o, *outer, row_o] if weights_first else [*outer, row_o, col_o]
    sch.reorder(*order, row_i, col_i, *reduce)
    # (a flat kernel's tiles are no box of output pixels: its row copy and epilogue run after it)
    epilogue = None if dot.flat else epilogue_per_tile(sch, block, order[-1])
    tile = sch.blockize(row_i)
    sch.parallel(sch.fuse(*order))
    sch.tensorize(tile, register(dot))  # with its init: the call sums from zero (no decompose_reduction)
    _drop_init(sch, tile)
    sch.annotate(sch.get_loops(tile)[0], IMPORT_PRAGMA, dot.llvm_ir)
    vectorize_epilogue(sch, epilogue)
    walk = (f"{dot.kh} kernel rows of {dot.kw}x{dot.k} values a tile row" if dot.row_taps
            else f"{dot.kh}x{dot.kw} taps x K={dot.k}" + (f", pixels across rows {dot.flat} wide" if dot.flat else ""))
    steps = [f"{name}: {dot.name} (AMX tdpbf16ps, direct NHWC, no im2col: {dot.mt} x {dot.nt} tiles of {dot.m} "
             f"rows x {PANEL} channels over {walk}, stride {dot.stride}, fp32 in tiles"
             f"{_grids(dot)}), parallel outside"
             f"{', epilogue per tile' if epilogue is not None else ''}"]
    return "; ".join(steps + _schedule_input(sch))


def _grids(dot: AmxBf16Conv) -> str:
    groups = dot.row_groups * dot.col_groups
    return f"; {dot.row_groups} x {dot.col_groups} grids a call, one ldtilecfg" if groups > 1 else ""


def _drop_init(sch: s_tir.Schedule, tile) -> None:
    """Drop the tensorized tile's init: the call itself starts its sums from ``tilezero``, so the
    init TVM keeps only lowers to a ``memset`` of the tile's sums before each call (7% of a 3x3
    64-channel kernel in ``perf``). A state edit, not a trace step: a replayed trace keeps the
    memset (slower, the same numbers)."""
    block = sch.get(tile)
    if block.init is None:
        return
    bare = type(block)(block.iter_vars, block.reads, block.writes, block.name_hint, block.body, None,
                       block.alloc_buffers, block.match_buffers, block.annotations)
    sch.state.replace(sch.get_sref(tile), bare, {block: bare})


def _schedule_input(sch: s_tir.Schedule) -> list[str]:
    """The packing block's rows in parallel, its channels vectorized where they fill vectors."""
    block = next((b for b in root_blocks(sch) if sch.get(b).name_hint == INPUT_NAME), None)
    if block is None:
        return []
    loops = sch.get_loops(block)  # n, h, w, c (n, pixel, c: flattened)
    c = loops[-1]
    sch.parallel(sch.fuse(*loops[:2]))
    if int(sch.get(c).extent) % 16 == 0:
        sch.vectorize(c)
    return [f"{INPUT_NAME}: rows in parallel, rounded to bf16 and padded once"]


def _bytes(sch: s_tir.Schedule, block, *, weights: bool) -> int:
    """Bytes of the block's weights (6-D) or of its input (4-D) buffer."""
    return sum(2 * prod(int(d) for d in r.source.shape) for r in sch.get(block).reads
               if str(r.source.dtype) == "uint16" and (len(r.source.shape) == 6) == weights)


__all__ = ["amx_conv_call", "tile_amx_conv"]
