"""Default schedule of an int8 kernel on AMX-INT8 tiles (:mod:`explorer.schedule.amx_int8`), where
the CPU has them and the kernel fills them: the input channels (K) a multiple of 64 (a whole tile
row per ``tdpbusd``), or few enough that a kernel row's ``kw x K`` bytes fit one tile row (a
quantized stem's 7 x 4, a 3x3 of 16 channels: :func:`explorer.schedule.amx_int8.foldable`), a
reduction (taps x K) of at least 128, at least 2M multiply-adds, and an output width (a matmul's
rows) that splits into tiles of 7-16 rows. Smaller kernels (a 3x3 stem of 3 channels, 1x1
convolutions of 64 channels, 3x3s of 32) stay on the vector instructions (:mod:`.int8`):

    parallel(n, h, w / rows, o / (16 nt)) . [rows x 16 nt over all taps and channels from zero: one AMX
                                              call, then the epilogue of that tile (vectorized)]

with the output channels outermost instead where the weights outweigh the input (ResNet's last
stages: each core then streams its share of the weights once, not once per output row). A call's
C tiles are a column of 4 x 1 where the input outweighs the weights and the row allows
(:data:`TALL_GRID`), else 2 x 2; where the weights outweigh the input and a row is one tile
(7-wide maps), one call computes every output row of its panels (:data:`ROWS_A_CALL`).
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from tvm import s_tir, tirx
from tvm.ir import TensorLoad  # what a TIR buffer load is

from explorer.schedule.amx_ir import TILE_REGISTERS
from explorer.schedule.amx_int8 import GRIDS, K_STEP, PANEL, AmxInt8, foldable, register
from explorer.schedule.defaults.analysis import NotApplicable
from explorer.schedule.defaults.epilogue import vectorize_epilogue
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.int8_dot import row_stride
from explorer.schedule.llvm_import import IMPORT_LLVM

# The cut, measured here (docs/notes/measurements.md, "AMX-INT8"): a call's fixed cost (tile config,
# C tiles loaded and stored) wants a reduction of at least two tdpbusd (1x1 convolutions of 64
# channels ran 0.5-1.05x vpdpbusd's speed), and the kernel enough work in all (a 1x1 128 -> 64 at
# 8x8 pixels: 0.64x; 3x3 64 -> 64 at 8x8, 2.4M multiply-adds: 1.24x; 3x3 layers of ResNet 3.6-7x)
MIN_REDUCTION = 128
MIN_MACS = 1 << 21
# A convolution's C tiles a column of TALL_GRID x 1 (one panel of 16 channels), not 2 x 2, where the
# pixels allow and the input outweighs the weights, as the bf16 rule's (.bf16_amx_conv.TALL_GRID):
# each B tile feeds 4 tdpbusd, the A tiles taking two registers in turn. Quantized ResNet-18, one
# thread, load 5 (its layer1-layer2 3x3 convs change): kernels' sum 3.27 -> 3.19 ms; the model in 3
# fresh processes, best of 9 rounds, 3.25/3.23/3.33 -> 3.16/3.20/3.23 ms (medians 0.97-1.01x).
# 0: 2 x 2 grids everywhere, as before.
TALL_GRID = 4
# Where the weights outweigh the input and an output row is one tile of at most ROWS_A_CALL pixels
# (ResNet's 7-wide layer4), a call computes all the output rows of a panel pair (a 2 x 2 grid over two
# rows at a time, then the last row alone: AmxInt8.out_rows), as the bf16 rule's (.bf16_amx_conv.
# ODD_ROWS_A_CALL): each B tile feeds four tdpbusd instead of two. Quantized ResNet-18's layer4 3x3
# 512 -> 512 @7, one thread, load ~5 (`schedx profile`, alternated fresh processes): 0.207-0.226 ->
# 0.171-0.179 ms each (one disturbed pair even); the model, best of 7 alternated rounds, 2.47 -> 2.32
# ms. Not for 1x1 kernels (no tap loops: the intrinsic does not match them). 0: one row a call.
ROWS_A_CALL = 7


def amx_call(sch: s_tir.Schedule, block, cpu: CpuSpec) -> AmxInt8:
    """The AMX call that computes ``block`` (a ``conv2d_nhwc_int8`` or ``dense_int8`` kernel) on
    ``cpu``; raises :class:`NotApplicable` where the CPU has no AMX-INT8, the kernel does not fill
    its tiles or its intrinsic would not match it: where this returns, :func:`tile_amx_int8` applies."""
    if not cpu.int8_amx:
        raise NotApplicable("this CPU has no AMX-INT8 tiles")
    loops = sch.get_loops(block)
    if len(loops) not in (3, 7):
        raise NotApplicable("not a conv2d_nhwc_int8 or dense_int8 block")
    if not _loads_its_inputs(sch.get(block)):
        raise NotApplicable("an input computed inside the kernel (a producer inlined into it): the tiles load "
                            "theirs from memory")
    extents = [int(sch.get(loop).extent) for loop in loops]
    rows, cols, k = (extents[2], extents[3], extents[6]) if len(loops) == 7 else (extents[0], extents[1], extents[2])
    fold = len(loops) == 7 and foldable(extents[4], extents[5], k)
    if (k % K_STEP and not fold) or cols % PANEL:
        raise NotApplicable(f"{k} input channels: AMX tiles want multiples of {K_STEP}, or a kernel row of "
                            f"at most {K_STEP} bytes")
    taps = extents[4] * extents[5] if len(loops) == 7 else 1
    if taps * k < MIN_REDUCTION or prod(extents) < MIN_MACS:
        raise NotApplicable(f"{taps * k} products a sum, {prod(extents)} in all: too little work for AMX tiles")
    grid = next(((m, mt) for m, mt in GRIDS if rows % (m * mt) == 0), None)
    if grid is None:
        raise NotApplicable(f"{rows} rows split into no tiles of 7-16 rows")
    # (1xN and Nx1 kernels too, since the tile call's description drops a tap axis of extent 1 as blockize
    # does: a 1x7 192 -> 192 over 17 rows of 16, one thread, load 0.5, 11 alternated rounds: 0.043 ms against
    # vpdpbusd's 0.213, its 7x1 0.053 against 0.220; a 17-wide row splits into no tiles and stays on vpdpbusd)
    m, mt = grid
    nt = 2 if cols % (2 * PANEL) == 0 and mt * 2 + mt + 2 <= TILE_REGISTERS else 1
    if (TALL_GRID and len(loops) == 7 and not fold and rows % (m * TALL_GRID) == 0
            and _weight_bytes(sch, block) <= _input_bytes(sch, block)):
        mt, nt = TALL_GRID, 1
    if len(loops) == 3:
        return AmxInt8(m, mt, k, nt=nt, zero=True)
    dot = AmxInt8(m, mt, k, row_stride(sch.get(block)), extents[4], extents[5], nt, fold, zero=True)
    if (ROWS_A_CALL and not fold and extents[4:6] != [1, 1] and mt == 1 and m == rows <= ROWS_A_CALL
            and 2 <= extents[1] <= ROWS_A_CALL
            and cols % (2 * PANEL) == 0 and _weight_bytes(sch, block) > _input_bytes(sch, block)):
        return replace(dot, mt=2, nt=2, out_rows=extents[1])
    return dot


def tile_amx_int8(sch: s_tir.Schedule, block, dot: AmxInt8, epilogue_at) -> str:
    """Tile ``block`` into ``dot``'s calls (see the module docstring); ``epilogue_at(sch, block,
    loop)`` moves the kernel's epilogue under the tile loop (or returns None)."""
    loops = sch.get_loops(block)
    name = sch.get(block).name_hint
    outer, row, col, reduce = (loops[:2], loops[2], loops[3], loops[4:]) if len(loops) == 7 else \
        ([], loops[0], loops[1], loops[2:])
    weights_first = _weight_bytes(sch, block) > _input_bytes(sch, block)
    col_o, col_i = sch.split(col, [None, dot.cols])
    if dot.out_rows > 1:  # whole output rows a call: the rows (h) split, not the pixels
        row_o, row_i = sch.split(outer[-1], [None, dot.out_rows])
        outer, inner = outer[:-1], [row_i, row]
    else:
        row_o, row_i = sch.split(row, [None, dot.rows])
        inner = [row_i]
    order = [col_o, *outer, row_o] if weights_first else [*outer, row_o, col_o]
    sch.reorder(*order, *inner, col_i, *reduce)
    epilogue = epilogue_at(sch, block, order[-1])
    tile = sch.blockize(row_i)
    fused = sch.fuse(*order)
    sch.parallel(fused)
    # tensorized with its init (no decompose_reduction): the call starts its sums from tilezero, and
    # no loop writes zeros first (over the whole int32 output, it was a parallel pass of its own)
    sch.tensorize(tile, register(dot))
    sch.annotate(sch.get_loops(tile)[0], IMPORT_LLVM, dot.llvm_ir)
    vectorize_epilogue(sch, epilogue)
    taps = f", {dot.kh}x{dot.kw} taps{f', each kernel row one K={dot.kstep} (kw folded)' if dot.fold else ''}" \
        if dot.kh else ""
    return (f"{name}: {dot.name} (AMX tdpbusd, {dot.mt} x {dot.nt} tiles of {dot.m} rows x {PANEL} channels "
            f"over K={dot.k}{taps}, int32 in tiles{f', {dot.out_rows} output rows a call' if dot.out_rows > 1 else ''})"
            f", parallel outside"
            f"{', epilogue per tile' if epilogue is not None else ''}")


