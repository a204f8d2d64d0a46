"""Default schedule of a direct bf16 convolution (``conv2d_nhwc_bf16``,
:mod:`explorer.passes.bf16_conv_nhwc`) on AVX512-BF16 vectors alone (``vdpbf16ps``, a CPU without
AMX tiles: Zen 4/5, Cooper Lake): the AMX kernel's input, weights and output, the matmuls'
micro-kernel (:class:`explorer.schedule.bf16_dot.Bf16Dot`) on them:

    parallel(n, h, w / rows, o / (16 panels)) . kh . kw . c / 2 . panels (unrolled)
        . [rows pixels x 16 channels x 2: vdpbf16ps, the input pair a 32-bit broadcast
           (weights-heavy: first, prefetcht1 of each panel's line in the next block of output channels)]
    then, in the same parallel iteration, the epilogue of that tile (bias, residual add, relu)

``rows`` pixels of one output row by ``panels`` x 16 output channels are the tile's sums
(:func:`vector_tile`: as many as the registers hold, enough independent chains to cover
``vdpbf16ps``' latency); each step reads one 64-byte weight panel row per panel (the packed weights'
``[O/16, KH, KW, C/2, 16, 2]``: the AMX B tile's rows) and broadcasts one channel pair of each of
the tile's input pixels, straight from the rounded, padded NHWC input (no im2col, no output copy).
Where the weights outweigh the input (ResNet's last stages) the output channels run outermost, so
each core streams its share of the weights once, each call asking for the next block's weight lines
into L2 (:data:`PREFETCH_NEXT_PANELS`). The packing block (the input rounded to bf16 and
padded once) is scheduled as the AMX kernel's is (:func:`.bf16_amx_conv.schedule_input`).
"""

from __future__ import annotations

from math import prod

from tvm import s_tir

from explorer.passes.bf16_conv_nhwc import ROW_STRIDE_ATTR
from explorer.schedule.bf16_dot import PAIR, PANEL, VECTOR_CONV_ROWS, Bf16Dot
from explorer.schedule.bf16_intrin import register
from explorer.schedule.defaults.analysis import NotApplicable
from explorer.schedule.defaults.bf16_amx_conv import schedule_input, weights_outweigh_input
from explorer.schedule.defaults.epilogue import epilogue_per_tile, vectorize_epilogue
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.llvm_import import IMPORT_LLVM

# vector registers a tile leaves besides its sums and its weight panel rows (one a panel): the broadcast
# pair of the row being computed (:class:`explorer.schedule.bf16_dot.Bf16Dot`, rows by panels)
SPARE_REGISTERS = 1
# a weights-heavy kernel (output channels outermost) asks, each call, for the same weight line of its next
# block of output channels into L2: that block's weights arrive from L3 or memory while this block
# computes its rows. Measured on Zen 5 (docs/notes/measurements.md, stop 64): ResNet-18's 3x3 512 -> 512
# @7 alone with the caches flushed before each run 0.333 -> 0.299 ms (0.264 -> 0.274 with its weights
# in cache), the model at bf16 0.98x (alternated bundles, 10 of 12 rounds faster). Off: no prefetch
PREFETCH_NEXT_PANELS = True


def fits_registers(rows: int, panels: int, cpu: CpuSpec) -> bool:
    """Whether a ``vdpbf16ps`` tile of ``rows`` by ``panels`` (a call of rows by panels, each row's broadcast
    feeding every panel) fits the CPU's vector registers: its ``rows x panels`` sums, a weight row a panel and
    :data:`SPARE_REGISTERS`. The one rule of the direct convolution's tile and a product's panels."""
    return rows * panels + panels + SPARE_REGISTERS <= cpu.registers


