"""Default schedule of a bf16 product (``dense_bf16``, :mod:`explorer.passes.bf16_dense`): tiled
around the CPU's bf16 instruction (:mod:`explorer.schedule.bf16_dot`), fp32 accumulation.

The kernel's loops are ``i, j, k2, kk`` (rows, output channels, pairs along K, the pair). Two
tilings of the same work, one weights layout (panels of 16 channels x pairs):

- AVX512-BF16: ``rows`` rows (8 where the rows divide, else 4, 2, 1) by ``panels`` x 16 channels
  (two panels where the channels allow: ``2 x rows`` accumulators in registers), the whole
  reduction between the parallel outer loops and the call, as the int8 rule does:

      parallel(i / rows, j / (panels x 16)) . k2 . panels (unrolled) . [rows x 16 x 2 vdpbf16ps]

- AMX-BF16: 32 x 32 outputs (2 x 2 tiles of 16 x 16: four ``tdpbf16ps`` per four tile loads; 16 x 16
  where the rows or channels do not divide), each one call over the whole reduction (32 K per
  ``tdpbf16ps``): ``parallel(i / 32, j / 32) . [32 x 32 x K]``; offered where the rows are a
  multiple of 16 and K of 32, else the AVX512-BF16 tiling (every AMX CPU has AVX512-BF16). The
  call computes the whole sum from ``tilezero`` (no zeros stored, then loaded back), and a
  product's epilogue (bias, residual, GELU: FuseOps fuses them in where no reshape stands
  between, :mod:`explorer.passes.bf16_dense`) runs per tile right after its call.

The packing block (fp32 activations to bf16 bits) stays a block of its own, parallel and
vectorized by the general rules; the epilogue after the product (bias, activation) too. A
convolution (:mod:`explorer.passes.bf16_conv`: the same loops, channels as rows and pixels as
columns) has two packing blocks, scheduled here by :mod:`.bf16_conv`. A direct NHWC convolution
(:mod:`explorer.passes.bf16_conv_nhwc`, AMX CPUs only) is tiled by :mod:`.bf16_amx_conv`.

The rule's choices (the instructions, the rows by panels of a ``vdpbf16ps`` step, the grid of AMX
tiles) can be made otherwise: the search measures those variants beside the default
(:data:`explorer.schedule.defaults.variants.BF16_VARIANTS`).
"""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.bf16_dot import AMX_K, BF16_ATTR, PANEL, ROWS, AmxBf16, Bf16Dot
from explorer.schedule.bf16_intrin import register
from explorer.schedule.defaults.analysis import NotApplicable, root_blocks
from explorer.schedule.defaults.bf16_amx_conv import tile_amx_conv
from explorer.schedule.defaults.bf16_conv import schedule_conv_packing
from explorer.schedule.defaults.epilogue import epilogue_per_tile
from explorer.schedule.defaults.machine import CpuSpec

IMPORT_PRAGMA = "pragma_import_llvm"


def bf16_block(sch: s_tir.Schedule):
    """The bf16 product block of the function, or None."""
    return next((b for b in root_blocks(sch) if BF16_ATTR in (sch.get(b).annotations or {})), None)


def _panels(channels: int, dot: Bf16Dot, cpu: CpuSpec) -> int:
    """Two weight panels per register tile where the channels and the registers allow, else one."""
    return 2 if channels % (2 * PANEL) == 0 and 2 * dot.rows + 4 <= cpu.registers else 1


def tile_bf16(sch: s_tir.Schedule, block, cpu: CpuSpec, *, isa: str = "", rows: int = 0, cols: int = 0) -> str:
    """Tile ``block`` around the CPU's bf16 intrinsic (see the module docstring); raises
    :class:`NotApplicable` when it cannot. ``isa``, ``rows`` and ``cols`` choose otherwise than
    the rule (:class:`~explorer.schedule.defaults.variant.DefaultVariant`'s ``bf16_*`` fields:
    the instructions, then the rows by panels of a ``vdpbf16ps`` step or the grid of AMX tiles);
    a choice that does not fit the kernel or the CPU raises :class:`NotApplicable` too."""
    if not cpu.bf16_dot:
        raise NotApplicable("this CPU has no AVX512-BF16 nor AMX-BF16 instructions")
    if isa == "amx" and cpu.bf16_dot != "amx":
        raise NotApplicable("this CPU has no AMX-BF16 instructions")
    loops = sch.get_loops(block)
    if len(loops) in (6, 7):  # a direct NHWC convolution: AMX tiles only, no choices of its own
        if isa == "avx512bf16" or rows or cols:
            raise NotApplicable("a direct NHWC bf16 convolution has one tiling: AMX tiles")
        return tile_amx_conv(sch, block, cpu)
    if len(loops) == 5 and int(sch.get(loops[0]).extent) == 1:  # [1, M, K] activations: the unit loop stays outside
        loops = loops[1:]
    if len(loops) != 4:
        raise NotApplicable("not a dense_bf16 block (loops i, j, k2, kk)")
    extent_i, extent_j, half = (int(sch.get(loop).extent) for loop in loops[:3])
    if extent_j % PANEL:
        raise NotApplicable("channels not padded to the 16-channel panel")
    if cpu.bf16_dot == "amx" and isa != "avx512bf16" and extent_i % 16 == 0 and (2 * half) % AMX_K == 0:
        step = _tile_amx(sch, block, loops, _amx_grid(extent_i, extent_j, half, rows, cols))
    elif isa == "amx":
        raise NotApplicable("AMX tiles need rows in multiples of 16 and K in multiples of 32")
    else:
        dot = Bf16Dot(rows) if rows else next(Bf16Dot(r) for r in ROWS if extent_i % r == 0)
        panels = cols or _panels(extent_j, dot, cpu)
        if extent_i % dot.rows or extent_j % (panels * PANEL):
            raise NotApplicable(f"{dot.rows} rows x {panels} panels do not divide {extent_i} x {extent_j}")
        if (rows or cols) and dot.rows * panels + panels + 1 > cpu.registers:
            raise NotApplicable(f"{dot.rows} rows x {panels} panels need more than {cpu.registers} vector registers")
        step = _tile_avx512(sch, block, loops, dot, panels)
    return "; ".join([step] + schedule_conv_packing(sch))  # a convolution's im2col: its own schedule


