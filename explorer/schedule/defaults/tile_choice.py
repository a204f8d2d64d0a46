"""Where a register tile lies and how large it is: the vector and row axes of a reduction, and the
tile sizes that fit the registers at the lowest modelled cost (:mod:`.tile_cost`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from explorer.schedule.defaults.analysis import BlockFacts, NotApplicable
from explorer.schedule.defaults.layouts import innermost_output_axis
from explorer.schedule.defaults.machine import CpuSpec, dtype_bits
from explorer.schedule.defaults.tile_cost import L1_BYTES, TAIL_PASS_CYCLES, cycles_per_fma

# Bytes of weights a single-row tile (a matrix-vector product) reads per reduction step when they
# stream from memory: wider steps ran slower on AVX-512, although each tile reads its packed panel
# front to back (AlexNet's 9216x4096 product, Zen 4, 2 cores, alone, in turns: 1x256 13.8 ms,
# 1x128 6.0, 1x64 5.2, 1x32 4.9, numpy 4.4; on AVX2 1x64 5.5, 1x32 5.3).
STREAM_STEP_BYTES = 256


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
    taps_unrolled: bool = False  # the reduction loops unrolled too (a depthwise conv's taps: .depthwise)

    def describe(self, facts: BlockFacts) -> str:
        lanes = f"{self.row_tile}x{self.vec_tile}"
        tail = f", the last {self.tail_rows} in {self.tail_rows}x{self.vec_tile}" if self.tail_rows else ""
        taps = ", taps unrolled" if self.taps_unrolled else ""
        return f"register tile {lanes} ({facts.name}){tail}{taps}"


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


def fits(facts: BlockFacts, vec: int, cpu: CpuSpec, row_tile: int, vec_tile: int) -> bool:
    """Whether a ``row_tile x vec_tile`` tile of ``facts``' block fits the registers: its accumulators
    within :attr:`CpuSpec.accumulators`, and with the weight vectors that all rows share (one row
    takes them from memory) and the row's operand, within the register file. The row operand
    takes a register on every ISA: x86's broadcast (AVX-512's too: LLVM broadcasts a scalar
    that feeds several vectors into a register rather than from memory in each FMA) and
    NEON's input vector whose lanes the FMAs index. AVX-512's 7x64 tiles (28 accumulators,
    4 weight vectors and the broadcast: 33 of 32 registers) spilled and shuffled accumulators
    (104 register moves and 15 stack accesses in the FMA loop of ResNet's 3x3 conv); NEON's 7x16 as well.

    A row operand read through a border test (a grouped conv's padding, inlined) holds the padded
    value and the test in two registers more: ResNeSt's 14x32 tiles (31 of 32 registers) kept
    their accumulators in memory, 2.5x slower than 7x32 (2.08 against 5.22 ms)."""
    nv = math.ceil(vec_tile / cpu.lanes(facts.dtype))
    bordered = 2 if any(a.buffer in facts.bordered and a.uses(vec) and a.broadcast_along(vec)
                        for a in facts.reads) else 0
    held = row_tile * nv + (nv if row_tile > 1 else 0) + 1 + bordered
    return row_tile * nv <= cpu.accumulators and held <= cpu.registers


def choose_tiles(facts: BlockFacts, vec: int, rows: int | None, cpu: CpuSpec, tails: bool = True,
                 rank: int = 0, streams: bool = False) -> Tiling:
    """Tile sizes that fit the registers, leave one parallel task per core at least, and cost the
    fewest cycles per multiply-add (:func:`.tile_cost.cycles_per_fma`; a row count that does not divide the
    row axis is costed with the tile of its last rows and the pass ``TAIL_PASS_CYCLES`` stands for);
    then load the least per multiply-add (``rows * vectors / (rows + vectors)``); on a tie, more
    rows where the FMA takes the row operand as a broadcast for free (AVX-512's embedded broadcast, NEON's lane
    operand), fewer rows where each row costs a broadcast instruction of its own (x86 before
    AVX-512, :attr:`CpuSpec.broadcast_costs`; measurements: docs/notes/default-tiling.md).

    The L2 term is why ResNet-18's last 3x3 convs (7 output columns, 9.4 MB of weights) get tiles
    of several rows (5x16 on AVX2, over the 49 outputs as one axis: :func:`.pixel_rows.pixel_rows`; 7x32 on
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
        return cycles_per_fma(rt, math.ceil(vt / lanes), reduction * vt * item, reduction, rt * vt * item,
                              broadcast)

    # a tail needs the output indexed by plain iterators (its parts write one element each)
    tails_fit = tails and rows is not None and all(k is not None for k in facts.out_dims)
    for vt in vec_tiles:
        nv = math.ceil(vt / lanes)
        for rt in range(1, min(ext_r, budget // nv) + 1):
            if not fits(facts, vec, cpu, rt, vt):
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


__all__ = ["STREAM_STEP_BYTES", "Tiling", "choose_tiles", "fits", "row_axis", "vector_axis"]
