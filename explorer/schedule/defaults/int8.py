"""Default schedule of a quantized model's int8 kernels: tiled around the CPU's dot-product instruction.

The kernels :mod:`explorer.passes.qdq_int8` writes (``conv2d_nhwc_int8``: loops n, h, w, o, rh,
rw, c; ``dense_int8``: i, j, k) get the BLAS loop order around one
:mod:`explorer.schedule.int8_dot` intrinsic call: ``rows`` output pixels (rows) by ``lanes``
output channels, four input channels at a time, with the whole reduction (rh, rw, c / k) between
the parallel outer loops and the call, so the ``rows`` accumulators stay in registers; two weight
panels per tile where the channels and the registers allow, twice the accumulators, so that
enough independent dot products are in flight to hide the instruction's latency:

    parallel(n, h, w / rows, o / (panels x lanes)) . rh . rw . c / 4 . panels (unrolled)
        . [rows x lanes x 4 intrinsic]
    then, in the same parallel iteration, the epilogue of that tile (vectorized)

The epilogue (requantization, a residual add) reads the tile's int32 sums while they are in cache,
and the sums need a buffer of one tile on the stack, not a second parallel loop over an int32 copy
of the whole output.

``rows`` is 4 where the row extent allows and the rows are dense in the input (stride 1), else 1,
with :data:`STRIDED_ROWS` output pixels unrolled around the one-row call (a strided stem's 16
channels are one accumulator a pixel: four chains in flight, not one). A kernel whose weights
the CPU's instruction would saturate on (see :mod:`explorer.schedule.int8_dot`), or a CPU
without one, is left to the general rules. On a CPU with AMX-INT8, the kernels that fill its tiles
go there instead (:mod:`.int8_amx`), decided by :func:`.int8_amx.amx_call` alone. The figures
behind these choices: docs/notes/measurements.md ("int8 kernels on the vector instructions", "Small
int8 CNNs", "AMX-INT8"); ``python -m benchmarks.bench_int8`` measures them again.
"""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.defaults.analysis import NotApplicable, root_blocks
from explorer.schedule.defaults.epilogue import epilogue_per_tile, vectorize_epilogue
from explorer.schedule.defaults.int8_amx import amx_call, tile_amx_int8
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.int8_dot import ROWS, Int8Dot, fits, register, weight_max


# Output pixels of a strided convolution (its rows are no dense tile of the input: one-row intrinsic
# calls) unrolled around the intrinsic: independent sums in flight instead of one chain per tile.
STRIDED_ROWS = 4


def int8_block(sch: s_tir.Schedule):
    """The int8 kernel block of the function, or None."""
    return next((b for b in root_blocks(sch) if weight_max(sch.get(b)) is not None), None)


def _panels(channels: int, dot: Int8Dot, cpu: CpuSpec) -> int:
    """Weight panels per register tile: two where the channels split into pairs of panels and
    twice the rows of accumulators, the two panels and the broadcast input fit the registers (more
    independent dot products in flight: one panel's rows alone leave the instruction's latency
    exposed), else one."""
    if channels % (2 * dot.lanes) == 0 and 2 * dot.rows + 3 <= cpu.registers:
        return 2
    return 1


def tile_int8(sch: s_tir.Schedule, block, cpu: CpuSpec) -> str:
    """Tile ``block`` around the CPU's int8 intrinsic (see the module docstring); raises
    :class:`NotApplicable` when it cannot."""
    if not cpu.int8_dot:
        raise NotApplicable("this CPU has no int8 dot-product instruction schedx knows")
    try:
        dot = amx_call(sch, block, cpu)
    except NotApplicable:
        pass  # no AMX-INT8, or a kernel its tiles do not take or that does not fill them: the vector instructions
    else:
        return tile_amx_int8(sch, block, dot, epilogue_per_tile)
    loops = sch.get_loops(block)
    if len(loops) not in (3, 7):
        raise NotApplicable("not a conv2d_nhwc_int8 or dense_int8 block")
    row, col, reduce = (loops[2], loops[3], loops[4:]) if len(loops) == 7 else (loops[0], loops[1], loops[2:])
    outer = loops[:2] if len(loops) == 7 else []
    extent = int(sch.get(row).extent)
    dot = next(d for d in (Int8Dot(cpu.int8_dot, r) for r in ROWS)
               if extent % d.rows == 0 and (d.rows == 1 or fits(d, sch.get(block))))
    if not fits(dot, sch.get(block)):
        raise NotApplicable(f"weights up to {weight_max(sch.get(block))} saturate {dot.isa}'s int16 pair sums")
    if int(sch.get(col).extent) % dot.lanes or int(sch.get(reduce[-1]).extent) % 4:
        raise NotApplicable("channels not padded to the intrinsic's panel")
    name = sch.get(block).name_hint
    panels = _panels(int(sch.get(col).extent), dot, cpu)
    col_o, col_p, col_i = sch.split(col, [None, panels, dot.lanes])
    red_o, red_i = sch.split(reduce[-1], [None, 4])
    unrolled = 1
    if dot.rows > 1:
        row_o, row_i = sch.split(row, [None, dot.rows])
        sch.reorder(*outer, row_o, col_o, *reduce[:-1], red_o, col_p, row_i, col_i, red_i)
        inner = row_i
    else:  # the one-row intrinsic has no row loop: the rows stay outside, a few unrolled around it
        unrolled = next((u for u in (STRIDED_ROWS, 2) if extent % u == 0 and extent > u), 1)
        row_o, row_u = sch.split(row, [None, unrolled])
        sch.reorder(*outer, row_o, col_o, *reduce[:-1], red_o, col_p, row_u, col_i, red_i)
        if unrolled > 1:
            sch.unroll(row_u)
        inner = col_i
    if panels > 1:
        sch.unroll(col_p)
    epilogue = epilogue_per_tile(sch, block, col_o)
    tile = sch.blockize(inner)  # the rows x lanes x 4 tile as a block of its own: what the intrinsic replaces
    # parallel before the reduction is split into init and update (parallel wants one reduction block)
    sch.parallel(sch.fuse(*outer, row_o, col_o))
    sch.decompose_reduction(tile, reduce[0] if len(reduce) > 1 else red_o)
    sch.tensorize(tile, register(dot))
    vectorize_epilogue(sch, epilogue)
    return (f"{name}: {dot.name} ({dot.rows} rows x {panels} panel{'s' if panels > 1 else ''} of {dot.lanes} "
            f"channels{f', {unrolled} pixels unrolled' if unrolled > 1 else ''}), parallel outside"
            f"{', epilogue per tile' if epilogue is not None else ''}")


__all__ = ["int8_block", "tile_int8"]