def vector_tile(width: int, channels: int, cpu: CpuSpec) -> tuple[int, int]:
    """``(rows, panels)`` of a tile for output rows of ``width`` pixels and ``channels`` output
    channels (padded to 16): the most sums (``rows x panels`` accumulators, independent chains of
    ``vdpbf16ps`` that hide its latency) that fit the registers beside a weight row a panel and
    :data:`SPARE_REGISTERS`, rows dividing the width and panels the channels' panels; ties to fewer panels (each panel a weight row a step,
    each pixel a broadcast: more rows load less). Raises :class:`NotApplicable` where no row count of
    :data:`~explorer.schedule.bf16_dot.VECTOR_CONV_ROWS` divides the width."""
    count = channels // PANEL
    fits = [(r, p) for r in VECTOR_CONV_ROWS if r <= width and width % r == 0
            for p in range(1, count + 1) if count % p == 0 and fits_registers(r, p, cpu)]
    if not fits:
        raise NotApplicable(f"no tile of {VECTOR_CONV_ROWS.start}-{VECTOR_CONV_ROWS.stop - 1} pixels divides "
                            f"output rows of {width}")
    return max(fits, key=lambda t: (t[0] * t[1], -t[1]))


def prefetches(blocks: int, cpu: CpuSpec) -> bool:
    """Whether a weights-heavy kernel of ``blocks`` blocks of output channels (its tiles' panels) prefetches
    its next block's weights (:data:`PREFETCH_NEXT_PANELS`): where each core computes two blocks or more (the
    parallel loop is split into one contiguous run a core, output channels outermost); a core's only block has
    no next one of its own. (Two blocks' weights, up to 2 x 32 channels x 9 taps x 512 channels x 2 bytes
    = 590 KB, fit the 1 MB or larger L2 of every CPU with AVX512-BF16.)"""
    return PREFETCH_NEXT_PANELS and blocks >= 2 * max(1, cpu.cores)


def tile_vector_conv(sch: s_tir.Schedule, block, cpu: CpuSpec) -> str:
    """Tile ``block`` (loops n, h, w, o, kh, kw, c) into ``vdpbf16ps`` tiles, its epilogue per tile,
    and schedule its packing block (module docstring); raises :class:`NotApplicable` where it cannot."""
    loops = sch.get_loops(block)
    if len(loops) != 7:
        raise NotApplicable("not a row-tiled direct NHWC bf16 convolution (loops n, h, w, o, kh, kw, c)")
    name = sch.get(block).name_hint
    n, h, w, o, rh, rw, rc = loops
    width, channels = int(sch.get(w).extent), int(sch.get(o).extent)
    if channels % PANEL or int(sch.get(rc).extent) % PAIR:
        raise NotApplicable("output channels not padded to 16, or input channels to pairs")
    rows, panels = vector_tile(width, channels, cpu)
    weights_heavy = weights_outweigh_input(sch, block)
    o_o, *o_p, o_i = sch.split(o, [None, panels, PANEL] if panels > 1 else [None, PANEL])
    w_o, w_i = sch.split(w, [None, rows])
    c2, kk = sch.split(rc, [None, PAIR])
    order = [o_o, n, h, w_o] if weights_heavy else [n, h, w_o, o_o]
    sch.reorder(*order, rh, rw, c2, *o_p, w_i, o_i, kk)
    epilogue = epilogue_per_tile(sch, block, order[-1])
    tile = sch.blockize(o_p[0] if o_p else w_i)  # (one panel: no panel loop)
    outer = sch.fuse(*order)
    sch.parallel(outer)
    sch.decompose_reduction(tile, rh)
    dot = Bf16Dot(rows, panels, weights_rank=6, stride=int((sch.get(block).annotations or {}).get(ROW_STRIDE_ATTR, 1)),
                  ahead=panels if weights_heavy and prefetches(channels // PANEL // panels, cpu) else 0)
    sch.tensorize(tile, register(dot))
    sch.annotate(outer, IMPORT_LLVM, dot.llvm_ir)
    vectorize_epilogue(sch, epilogue)
    taps = f"{prod(int(sch.get(loop).extent) for loop in (rh, rw))} taps"
    step = (f"{name}: {dot.name} (vdpbf16ps, direct NHWC, no im2col: {rows} pixels x {panels} panel"
            f"{'s' if panels > 1 else ''} of {PANEL} channels over {taps} x channel pairs, fp32 accumulation), "
            f"parallel outside{', output channels outermost' if weights_heavy else ''}"
            f"{', epilogue per tile' if epilogue is not None else ''}")
    return "; ".join([step, *schedule_input(sch)])


__all__ = ["PREFETCH_NEXT_PANELS", "SPARE_REGISTERS", "fits_registers", "prefetches", "tile_vector_conv",
           "vector_tile"]
