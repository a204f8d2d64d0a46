"""The default for a reduction with a vector axis (conv2d in any layout, depthwise conv, matmul,
dense, pooling, mean): a register tile like MultiLevelTiling's innermost level.

The block's output is cut into tiles of ``rows x vec`` elements: ``vec`` (a multiple of the
target's vector lanes) on the output's innermost axis, ``rows`` on the axis that the other operand
varies with (the outer product of a micro-kernel: conv NHWC rows = output width, vec = output
channels; matmul rows = M, vec = N). A tile accumulates in a small buffer that LLVM keeps in
vector registers (``rows * vec / lanes`` of them, within the target's register budget), over all
the reduction loops. Its scope is "global", as in MetaSchedule's CPU tiling, so that it sits on
the stack: TVM allocates a "local" buffer, or a "global" one of ``STACK_BYTES`` or more (AVX-512's
widest tiles), from the workspace pool, once per tile. The epilogue (bias, activation, residual
add) is applied when the tile is written back, so the fused kernel reads and writes each element
once. The loops above the tiles are fused into one parallel loop.

Loop order per tile: ``[outer tiles: parallel] [reduction loops] [rows: unrolled] [vec: vectorized]``;
the outer tiles go along the rows first, or along the vector axis first when the weights are
larger than a cache (see ``CACHE_BYTES``); weights whose rows share cache sets are packed into
panels first (``_pack_weights``).

A convolution's padding stays a block of its own, computed once per call before the tiles (fused,
vectorized and parallel by :mod:`.simple`): inlined into the reduction it cost 2.5x on ResNet-18's
56x56x64 3x3 conv (one AVX-512 core: 42 against 105-110 GFLOPS), and computed per tile (each tile
padding the window it reads) it was done again for every tile column. Measured on an AVX2 Zen 3,
2 cores, default ResNet-18 conv kernels, per call: 7x7 stem 2.92 -> 1.69 ms, 56x56x64 2.66 -> 2.45,
14x14x256 3.55 -> 3.16, 7x7x512 3.13 -> 2.45, stride-2 into 7x7x512 1.73 -> 1.19; the model
46.6 -> 37.5 ms in one run, and its build 16 -> 7 s (see :mod:`.inline` for when the padding is
inlined instead: depthwise convs and pools).

Tried and left out: walking a large tile column's weights in chunks of the reduction that stay in
cache while every row goes by (the column's accumulators in a local buffer). ResNet-18's last 3x3
conv ran 6.2-6.5 -> 4.3-4.7 ms on AVX2, but LLVM no longer kept the accumulators in registers
(4x the vector moves) and took 4 s to compile that kernel (ResNet-18's export 16 -> 26 s). It needs
a register tile accumulated into the column buffer once per chunk instead."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import s_tir

from explorer.schedule.defaults.analysis import BlockFacts, block_facts
from explorer.schedule.defaults.machine import CpuSpec, dtype_bits
from explorer.tir_walk import LAYOUT_REWRITE_PREPROC, weight_positions

# Below this many iterations a parallel loop costs more (thread wake-up) than it saves.
PARALLEL_MIN_VOLUME = 1 << 15
# Weights larger than this (a typical L2) are walked one tile column at a time, for all the rows
# (ResNet-18's last 3x3 conv: 9.4 MB of weights were read again for each of its 7 output rows);
# smaller ones stay in cache while the rows go by, and the input is read once.
CACHE_BYTES = 512 * 1024
# Weights smaller than this stay where they are: their rows fit the cache whatever their stride.
PACK_MIN_BYTES = 64 * 1024
# A core's L1 data cache, the smallest common size (32 KB: Haswell to Skylake, Zen 1-4; 48 KB on
# Ice Lake and later and Zen 5, more on Apple's cores): a tile whose column of weights is larger
# reads them from L2 (see _cycles_per_fma).
L1_BYTES = 32 * 1024
# TVM keeps a "global" buffer below this size on the stack (``kMaxStackAlloca``); a larger one, or
# one in any other scope, is allocated from the runtime's workspace pool inside the parallel loop,
# once per tile: an allocate and a free call, about WORKSPACE_CYCLES together (measured on an AVX2
# Zen 3: MobileNetV2's 112x112 1x1 conv, K = 16, 4x16 tiles in "local" scope 0.93 ms, in "global"
# 0.35 ms, 62 ns per tile).
STACK_BYTES = 1024
WORKSPACE_CYCLES = 200
ALLOC_SHARE = 0.05


class NotApplicable(Exception):
    """The block has no shape this rule knows (the caller tries a simpler rule)."""


@dataclass(frozen=True)
class Tiling:
    """Where the register tile lies: iterator positions of the vector and row axes, and tile sizes."""

    vec: int
    rows: int | None
    vec_tile: int
    row_tile: int

    def describe(self, facts: BlockFacts) -> str:
        lanes = f"{self.row_tile}x{self.vec_tile}"
        return f"register tile {lanes} ({facts.name})"


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def vector_axis(facts: BlockFacts) -> int:
    """The iterator of the output's innermost dimension that has more than one element; every
    operand that varies with it must vary along its own innermost dimension (no gathers)."""
    for k in reversed(facts.out_dims):
        if k is not None and not facts.reduction[k] and facts.extents[k] > 1:
            vec = k
            break
    else:
        raise NotApplicable("no spatial output axis to vectorize")
    for access in facts.reads:
        if access.uses(vec) and vec not in access.last:
            raise NotApplicable(f"{access.buffer} would be gathered along the vector axis")
    return vec


def row_axis(facts: BlockFacts, vec: int) -> int | None:
    """The spatial iterator a register tile spans besides ``vec``: one that an operand independent
    of ``vec`` varies with while another operand does not (that one is loaded once for all the
    rows), innermost in the output first; else the next output dimension (an NCHW depthwise conv:
    rows over channels would share nothing)."""
    out = [k for k in facts.out_dims if k is not None and k != vec and not facts.reduction[k] and facts.extents[k] > 1]
    for k in reversed(out):
        if any(a.uses(k) and not a.uses(vec) for a in facts.reads) and any(not a.uses(k) for a in facts.reads):
            return k
    return out[-1] if out else None


def _cycles_per_fma(rt: int, nv: int, column_bytes: int, reduction: int = 1 << 20, tile_bytes: int = 0) -> float:
    """A register tile's cost in cycles per vector multiply-add, from a simple machine: two FMAs
    and two loads per cycle (L1), and one vector per cycle from L2. A tile loads ``rt`` broadcasts
    and ``nv`` weight vectors for ``rt * nv`` multiply-adds; when its column of weights (all the
    reduction steps) does not stay in L1, every weight vector comes from L2 and serves ``rt`` rows.
    An accumulator of ``tile_bytes`` too large for the stack costs a workspace allocation per tile,
    spread over its ``reduction * rt * nv`` multiply-adds; counted only from ``ALLOC_SHARE`` of the
    tile's time up (short reductions: 1x1 convs over few channels on AVX-512), below which this
    model cannot tell it from noise and the load counts decide as before."""
    l1 = (rt + nv) / (2 * rt * nv)
    l2 = 1 / rt if column_bytes > L1_BYTES else 0.0
    cycles = max(0.5, l1, l2)
    alloc = WORKSPACE_CYCLES / (reduction * rt * nv) if tile_bytes >= STACK_BYTES else 0.0
    return cycles + alloc if alloc >= ALLOC_SHARE * cycles else cycles


def choose_tiles(facts: BlockFacts, vec: int, rows: int | None, cpu: CpuSpec) -> Tiling:
    """Tile sizes that divide the axes, fit the register budget, leave one parallel task per core
    at least, and cost the fewest cycles per multiply-add (:func:`_cycles_per_fma`); then load the
    least per multiply-add (``rows * vectors / (rows + vectors)``); on a tie, more rows where the
    FMA takes the row operand as a broadcast for free (AVX-512's embedded broadcast, NEON's lane
    operand), fewer rows where each row costs a broadcast instruction of its own (x86 before
    AVX-512, :attr:`CpuSpec.broadcast_costs`): matmul 1024 on an AVX2 Zen 3, 2 cores, best of 3
    alternated rounds, 2x32 148.3 GFLOPS against 4x16 131.1 (numpy 148); ResNet-18 0.99x and
    MobileNetV2 0.92x in one A/B run. (An older measurement, before weights were packed, had 4x16
    ahead: 64.6 against 47.5.)

    The L2 term is why ResNet-18's last 3x3 convs (7 output columns, 9.4 MB of weights) get 7x8
    tiles and not 1x64: one row per tile read each weight from L2 for a single multiply-add."""
    lanes = cpu.lanes(facts.dtype)
    ext_v = facts.extents[vec]
    ext_r = facts.extents[rows] if rows is not None else 1
    budget = cpu.accumulators
    reduction = max(1, math.prod(facts.extents[k] for k in facts.reduce))
    item = dtype_bits(facts.dtype) // 8
    rest = facts.volume // reduction // (ext_v * ext_r)
    options = []
    # whole vectors, a power of two of them (LLVM shuffles 3- or 6-vector accumulators between
    # registers: MobileNetV2's 1x1 convs ran 15-30x slower with 48- and 96-wide tiles than with 16 or
    # 32; split into whole vectors they ran as fast as 16/32, not faster, and ResNet's 64-wide tiles
    # got 2x slower split, so tiles stay powers of two)
    # a tile stays within a group of a grouped conv (else its input loads are gathers)
    limit = math.gcd(ext_v, *[c for a in facts.reads for k, c in a.groups if k == vec])
    vec_tiles = [d for d in _divisors(limit) if d % lanes == 0 and _pow2(d // lanes) and d // lanes <= budget]
    if not vec_tiles and rows is None and lanes > 1:
        # a matrix-vector product (a classifier: 1000 outputs) is bound by reading its weights:
        # half vectors, up to four vectors' worth (1280x1000: 40 wide 0.10 ms, 8 wide 0.19 ms)
        vec_tiles = [d for d in _divisors(limit) if d % max(1, lanes // 2) == 0 and d <= 4 * lanes]
    if not vec_tiles:  # fewer elements than lanes, or no multiple of them: the widest power of two that divides
        vec_tiles = [max(d for d in _divisors(limit) if d <= lanes and _pow2(d))]
    for vt in vec_tiles:
        nv = math.ceil(vt / lanes)
        for rt in _divisors(ext_r):
            if rt * nv > budget:
                continue
            tasks = rest * (ext_v // vt) * (ext_r // rt)
            enough = tasks >= min(2 * cpu.cores, rest * ext_v * ext_r)
            speed = 1 / _cycles_per_fma(rt, nv, reduction * vt * item, reduction, rt * vt * item)
            options.append((enough, speed, rt * nv / (rt + nv), rt, vt))
    if not options:
        raise NotApplicable("no tile fits the registers")
    wide_first = cpu.broadcast_costs  # on a tie: fewer rows (one broadcast for more vectors), else more rows
    *_, rt, vt = max(options, key=lambda o: (*o[:3], o[4], o[3]) if wide_first else o)
    return Tiling(vec=vec, rows=rows, vec_tile=vt, row_tile=rt)


def _weight_bytes(facts: BlockFacts, vec: int) -> int:
    """Bytes of the weights: an operand indexed by the vector axis and reductions only (NHWC conv
    and matmul weights; not an NCHW conv's input, which the vector axis also indexes), from the
    extents of the iterators that index it."""
    other_spatial = {k for k in facts.spatial if k != vec and facts.extents[k] > 1}
    sizes = [math.prod(facts.extents[k] for k in set().union(*a.dims)) for a in facts.reads
             if a.uses(vec) and not any(a.uses(k) for k in other_spatial)]
    return max(sizes, default=0) * dtype_bits(facts.dtype) // 8


def _is_weight(sch: s_tir.Schedule, buffer) -> bool:
    """Whether ``buffer`` is a weight the graph passes as a constant (``schedx.weight_buffers``):
    a schedule may store it in another layout, computed once at build time."""
    func = sch.mod["main"]
    return any(func.params[i].same_as(buffer) for i in weight_positions(func))


def _pack_weights(sch: s_tir.Schedule, block, facts: BlockFacts, vec: int, vec_tile: int):
    """Copy a weights operand into panels ``vec_tile`` wide (``W[..., j]`` -> ``P[j // vec_tile,
    ..., j % vec_tile]``), so that the rows a register tile walks down are contiguous; returns the
    packing block or None.

    A weight the graph passes as a constant (``schedx.weight_buffers``) is packed whenever its rows are wider
    than the tile: the copy is marked as a layout rewrite and computed once, at build time. Others
    (a product of two activations) are copied on every call, so only when their rows are a
    multiple of 1 KB apart: those all fall into the same few cache sets, the tile's column of
    weights never stays in cache and every multiply-add waits on memory. Measured on an AVX2 Zen 3
    (2 cores): matmul 1024 49 -> 113 GFLOPS, a 1040-wide one (no conflicts) 144 without packing;
    BERT's 768x3072 products 57 -> 89."""
    other = {k for k in facts.spatial if k != vec and facts.extents[k] > 1}
    regions = sch.get(block).reads
    for i, access in enumerate(facts.reads):
        if access.last != frozenset({vec}) or len(access.dims) < 2 or any(access.uses(k) for k in other):
            continue
        buffer = regions[i].source
        shape, item = [int(x) for x in buffer.shape], dtype_bits(buffer.dtype) // 8
        free = _is_weight(sch, buffer)
        conflicts = shape[-1] * item % 1024 == 0
        if shape[-1] % vec_tile or shape[-1] == vec_tile or not (free or conflicts) \
                or math.prod(shape) * item < PACK_MIN_BYTES:
            continue
        packed = sch.cache_read(block, i, "global")
        sch.transform_layout(packed, ("write", 0), lambda *idx: (idx[-1] // vec_tile, *idx[:-1], idx[-1] % vec_tile))
        if free:
            sch.annotate(packed, LAYOUT_REWRITE_PREPROC, True)
        return packed
    return None


def tile_reduction(sch: s_tir.Schedule, block, cpu: CpuSpec) -> str:
    """Schedule ``block`` (a reduction) with a register tile and its epilogue; returns a description.

    Raises :class:`NotApplicable` before changing anything when the block does not fit."""
    facts = block_facts(sch, block)
    if facts.is_spatial or not facts.loops_match or not facts.out_dims:
        raise NotApplicable("not a reduction under its own loops")
    vec = vector_axis(facts)
    rows = row_axis(facts, vec)
    tiling = choose_tiles(facts, vec, rows, cpu)

    consumers = sch.get_consumers(block)
    packed = _pack_weights(sch, block, facts, vec, tiling.vec_tile)
    writeback = sch.cache_write(block, 0, "global")  # on the stack, not the workspace (STACK_BYTES)
    for consumer in consumers:  # the epilogue joins the write-back when it is elementwise
        try:
            sch.reverse_compute_inline(consumer)
        except s_tir.ScheduleError:
            pass

    loops = sch.get_loops(block)
    v_out, v_in = sch.split(loops[vec], [None, tiling.vec_tile])
    inner = [v_in]
    outer_of = {vec: v_out}
    if rows is not None:
        r_out, r_in = sch.split(loops[rows], [None, tiling.row_tile])
        inner.insert(0, r_in)
        outer_of[rows] = r_out
    outer = [outer_of.get(k, loops[k]) for k in facts.spatial]
    if _weight_bytes(facts, vec) > CACHE_BYTES:
        outer.remove(v_out)  # each tile column's weights read once, for all the rows
        outer.insert(0, v_out)
    reduce = [loops[k] for k in facts.reduce]
    sch.reorder(*outer, *reduce, *inner)
    sch.reverse_compute_at(writeback, outer[-1])
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if facts.volume >= PARALLEL_MIN_VOLUME:
        sch.parallel(fused)
    sch.vectorize(inner[-1])
    if len(inner) > 1 and tiling.row_tile > 1:
        sch.unroll(inner[0])
    wb_loops = sch.get_loops(writeback)
    if len(wb_loops) > 1:
        sch.vectorize(wb_loops[-1])
    if packed is not None:
        pack_loops = sch.get_loops(packed)
        sch.parallel(pack_loops[0])
        _, lane = sch.split(pack_loops[-1], [None, tiling.vec_tile])  # one panel row: contiguous both ways
        sch.vectorize(lane)
    sch.decompose_reduction(block, reduce[0])
    return tiling.describe(facts) + (", weights packed in panels" if packed is not None else "")


__all__ = [
    "PARALLEL_MIN_VOLUME",
    "NotApplicable",
    "Tiling",
    "choose_tiles",
    "row_axis",
    "tile_reduction",
    "vector_axis",
]