def _loads_its_inputs(block) -> bool:
    """Whether ``block`` is ``C = C + int32(A[..]) * int32(B[..])`` with the activations ``A``
    (uint8) and weights ``B`` (int8) loaded from buffers, ``A`` at sums and multiples of the loop
    variables: what the tile loads can read. A producer inlined into it (a pad's condition, a
    reshape's divisions) is not, and the intrinsic would not match."""
    store = block.body
    if not isinstance(store, tirx.BufferStore) or not isinstance(store.value, tirx.Add):
        return False
    terms = (store.value.a, store.value.b)
    product = next((t for t in terms if not (isinstance(t, TensorLoad) and t.source.same_as(store.buffer))), None)
    if not isinstance(product, tirx.Mul):
        return False
    loads = [f.value for f in (product.a, product.b) if isinstance(f, tirx.Cast) and isinstance(f.value, TensorLoad)]
    dtypes = sorted(str(load.source.dtype) for load in loads)
    if len(loads) != 2 or dtypes != ["int8", "uint8"]:
        return False
    activations = next(load for load in loads if str(load.source.dtype) == "uint8")
    return all(_affine(index) for index in activations.indices)


def _affine(expr) -> bool:
    if isinstance(expr, (tirx.Var, tirx.IntImm)):
        return True
    return isinstance(expr, (tirx.Add, tirx.Mul)) and _affine(expr.a) and _affine(expr.b)


def _weight_bytes(sch: s_tir.Schedule, block) -> int:
    return sum(_bytes(r.source) for r in sch.get(block).reads if str(r.source.dtype) == "int8")


def _input_bytes(sch: s_tir.Schedule, block) -> int:
    return sum(_bytes(r.source) for r in sch.get(block).reads if str(r.source.dtype) == "uint8")


def _bytes(buffer) -> int:
    size = 1
    for extent in buffer.shape:
        size *= int(extent)
    return size  # (int8 and uint8: one byte each)


__all__ = ["amx_call", "tile_amx_int8"]
