"""The default for a reduction with a vector axis (conv2d in any layout, depthwise conv, matmul,
dense, pooling, mean): a register tile like MultiLevelTiling's innermost level.

The output is cut into ``rows x vec`` tiles (``vec`` a multiple of the vector lanes on the
output's innermost axis, ``rows`` on the axis the other operand varies with) that accumulate in
vector registers over all the reduction loops, within the target's register budget; the epilogue
is applied as a tile is written back, and the loops above the tiles are one parallel loop. Rows
whole tiles leave over get a tail tile of their own; rows too short for whole tiles run over two
output axes as one; large weights are packed into panels; a grouped convolution whose groups no
whole number of vectors fills is tiled group by group (:mod:`.groups`). Why each choice, with the
measurements behind it and what was tried and left out: ``docs/notes/default-tiling.md``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import tvm
from tvm import s_tir
from tvm.tirx import IndexMap

from explorer.schedule.defaults.analysis import (
    PARALLEL_MIN_MACS, PARALLEL_MIN_VOLUME, BlockFacts, NotApplicable, block_facts, covers_its_producers,
)
from explorer.schedule.defaults.groups import partitioned_tiles, ragged_group_width, tile_ragged_groups
from explorer.schedule.defaults.layouts import (accumulate_along_vectors, few_channels_pixel_axis, gathered_operands,
                                                innermost_output_axis, is_weight, relayout)
from explorer.schedule.defaults.machine import CpuSpec, dtype_bits
from explorer.schedule.defaults.simple import safe_schedule, schedule_plain
from explorer.ir.tir_walk import LAYOUT_REWRITE_PREPROC

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

# Vectors a core brings from L2 per cycle, sustained: 64 bytes a cycle is the peak on Skylake-X and
# Zen 4, about 3/4 of it under FMA load. At the peak a 2-row tile whose weights stream from L2
# (1 vector per 2 multiply-adds) costs as little as the FMA bound and tied with 7-row tiles;
# measured 1.35x slower (ResNeSt's 14x14 grouped 3x3 conv, 2x128 11.0 ms against 7x32 8.2).
L2_VECTORS_PER_CYCLE = 0.75

# Bytes of weights a single-row tile (a matrix-vector product) reads per reduction step when they
# stream from memory: wider steps ran slower on AVX-512, although each tile reads its packed panel
# front to back (AlexNet's 9216x4096 product, Zen 4, 2 cores, alone, in turns: 1x256 13.8 ms,
# 1x128 6.0, 1x64 5.2, 1x32 4.9, numpy 4.4; on AVX2 1x64 5.5, 1x32 5.3).
STREAM_STEP_BYTES = 256
# TVM keeps a "global" buffer below this size on the stack (``kMaxStackAlloca``); a larger one, or
# one in any other scope, is allocated from the runtime's workspace pool inside the parallel loop,
# once per tile: an allocate and a free call, about WORKSPACE_CYCLES together (measured on an AVX2
# Zen 3: MobileNetV2's 112x112 1x1 conv, K = 16, 4x16 tiles in "local" scope 0.93 ms, in "global"
# 0.35 ms, 62 ns per tile).
STACK_BYTES = 1024
WORKSPACE_CYCLES = 200
ALLOC_SHARE = 0.05
# Independent accumulators that keep two FMA units busy. Their latency (4 cycles on Zen 3 and
# Skylake) asks for 8, but 8 leave no slack for a late load: measured on an AVX2 Zen 3 (2 cores),
# 3x3 convs, weights packed, in turns: 6x16 tiles (12 accumulators) against 2x32 (8) 163 against 126
# GFLOPS at 48x48x64; with a tail of rows (ResNet-18's widths have no factor 3), 56x56x64 1.22x,
# 28x28x128 1.06x, 14x14x256 1.06x, and against 7x8 at 7x7x512 1.14x.
FMA_CHAINS = 12
# What a tail of rows costs per output vector besides its tiles: the output is stored, loaded and
# written back again in a pass of its own (see _tile_with_tail), often from memory. Against a short
# reduction that is more than the wider tile saves (AVX2 Zen 3: ResNet-18's 3x3 max pool 0.15 ->
# 0.23 ms; MobileNetV2's 1x1 convs over 16-32 channels at 112x112 and 56x56 1.5-2x slower; its stem,
# 3x3x3, 1.46x), against ResNet's 3x3 convs (reductions of 576 and more) it is lost in the noise.
# 32 kept whole tiles on reductions of 147-160 as well, where the tail pays: at 16, ResNet-18's
# 7x7x3 stem 1.50 -> 1.46 ms (6x16 and a 4x16 tail against 2x32), MobileNetV2's 7x7 1x1 conv over
# 160 channels 0.53 -> 0.31 ms (rows over 7x7 outputs); the models 21.31 -> 21.08 and 4.78 -> 4.60
# ms (AVX2 Zen 3, 2 cores, one process, 8 alternated rounds; 8 made ResNet's 1x1 convs slower).
TAIL_PASS_CYCLES = 16.0
# How much cheaper (by choose_tiles' model) a tile over fused outputs must be to be taken: the model
# says 5% at 56x56 and 4% at 28x28 (ResNet-18), where fusing ran 1-4% slower; 9% at 14x14x256,
# where it ran 2-7% faster, and 28% at 7x7x512 (17-20% faster).
PIXEL_GAIN = 0.07


@dataclass(frozen=True)
class Tiling:
    """Where the register tile lies: iterator positions of the vector and row axes, and tile sizes."""

    vec: int
    rows: int | None
    vec_tile: int
    row_tile: int
    # rows left over when row_tile does not divide the row axis: a tile of their own, tail_rows x
    # vec_tile (0: none)
    tail_rows: int = 0
    cycles: float = field(default=0.0, compare=False)  # modelled cycles per multiply-add
    tasks: int = field(default=0, compare=False)  # parallel tasks the tiles leave (a tail's rows run in each)

    def describe(self, facts: BlockFacts) -> str:
        lanes = f"{self.row_tile}x{self.vec_tile}"
        tail = f", the last {self.tail_rows} in {self.tail_rows}x{self.vec_tile}" if self.tail_rows else ""
        return f"register tile {lanes} ({facts.name}){tail}"


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def vector_axis(facts: BlockFacts) -> int:
    """The iterator of the output's innermost dimension that has more than one element; every
    operand that varies with it must vary along its own innermost dimension (no gathers)."""
    vec = innermost_output_axis(facts)
    if vec is None:
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


def _cycles_per_fma(rt: int, nv: int, column_bytes: int, reduction: int = 1 << 20, tile_bytes: int = 0,
                    broadcast: int = 1) -> float:
    """A register tile's cost in cycles per vector multiply-add, from a simple machine: two FMAs
    and two loads per cycle (L1), and :data:`L2_VECTORS_PER_CYCLE` from L2. A tile loads ``rt`` broadcasts
    and ``nv`` weight vectors for ``rt * nv`` multiply-adds; when its column of weights (all the
    reduction steps) does not stay in L1, every weight vector comes from L2 and serves ``rt`` rows.
    Each accumulator is a chain of dependent multiply-adds: fewer than ``FMA_CHAINS`` leave the
    FMA units waiting. A broadcast costs ``broadcast`` loads: 2 where it is an instruction of its
    own (x86 before AVX-512: tiles of many rows run slower than their load counts say).
    An accumulator of ``tile_bytes`` too large for the stack costs a workspace allocation per tile,
    spread over its ``reduction * rt * nv`` multiply-adds; counted only from ``ALLOC_SHARE`` of the
    tile's time up (short reductions: 1x1 convs over few channels on AVX-512), below which this
    model cannot tell it from noise and the load counts decide as before."""
    l1 = (broadcast * rt + nv) / (2 * rt * nv)
    l2 = 1 / (rt * L2_VECTORS_PER_CYCLE) if column_bytes > L1_BYTES else 0.0
    latency = FMA_CHAINS / (2 * rt * nv)
    cycles = max(0.5, l1, l2, latency)
    alloc = WORKSPACE_CYCLES / (reduction * rt * nv) if tile_bytes >= STACK_BYTES else 0.0
    return cycles + alloc if alloc >= ALLOC_SHARE * cycles else cycles


def choose_tiles(facts: BlockFacts, vec: int, rows: int | None, cpu: CpuSpec, tails: bool = True,
                 rank: int = 0, streams: bool = False) -> Tiling:
    """Tile sizes that fit the registers, leave one parallel task per core at least, and cost the
    fewest cycles per multiply-add (:func:`_cycles_per_fma`; a row count that does not divide the
    row axis is costed with the tile of its last rows and the pass ``TAIL_PASS_CYCLES`` stands for);
    then load the least per multiply-add (``rows * vectors / (rows + vectors)``); on a tie, more
    rows where the FMA takes the row operand as a broadcast for free (AVX-512's embedded broadcast, NEON's lane
    operand), fewer rows where each row costs a broadcast instruction of its own (x86 before
    AVX-512, :attr:`CpuSpec.broadcast_costs`; measurements: docs/notes/default-tiling.md).

    The L2 term is why ResNet-18's last 3x3 convs (7 output columns, 9.4 MB of weights) get tiles
    of several rows (5x16 on AVX2, over the 49 outputs as one axis: :func:`_pixel_rows`; 7x32 on
    AVX-512) and not 1x64: one row per tile
    read each weight from L2 for a single multiply-add.

    ``rank``: the option ranked so (0: the best by the model; 1: the next, ...), for the search
    to try where the model may be wrong (:mod:`explorer.schedule.defaults.variants`); raises
    :class:`NotApplicable` when there are not that many. ``streams``: the weights along the vector
    axis are constants, packed into panels that a single-row tile reads front to back (at most
    :data:`STREAM_STEP_BYTES` a step)."""
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
    broadcast = 2 if cpu.broadcast_costs else 1
    if rows is None and streams and reduction * item * lanes > L1_BYTES:  # one row streams its panels
        narrow = [d for d in vec_tiles if d * item <= STREAM_STEP_BYTES]
        vec_tiles = narrow or vec_tiles[:1]

    def cycles(rt: int, vt: int) -> float:
        return _cycles_per_fma(rt, math.ceil(vt / lanes), reduction * vt * item, reduction, rt * vt * item,
                               broadcast)

    # a row operand read through a border test (a grouped conv's padding, inlined) holds the padded
    # value and the test in two registers more: ResNeSt's 14x32 tiles (31 of 32 registers) kept
    # their accumulators in memory, 2.5x slower than 7x32 (2.08 against 5.22 ms)
    bordered = 2 if any(a.buffer in facts.bordered and a.uses(vec) and a.broadcast_along(vec)
                        for a in facts.reads) else 0

    def fits(rt: int, vt: int) -> bool:
        """Accumulators within the budget, and with the weight vectors that all rows share (one row
        takes them from memory) and the row's operand, within the register file. The row operand
        takes a register on every ISA: x86's broadcast (AVX-512's too: LLVM broadcasts a scalar
        that feeds several vectors into a register rather than from memory in each FMA) and
        NEON's input vector whose lanes the FMAs index. AVX-512's 7x64 tiles (28 accumulators,
        4 weight vectors and the broadcast: 33 of 32 registers) spilled and shuffled accumulators
        (104 register moves and 15 stack accesses in the FMA loop of ResNet's 3x3 conv); NEON's 7x16 as well."""
        nv = math.ceil(vt / lanes)
        held = rt * nv + (nv if rt > 1 else 0) + 1 + bordered
        return rt * nv <= budget and held <= cpu.registers

    # a tail needs the output indexed by plain iterators (its parts write one element each)
    tails_fit = tails and rows is not None and all(k is not None for k in facts.out_dims)
    for vt in vec_tiles:
        nv = math.ceil(vt / lanes)
        for rt in range(1, min(ext_r, budget // nv) + 1):
            if not fits(rt, vt):
                continue
            tail = ext_r % rt
            main_cycles = cycles(rt, vt)
            tasks = rest * (ext_v // vt) * (ext_r // rt)
            if tail:  # the rows left over: a tile of their own, as wide (a wider one would gather across panels)
                if not tails_fit:
                    continue
                main_cycles = ((ext_r - tail) * main_cycles + tail * cycles(tail, vt)) / ext_r
                main_cycles += TAIL_PASS_CYCLES / reduction
                tasks = rest * (ext_v // vt)  # the row axis runs inside each task
            enough = tasks >= min(2 * cpu.cores, rest * ext_v * ext_r)
            options.append((enough, 1 / main_cycles, not tail, rt * nv / (rt + nv), rt, vt, tail, tasks))
    if len(options) <= rank:
        raise NotApplicable("no tile fits the registers" if not options else f"only {len(options)} tiles fit")
    wide_first = cpu.broadcast_costs  # on a tie: fewer rows (one broadcast for more vectors), else more rows
    ranked = sorted(options, key=lambda o: (*o[:4], o[5], o[4]) if wide_first else o[:6], reverse=True)
    _, speed, *_, rt, vt, tail, tasks = ranked[rank]
    return Tiling(vec=vec, rows=rows, vec_tile=vt, row_tile=rt, tail_rows=tail, cycles=1 / speed, tasks=tasks)


def _weight_bytes(facts: BlockFacts, vec: int, rows: int | None) -> int:
    """Bytes of the weights: an operand indexed by the vector axis and reductions only (NHWC conv
    and matmul weights; not an NCHW conv's input, which the vector axis also indexes), from the
    extents of the iterators that index it; of a batch of weights (:func:`_batched_weight`), one
    batch's. ``rows``: the tile's row axis (:func:`row_axis`)."""
    other_spatial = {k for k in facts.spatial if k != vec and facts.extents[k] > 1}
    sizes = [math.prod(facts.extents[k] for k in set().union(*a.dims) - other_spatial) for a in facts.reads
             if a.uses(vec) and (not any(a.uses(k) for k in other_spatial) or _batched_weight(a, rows, other_spatial))]
    return max(sizes, default=0) * dtype_bits(facts.dtype) // 8


def _reads_along_vectors(sch: s_tir.Schedule, block, facts: BlockFacts, vec: int):
    """``(index, access, buffer, constant)`` of each operand whose innermost index is the vector
    axis alone: the ones a register tile reads as vectors, and that :func:`_pack_weights` may pack.
    ``constant``: the graph passes it as a weight (packed at build time, streamed from memory by a
    single-row tile, see :func:`choose_tiles`)."""
    regions = sch.get(block).reads
    for i, access in enumerate(facts.reads):
        if access.last == frozenset({vec}):
            source = regions[i].source
            yield i, access, source, is_weight(sch, source) or _weight_padding(sch, block, source) is not None


def _into_panels(sch: s_tir.Schedule, copies: list, packed) -> list:
    """Inline each copy whose only reader is the panels' copy ``packed``, so the operand is copied
    once, straight into its panels, not first into a transposed copy (a serial loop) and then
    again; returns the copies left."""
    left = []
    for copy in copies:
        readers = sch.get_consumers(copy)
        if len(readers) == 1 and sch.get(readers[0]).same_as(sch.get(packed)):
            sch.compute_inline(copy)
        else:
            left.append(copy)
    return left


def _weight_padding(sch: s_tir.Schedule, block, buffer):
    """The block that writes ``buffer`` as a constant weight padded to whole vectors
    (:func:`_pad_vector_axis`: the export computes it once, at build time), else None."""
    for producer in sch.get_producers(block):
        stmt = sch.get(producer)
        if stmt.name_hint.endswith("_pad") and len(stmt.writes) == 1 and stmt.writes[0].source.same_as(buffer) \
                and len(stmt.reads) == 1 and is_weight(sch, stmt.reads[0].source):
            return producer
    return None


def _pack_weights(sch: s_tir.Schedule, block, facts: BlockFacts, vec: int, rows: int | None, vec_tile: int):
    """Copy a weights operand into panels ``vec_tile`` wide (``W[..., j]`` -> ``P[j // vec_tile,
    ..., j % vec_tile]``), so that the rows a register tile walks down are contiguous; returns the
    packing block or None.

    A weight the graph passes as a constant (``schedx.weight_buffers``) is packed whenever its rows are wider
    than the tile: the copy is marked as a layout rewrite and computed once, at build time. Others
    (a product of two activations) are copied on every call, so only when output rows share them
    and their rows are a multiple of 1 KB apart: those all fall into the same few cache sets, the tile's column of
    weights never stays in cache and every multiply-add waits on memory (measurements:
    docs/notes/default-tiling.md)."""
    other = {k for k in facts.spatial if k != vec and facts.extents[k] > 1}
    for i, access, buffer, free in _reads_along_vectors(sch, block, facts, vec):
        if len(access.dims) < 2:
            continue
        if any(access.uses(k) for k in other) and not (free and _batched_weight(access, rows, other)):
            continue
        shape, item = [int(x) for x in buffer.shape], dtype_bits(buffer.dtype) // 8
        # a copy made on every call pays only where tiles reuse it: rows of outputs that share it
        # (a global average pool reads each input once: copying 1x7x7x1280 first took it 0.005 -> 0.063 ms)
        conflicts = shape[-1] * item % 1024 == 0 and bool(other)
        if shape[-1] % vec_tile or shape[-1] == vec_tile or not (free or conflicts) \
                or math.prod(shape) * item < PACK_MIN_BYTES:
            continue
        padding = _weight_padding(sch, block, buffer)
        packed = sch.cache_read(block, i, "global")
        if padding is not None:  # the panels read the weight itself, zeros past its end
            sch.compute_inline(padding)
        sch.transform_layout(packed, ("write", 0), lambda *idx: (idx[-1] // vec_tile, *idx[:-1], idx[-1] % vec_tile))
        if free:
            sch.annotate(packed, LAYOUT_REWRITE_PREPROC, True)
        return packed
    return None


def _batched_weight(access, rows: int | None, other: set[int]) -> bool:
    """Whether a weight that varies with output axes besides the vector axis does so only as a
    batch of weights: leading dimensions each indexed by one such axis alone, never by the tile's
    rows (Winograd's products, ``[36, C_in, C_out]``: one weight matrix per point of the tile).
    A register tile stays inside one batch, so each batch packs into panels of its own."""
    spatial_dims = [dim for dim in access.dims if dim & other]
    return rows not in set().union(*access.dims) and all(
        len(dim) == 1 for dim in spatial_dims) and list(access.dims[:len(spatial_dims)]) == spatial_dims


def tile_reduction(sch: s_tir.Schedule, block, cpu: CpuSpec, tails: bool = True, pixels: bool = True,
                   rank: int = 0) -> str:
    """Schedule ``block`` (a reduction) with a register tile and its epilogue; returns a description.
    ``tails``: whether a row tile may leave rows over for a tile of their own; ``rank``: which
    tile by :func:`choose_tiles`' ranking (0: its best).

    Raises :class:`NotApplicable` before changing anything when the block does not fit."""
    facts = block_facts(sch, block)
    if facts.is_spatial or not facts.loops_match or not facts.out_dims:
        raise NotApplicable("not a reduction under its own loops")
    vec, relaid = few_channels_pixel_axis(facts, cpu.lanes(facts.dtype)), []
    moves = gathered_operands(sch, block, facts, vec)
    if moves is None:  # channels fill the vectors (or their pixels cannot be read as vectors)
        try:
            vec = vector_axis(facts)
        except NotApplicable:  # a gather from a copy the kernel writes itself: lay the copy out for the vectors
            vec = innermost_output_axis(facts)
            moves = gathered_operands(sch, block, facts, vec)
            if not moves:
                raise
    if moves:
        relaid = relayout(sch, block, facts, moves)
        facts = block_facts(sch, block)
    width = ragged_group_width(facts, vec, row_axis(facts, vec), cpu)
    if width is not None:
        consumers = sch.get_consumers(block)
        writeback = sch.cache_write(block, 0, "global")
        for consumer in consumers:
            fold_into_producer(sch, consumer)
        return tile_ragged_groups(sch, block, writeback, facts, vec, row_axis(facts, vec), width, cpu)
    pad_note, pads, copies = "", [], []
    if _pad_vector_axis(sch, block, facts, vec, cpu):
        pad_note = f", {facts.extents[vec]} outputs padded to whole vectors"
        facts = block_facts(sch, block)
        # the padded operands' copies, and the copy back into the output (the epilogue joins that one:
        # inlined into the write-back it would write past the output's end)
        pads = [p for p in sch.get_producers(block) if sch.get(p).name_hint.endswith("_pad")]
        copies = sch.get_consumers(block)
    rows = row_axis(facts, vec)
    # constant weights along the vectors (packed into panels below)
    streams = any(constant for *_, constant in _reads_along_vectors(sch, block, facts, vec))
    tiling = choose_tiles(facts, vec, rows, cpu, tails, rank, streams)
    fused = _pixel_rows(facts, vec, rows, tiling, cpu, tails, rank) if pixels else None
    outer_rows = None
    if fused is not None:  # the tile sizes the fused rows want (the panels follow them)
        outer_rows, tiling = fused

    consumers = [] if copies else sch.get_consumers(block)
    packed = _pack_weights(sch, block, facts, vec, rows, tiling.vec_tile)
    if packed is not None and pads:  # a weight's padding may have joined its panels
        pads = [p for p in sch.get_producers(block) if sch.get(p).name_hint.endswith("_pad")]
    if packed is not None and relaid:  # an operand laid out for the vectors, then packed: one copy
        relaid = _into_panels(sch, relaid, packed)
    writeback = sch.cache_write(block, 0, "global")  # per tile: on the stack, not the workspace (STACK_BYTES)
    accumulate_along_vectors(sch, block, facts, vec)
    for consumer in consumers:  # the epilogue joins the write-back when it is elementwise
        fold_into_producer(sch, consumer)
    fused_note = ""
    if outer_rows is not None:
        fused_note = f", rows over {facts.extents[outer_rows]}x{facts.extents[rows]} outputs as one axis"
        facts = _fuse_rows(sch, block, facts, outer_rows, rows)
        # the sizes planned (the panels are packed for them); the axes' positions after the fusion
        vec = vector_axis(facts)
        rows = row_axis(facts, vec)
        tiling = replace(tiling, vec=vec, rows=rows)

    column_first = _weight_bytes(facts, vec, rows) > CACHE_BYTES  # each tile column's weights read once, for all the rows
    parallel = facts.volume >= PARALLEL_MIN_MACS
    if tiling.tail_rows:
        _tile_with_tail(sch, block, writeback, facts, tiling, column_first, parallel, cpu)
    else:
        loops = dict(enumerate(sch.get_loops(block)))
        _register_tile(sch, block, writeback, loops, facts, vec, rows, tiling.row_tile, tiling.vec_tile,
                       column_first, parallel)
    for copy in copies:
        for consumer in sch.get_consumers(copy):
            fold_into_producer(sch, consumer)
        safe_schedule(sch, copy, cpu)  # by rows: fused, its vectors would gather across the padded rows
    for pad in pads:
        safe_schedule(sch, pad, cpu)
    for copy in relaid:  # each tile's part of the copy, written just before the tile reads it (in cache)
        try:
            sch.compute_at(copy, sch.get_loops(block)[0])
        except s_tir.ScheduleError:
            pass  # the whole copy first, at the root (the caller schedules it with the other blocks)
    if packed is not None:
        pack_loops = sch.get_loops(packed)
        sch.parallel(pack_loops[0])
        _, lane = sch.split(pack_loops[-1], [None, tiling.vec_tile])  # one panel row: contiguous both ways
        sch.vectorize(lane)
    return (tiling.describe(facts) + fused_note + pad_note
            + (", weights packed in panels" if packed is not None else "")
            + (f", {len(relaid)} input(s) copied with the vector axis innermost, tile by tile" if relaid else ""))


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


def _pad_vector_axis(sch: s_tir.Schedule, block, facts: BlockFacts, vec: int, cpu: CpuSpec) -> bool:
    """Pad the vector axis to whole vectors when no multiple of the lanes divides it (attention's
    49 or 197 tokens, GPT-2's 1000-word logits over 32 tokens): the einsum reads zeros past the end (one
    padded copy of the operand the vector axis indexes) and computes into a padded output copied
    back. Unpadded, such a block got a scalar register tile. False (nothing changed) when the axis
    already divides, is shorter than a vector, or
    has fewer than 4 rows to share a padded copy made on every call (a matrix-vector product by
    activations would copy its whole matrix per call: it reads half vectors instead, see
    :func:`choose_tiles`), or the block is not an einsum TVM can pad. A matrix-vector product by
    constant weights that no multiple of half a vector divides is padded all the same: the export
    pads the weights once, at build time, into their panels (:func:`_pack_weights`): unpadded, a
    classifier head of a prime number of classes runs in scalars. 1000 classes keep their unpadded
    40-wide tiles (a padded 16-wide one has a single accumulator). Measurements:
    docs/notes/default-tiling.md."""
    lanes = cpu.lanes(facts.dtype)
    ext = facts.extents[vec]
    if lanes <= 1 or ext % lanes == 0 or ext < lanes:
        return False
    rows = row_axis(facts, vec)
    if rows is None or facts.extents[rows] < 4:
        if any(ext % d == 0 for d in range(max(1, lanes // 2), 4 * lanes + 1, max(1, lanes // 2))):
            return False  # half vectors divide it (see choose_tiles)
        regions = sch.get(block).reads
        along = [i for i, a in enumerate(facts.reads) if a.uses(vec)]
        if not along or not all(is_weight(sch, regions[i].source) for i in along):
            return False
    padding = [1] * len(facts.extents)
    padding[vec] = lanes
    try:
        sch.pad_einsum(block, padding)
    except s_tir.ScheduleError:
        return False
    return True


def _pixel_rows(facts: BlockFacts, vec: int, rows: int | None, tiling: Tiling, cpu: CpuSpec,
                tails: bool, rank: int = 0) -> tuple[int, Tiling] | None:
    """The output axis just outside the rows (a conv's output height, when rows are its width)
    and the tiles over both as one axis of pixels, when a tile should run so; else None.

    A row axis as short as ResNet's last convs' 7 columns leaves AVX2 a 5x16 tile and a 2x16
    tail, whose 4 accumulators wait on the FMA latency and read each weight vector from L2 for two
    multiply-adds; over 7x7 = 49 pixels the tiles are 5x16 and one 4x16 tail (ResNet-18's 7x7x512
    3x3 conv: 0.86 -> 0.62 modelled cycles per multiply-add). Both axes must index the output side
    by side and every operand alike (an operand that one of them indexes and not the other would
    change under a tile: a batched matmul's weights); taken when it costs at least
    ``PIXEL_GAIN`` less by :func:`choose_tiles`'s model (which does not see that each tile column
    then streams the whole input: the margin covers that) and leaves two tasks per core at least;
    only with a tail, whose parts write back in
    a pass of their own (whole tiles computing the write-back at each tile gave wrong values)."""
    if rows is None or not tails or not tiling.tail_rows or any(k is None for k in facts.out_dims):
        return None
    at = facts.out_dims.index(rows)
    outer = facts.out_dims[at - 1] if at > 0 else None
    if outer is None or outer == vec or facts.reduction[outer] or facts.extents[outer] < 2:
        return None
    if any(a.uses(outer) != a.uses(rows) for a in facts.reads):
        return None
    try:
        fused = choose_tiles(_fused_facts(facts, outer, rows), vec, rows, cpu, tails, rank)
    except NotApplicable:  # fewer tiles over the fused rows than ``rank``
        return None
    if fused.tasks < 2 * cpu.cores or fused.cycles > tiling.cycles * (1 - PIXEL_GAIN):
        return None
    if not fused.tail_rows:  # whole tiles write back under their own loop, where TVM 0.27 covers a tile
        return None          # that crosses output rows wrongly (42 = 6x7 outputs: wrong values)
    return outer, fused


def _fused_facts(facts: BlockFacts, outer: int, rows: int) -> BlockFacts:
    """``facts`` as :func:`choose_tiles` sees them with ``outer`` and ``rows`` run as one axis."""
    extents = list(facts.extents)
    extents[rows], extents[outer] = extents[rows] * extents[outer], 1
    return replace(facts, extents=tuple(extents))


def _fuse_rows(sch: s_tir.Schedule, block, facts: BlockFacts, outer: int, rows: int) -> BlockFacts:
    """Run ``block`` over ``outer`` and ``rows`` as one iterator (``outer * rows_extent + rows``),
    and store its output (the write-back's buffer, already cached) with the two dimensions as one;
    the block's own indices of its inputs become ``p // W`` and ``p % W``. Returns the new facts."""
    width = facts.extents[rows]
    at = facts.out_dims.index(rows)
    dtype = str(sch.get(block).iter_vars[0].var.ty)
    sch.transform_layout(block, ("write", 0), IndexMap.from_func(
        lambda *i: (*i[:at - 1], i[at - 1] * width + i[at], *i[at + 1:]), ndim=len(facts.out_dims),
        index_dtype=dtype))
    sch.transform_block_layout(block, IndexMap.from_func(
        lambda *v: tuple(v[outer] * width + v[rows] if k == outer else v[k] for k in range(len(v)) if k != rows),
        ndim=len(facts.extents), index_dtype=dtype))
    return block_facts(sch, block)


def _register_tile(sch: s_tir.Schedule, block, stage, loops: dict, facts: BlockFacts, vec: int, rows: int | None,
                   row_tile: int, vec_tile: int, column_first: bool, parallel: bool) -> None:
    """Loops ``[outer tiles: fused, parallel] [reduction] [rows: unrolled] [vec: vectorized]`` for
    ``block`` (``loops``: its loop per iterator), with ``stage`` (the tile's write-back, epilogue
    included) computed per tile."""
    v_out, v_in = sch.split(loops[vec], [None, vec_tile])
    inner = [v_in]
    outer_of = {vec: v_out}
    if rows is not None:
        r_out, r_in = sch.split(loops[rows], [None, row_tile])
        inner.insert(0, r_in)
        outer_of[rows] = r_out
    outer = [outer_of.get(k, loops[k]) for k in facts.spatial]
    if column_first:
        outer.remove(v_out)
        outer.insert(0, v_out)
    reduce = [loops[k] for k in facts.reduce]
    sch.reorder(*outer, *reduce, *inner)
    sch.reverse_compute_at(stage, outer[-1])
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if parallel:
        sch.parallel(fused)
    sch.vectorize(inner[-1])
    if len(inner) > 1 and row_tile > 1:
        sch.unroll(inner[0])
    stage_loops = sch.get_loops(stage)
    if len(stage_loops) > 1:
        sch.vectorize(stage_loops[-1])
    sch.decompose_reduction(block, reduce[0])


def _tile_with_tail(sch: s_tir.Schedule, block, writeback, facts: BlockFacts, tiling: Tiling,
                    column_first: bool, parallel: bool, cpu: CpuSpec) -> None:
    """A row axis that the row tile does not divide (ResNet's 56, 28, 14 and 7 output columns
    against 6-row tiles). The loops above one row of tiles are fused (and run in parallel: tile
    columns first when the weights are large, so that a column's weights stay in cache for all
    its rows); under them the row loop is cut in two (``loop_partition``): the rows that whole
    tiles cover, and the rest in a tile of their own. Each part accumulates in its own register
    tile, into the block's output buffer, which is then written back once with the epilogue as a
    parallel vectorized pass (the parts sit in block scopes of their own, where the write-back
    cannot follow them)."""
    rows, vec = tiling.rows, tiling.vec
    loops = sch.get_loops(block)
    v_out, v_in = sch.split(loops[vec], [None, tiling.vec_tile])
    outer = [v_out if k == vec else loops[k] for k in facts.spatial if k != rows]
    if column_first:
        outer.remove(v_out)
        outer.insert(0, v_out)
    reduce = [loops[k] for k in facts.reduce]
    sch.reorder(*outer, loops[rows], v_in, *reduce)
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if parallel:
        sch.parallel(fused)
    parts = partitioned_tiles(sch, loops[rows], [facts.extents[rows] - tiling.tail_rows, None], facts)
    for (part, tile), rt in zip(parts, (tiling.row_tile, tiling.tail_rows)):
        row_loop, lanes, *part_reduce = sch.get_loops(part)  # the part's scope holds these loops only
        if rt < sch.get(row_loop).extent.value:
            r_out, r_in = sch.split(row_loop, [None, rt])
            sch.reorder(*part_reduce, r_in, lanes)
            sch.reverse_compute_at(tile, r_out)
        else:  # one tile (the tail; or whole tiles that are one): its write-back is already in place
            r_in = row_loop
            sch.reorder(*part_reduce, r_in, lanes)
        sch.vectorize(lanes)
        if rt > 1:
            sch.unroll(r_in)
        tile_loops = sch.get_loops(tile)
        sch.vectorize(tile_loops[-1])
        sch.decompose_reduction(part, part_reduce[0])
    schedule_plain(sch, writeback, cpu)


__all__ = [
    "PARALLEL_MIN_VOLUME",
    "NotApplicable",
    "Tiling",
    "choose_tiles",
    "fold_into_producer",
    "row_axis",
    "tile_reduction",
    "vector_axis",
]