def _amx_grid(extent_i: int, extent_j: int, half: int, rows: int, cols: int) -> AmxBf16:
    """The AMX call: the rule's 2 x 2 tiles where the rows and channels divide (else 1 x 1), or
    ``rows`` x ``cols`` tiles (each 1 or 2: eight tile registers hold C, A and B)."""
    grid = 2 if extent_i % 32 == 0 and extent_j % (2 * PANEL) == 0 else 1
    mt, nt = rows or grid, cols or grid
    if not {mt, nt} <= {1, 2} or extent_i % (16 * mt) or extent_j % (PANEL * nt):
        raise NotApplicable(f"{mt} x {nt} AMX tiles do not divide {extent_i} x {extent_j}")
    return AmxBf16(2 * half, mt, nt, zero=True)


def _tile_avx512(sch: s_tir.Schedule, block, loops, dot: Bf16Dot, panels: int) -> str:
    i, j, k2, kk = loops
    name = sch.get(block).name_hint
    j_o, j_p, j_i = sch.split(j, [None, panels, PANEL])
    i_o, i_i = sch.split(i, [None, dot.rows])
    sch.reorder(j_o, i_o, k2, j_p, i_i, j_i, kk)
    if panels > 1:
        sch.unroll(j_p)
    tile = sch.blockize(j_i if dot.rows == 1 else i_i)  # one row: its unit loop stays outside the call
    outer = sch.fuse(j_o, i_o)
    sch.parallel(outer)
    sch.decompose_reduction(tile, k2)
    sch.tensorize(tile, register(dot))
    sch.annotate(outer, IMPORT_PRAGMA, dot.llvm_ir)
    return (f"{name}: {dot.name} (vdpbf16ps, {dot.rows} rows x {panels} panel{'s' if panels > 1 else ''} of "
            f"{PANEL} channels, fp32 accumulation), parallel outside")


def _tile_amx(sch: s_tir.Schedule, block, loops, dot: AmxBf16) -> str:
    i, j, k2, kk = loops
    name = sch.get(block).name_hint
    i_o, i_i = sch.split(i, [None, dot.rows])
    j_o, j_i = sch.split(j, [None, dot.cols])
    sch.reorder(j_o, i_o, i_i, j_i, k2, kk)
    # a product's epilogue (bias, residual, activation) finishes each tile right after its call, while
    # the tile's sums are in cache (then one tile's buffer, not the whole output's; not a convolution's
    # im2col output, which its copy back to NCHW reads)
    epilogue = epilogue_per_tile(sch, block, i_o) if name.startswith("dense_bf16") else None
    tile = sch.blockize(j_i if dot.rows == 1 else i_i)  # one row: its unit loop stays outside the call
    outer = sch.fuse(j_o, i_o)
    sch.parallel(outer)
    # with its init (not decomposed): the call sums from tilezero, no zeros loaded back from memory
    # (TVM keeps the init as a memset of the tile before the call; a state edit could drop it, as the
    # direct convolution does, but a replayed trace would not)
    sch.tensorize(tile, register(dot))
    sch.annotate(sch.get_loops(tile)[0], IMPORT_PRAGMA, dot.llvm_ir)
    if epilogue is not None:
        try:
            sch.vectorize(sch.get_loops(epilogue)[-1])
        except s_tir.ScheduleError:
            pass  # a loop TVM does not vectorize: LLVM's to do
    return (f"{name}: {dot.name} (AMX tdpbf16ps, {dot.mt} x {dot.nt} tiles of 16 x 16 over K={dot.k}, "
            "fp32 accumulation, from tilezero), parallel outside"
            + (", epilogue per tile" if epilogue is not None else ""))


__all__ = ["IMPORT_PRAGMA", "bf16_block", "tile_bf16"]
