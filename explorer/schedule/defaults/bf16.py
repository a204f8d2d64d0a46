"""Default schedule of a bf16 product (``dense_bf16``, :mod:`explorer.passes.bf16_dense`): tiled
around the CPU's bf16 instruction (:mod:`explorer.schedule.bf16_dot`), fp32 accumulation.

The kernel's loops are ``i, j, k2, kk`` (rows, output channels, pairs along K, the pair). Two
tilings of the same work, one weights layout (panels of 16 channels x pairs):

- AVX512-BF16: ``rows`` rows (8 where the rows divide, else 4, 2, 1) by ``panels`` x 16 channels
  (two panels where the channels allow: ``2 x rows`` accumulators in registers), the whole
  reduction between the parallel outer loops and the call, as the int8 rule does:

      parallel(i / rows, j / (panels x 16)) . k2 . panels (unrolled) . [rows x 16 x 2 vdpbf16ps]

  A product's tile of fewer rows than :data:`MIN_CHAINS` (a CNN's classifier, a decoder's GEMV at
  batch 1) would be a chain or two of dependent ``vdpbf16ps`` (2.4 ns each on one chain): it takes
  the fewest panels that give :data:`MIN_CHAINS` sums (MobileNetV2's 1 x 1280 -> 1008: 9 of its 63
  panels a task, 7 tasks), and where the channels or the cores cannot, K in interleaved partial sums
  (a factor block, its sums added up under the same parallel loop: another order of addition than
  one chain, so not bit-identical to it, within 1e-6 of the exact sum in the reviewer's sweep). Any
  product whose row tile is 1, 2 or 4 rows takes it (a classifier; a product of 197 or 77 tokens
  before the bf16 pass padded such rows to whole tiles of 8,
  :func:`~explorer.schedule.bf16_dot.padded_rows`: 0.57-0.61x alone, 1 thread). A product's
  epilogue (the padded rows' slice, bias, residual, activation) runs per tile, right after the
  tile's calls, as on AMX (not with K in partial sums: adding them up is the tile's last step):
  ViT-tiny and Swin-T at bf16 3-7% faster. Each panel is a stream of its own: the
  weights come from L3 faster in several streams than in one. MobileNetV2's classifier in the model
  (2 threads, idle rounds): one panel a task 0.065 -> 0.046 ms (another run: one panel 0.080, 3
  panels 0.053, 7 panels 0.048, 9 panels 0.050, one panel with K in 4 sums 0.068: one stream);
  1 thread 0.121 -> 0.106; ResNet-18's 0.028 -> 0.024; alone, its weights in L2, 0.048 -> 0.020.

- AMX-BF16: grids of 32 x 32 outputs (2 x 2 tiles of 16 x 16: four ``tdpbf16ps`` per four tile
  loads; 16 x 16 where the rows or channels do not divide), each over the whole reduction (32 K
  per ``tdpbf16ps``); one call takes several grids (:func:`_grouped`: all 128 rows of a BERT
  product by 1-2 column groups) after one ``ldtilecfg``, K in blocks whose weight panels stay in
  L1 for every row group (:data:`L1_WEIGHTS`; the sums stored and loaded back between blocks),
  and prefetches the next call's weight panels into L2 while it computes:
  ``parallel(j / cols, i / rows) . [rows x cols x K]`` (a product under :data:`AMX_PARALLEL_MIN_MACS`
  on one core, its grids in as few calls as its sums allow: a small encoder's 16 x 64 x 64 product
  took 4.1x fp32's time at 2 threads in parallel, 0.2x on one core); offered
  where the rows are a multiple of 16 and K of 32, else the AVX512-BF16 tiling (every AMX CPU has
  AVX512-BF16). The call computes the whole sum from ``tilezero``: the block's init is a block of
  its own inside the parallel loop, tensorized into no code (no zeros stored, none loaded back; the
  sums stay one call's buffer, in L1). A product's epilogue (bias, residual, GELU: FuseOps fuses
  them in where no reshape stands between, :mod:`explorer.passes.bf16_dense`) runs per call right
  after it. Grouped calls against one grid a call (the same pass, one thread, CPU time a run,
  load ~4.5): 128x3072x768 0.675 -> 0.530 ms, 128x2304x768 0.515 -> 0.403, 128x768x3072 0.532
  -> 0.499 (one column group: two were 5% slower at K=3072), 128x768x768 the same; then K blocks
  of 24 KB of panels another 9-10% off the K=768 ones (K=3072: the same); BERT's layer 0.90x
  before the K blocks. Attention's products (12 heads, K=64/128) 2-4% faster: packing their
  operands is most of their time.

The packing block (fp32 activations to bf16 bits) stays a block of its own, parallel and
vectorized by the general rules; so does an im2col convolution's epilogue. A
convolution (:mod:`explorer.passes.bf16_conv`: the same loops, channels as rows and pixels as
columns) has two packing blocks, scheduled here by :mod:`.bf16_conv`. A direct NHWC convolution
(:mod:`explorer.passes.bf16_conv_nhwc`) is tiled by :mod:`.bf16_amx_conv` on AMX CPUs, by
:mod:`.bf16_vector_conv` on ``vdpbf16ps`` alone.

The rule's choices (the instructions, the rows by panels of a ``vdpbf16ps`` step, the grid of AMX
tiles) can be made otherwise: the search measures those variants beside the default
(:data:`explorer.schedule.defaults.variants.BF16_VARIANTS`).
"""

from __future__ import annotations

from dataclasses import replace

from tvm import s_tir

from explorer.schedule.bf16_dot import AMX_K, BATCH_ATTR, BF16_ATTR, PANEL, ROWS, AmxBf16, Bf16Dot, runs_on_tiles
from explorer.schedule.bf16_intrin import register
from explorer.schedule.defaults.amx_calls import MAX_CALL_SUMS, call_fits, most_dividing, zero_init
from explorer.schedule.defaults.analysis import PARALLEL_MIN_MACS, NotApplicable, root_blocks
from explorer.schedule.defaults.bf16_amx_conv import tile_amx_conv
from explorer.schedule.defaults.bf16_conv import schedule_conv_packing
from explorer.schedule.defaults.bf16_vector_conv import fits_registers, tile_vector_conv
from explorer.schedule.defaults.epilogue import epilogue_per_tile, vectorize_epilogue
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.llvm_import import IMPORT_LLVM

PRODUCTS = ("dense_bf16", "batch_dense_bf16")  # the matmuls' kernels (not an im2col convolution's)
# bytes of weight panels one call reads, beyond its first column group: more columns a call where K is
# short (128x3072x768 4% faster at 2 column groups than 1), fewer where it is long (128x768x3072 5% slower)
MAX_CALL_WEIGHTS = 128 * 1024
# bytes of one column group's weight panels per K block of a call of several row groups (K in one block
# was 9-10% slower at K=768: module docstring)
L1_WEIGHTS = 24 * 1024
# multiply-adds below which a product on AMX tiles runs on one core, in as few calls as its sums allow
# (a parallel loop's wake-up and join cost more than the second core saves); on AVX512-BF16 the fp32
# rule's cut (vdpbf16ps does about the work of an FMA a cycle)
AMX_PARALLEL_MIN_MACS = 1 << 21
# independent accumulator chains a product's vdpbf16ps tile keeps (each vdpbf16ps waits for the one
# before on its chain: 2.4 ns a step measured on one chain): a tile of fewer rows takes more panels
# (:func:`_panels`), and where the channels do not allow, K in interleaved partial sums added up at
# the end (:func:`_k_split`)
MIN_CHAINS = 8


def bf16_block(sch: s_tir.Schedule):
    """The bf16 product block of the function, or None."""
    return next((b for b in root_blocks(sch) if BF16_ATTR in (sch.get(b).annotations or {})), None)


def _panels(channels: int, dot: Bf16Dot, cpu: CpuSpec, few_rows: bool = False, parallel: bool = True,
            row_tasks: int = 1) -> int:
    """Weight panels per register tile: two where the channels and the registers allow, else one.
    ``few_rows`` (a product's tile of fewer rows than :data:`MIN_CHAINS`: a classifier's one row):
    the fewest panels that give that many chains, a count that divides the channels' panels, fits
    the registers and (``parallel``) leaves a task per core (``row_tasks`` of them a column of panels);
    else the most that do. Each panel is a
    stream of weights of its own: a classifier's weights come from L3 faster in several streams
    than in one (module docstring)."""
    if not (few_rows and dot.rows < MIN_CHAINS):
        return 2 if channels % (2 * PANEL) == 0 and fits_registers(dot.rows, 2, cpu) else 1
    count = channels // PANEL
    fit = [p for p in range(1, count + 1) if count % p == 0 and fits_registers(dot.rows, p, cpu)
           and (not parallel or count // p * row_tasks >= cpu.cores)]
    return next((p for p in fit if dot.rows * p >= MIN_CHAINS), fit[-1] if fit else 1)


def _k_split(sums: int, half: int) -> int:
    """Into how many interleaved partial sums a tile of ``sums`` accumulators splits K (``half``
    pairs): enough that :data:`MIN_CHAINS` chains of ``vdpbf16ps`` run at once, a count that divides
    the pairs (the largest below that where none from it to twice it does: 651 pairs, 7 sums); 1 where
    the tile has that many already."""
    want = -(-MIN_CHAINS // sums)
    if want <= 1:
        return 1
    return next((u for u in range(want, 2 * want + 1) if half % u == 0),
                max(d for d in range(1, want) if half % d == 0))


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
    batch = int((sch.get(block).annotations or {}).get(BATCH_ATTR, 0))
    if batch:  # a product of two activations: its batch axes (attention's batch, heads) one loop, run in parallel
        loops = [sch.fuse(*loops[:batch]) if batch > 1 else loops[0], *loops[batch:]]
    elif len(loops) in (6, 7):  # a direct NHWC convolution: the CPU's instructions decide, no choices of its own
        if rows or cols or (isa and isa != cpu.bf16_dot):
            raise NotApplicable("a direct NHWC bf16 convolution has one tiling: its CPU's (AMX tiles, "
                                "else vdpbf16ps)")
        if cpu.bf16_dot == "amx":  # (a kernel the tiles do not fit, built for vectors: every AMX CPU has vdpbf16ps)
            try:
                return tile_amx_conv(sch, block, cpu)
            except NotApplicable:
                pass
        return tile_vector_conv(sch, block, cpu)
    outer = loops[:1] if batch else []  # fused with the tiles' loops into the parallel one
    if batch or len(loops) == 5 and int(sch.get(loops[0]).extent) == 1:  # [1, M, K]: the unit loop stays outside
        loops = loops[1:]
    if len(loops) != 4:
        raise NotApplicable("not a dense_bf16 block (loops i, j, k2, kk)")
    extent_i, extent_j, half = (int(sch.get(loop).extent) for loop in loops[:3])
    if extent_j % PANEL:
        raise NotApplicable("channels not padded to the 16-channel panel")
    batches = int(sch.get(outer[0]).extent) if outer else 1
    product = sch.get(block).name_hint.startswith(PRODUCTS)
    amx = isa != "avx512bf16" and runs_on_tiles(extent_i, 2 * half, cpu.bf16_dot)
    macs = batches * extent_i * extent_j * 2 * half
    serial = product and macs < (AMX_PARALLEL_MIN_MACS if amx else PARALLEL_MIN_MACS)
    if amx:
        dot = _amx_grid(extent_i, extent_j, half, rows, cols)
        if product:
            dot = _grouped(dot, extent_i, extent_j, batches, 1 if serial else cpu.cores, serial)
        else:  # an im2col convolution: one grid a call, its init with it (measured so, bf16_conv's rules)
            dot = replace(dot, update=False)
        step = _tile_amx(sch, block, loops, dot, outer, not serial)
    elif isa == "amx":
        raise NotApplicable("AMX tiles need rows in multiples of 16 and K in multiples of 32")
    else:
        dot = Bf16Dot(rows) if rows else next(Bf16Dot(r) for r in ROWS if extent_i % r == 0)
        panels = cols or _panels(extent_j, dot, cpu, product and not batch, not serial, extent_i // dot.rows)
        if extent_i % dot.rows or extent_j % (panels * PANEL):
            raise NotApplicable(f"{dot.rows} rows x {panels} panels do not divide {extent_i} x {extent_j}")
        if (rows or cols) and not fits_registers(dot.rows, panels, cpu):
            raise NotApplicable(f"{dot.rows} rows x {panels} panels need more than {cpu.registers} vector registers")
        split = _k_split(dot.rows * panels, half) if product and not batch else 1
        step = _tile_avx512(sch, block, loops, dot, panels, outer, not serial, split)
    return "; ".join([step] + schedule_conv_packing(sch))  # a convolution's im2col: its own schedule


def _amx_grid(extent_i: int, extent_j: int, half: int, rows: int, cols: int) -> AmxBf16:
    """The AMX call: the rule's 2 x 2 tiles where the rows and channels divide (else 1 x 2 or 2 x 1
    where one of them does: a small encoder's 16 rows), or ``rows`` x ``cols`` tiles (each 1 or 2:
    eight tile registers hold C, A and B)."""
    mt = rows or (2 if extent_i % 32 == 0 else 1)
    nt = cols or (2 if extent_j % (2 * PANEL) == 0 else 1)
    if not {mt, nt} <= {1, 2} or extent_i % (16 * mt) or extent_j % (PANEL * nt):
        raise NotApplicable(f"{mt} x {nt} AMX tiles do not divide {extent_i} x {extent_j}")
    return AmxBf16(2 * half, mt, nt, zero=True, update=True)


def _grouped(dot: AmxBf16, extent_i: int, extent_j: int, batches: int, cores: int, serial: bool = False) -> AmxBf16:
    """``dot`` with as many grids a call as :func:`~.amx_calls.call_fits` allows (enough calls a core,
    their sums within L1; ``serial``: one core, the sums alone): first more rows (all of them: a group
    of weight panels then streams from memory into cache once and serves every row), then more
    columns while the call's weights stay within :data:`MAX_CALL_WEIGHTS`."""
    grids = batches * (extent_i // dot.rows) * (extent_j // dot.cols)
    fits = (lambda per_call: dot.rows * dot.cols * per_call * 4 <= MAX_CALL_SUMS) if serial else \
        (lambda per_call: call_fits(grids, dot.rows * dot.cols, cores, per_call))
    gr = most_dividing(extent_i // dot.rows, fits)
    gc = most_dividing(extent_j // dot.cols,
                       lambda g: fits(gr * g) and (g == 1 or dot.cols * g * dot.k * 2 <= MAX_CALL_WEIGHTS))
    steps = dot.k // AMX_K  # K blocks: a column group's panels for one block within L1_WEIGHTS, read by every row group
    kblocks = 1 if gr == 1 else \
        next(n for n in range(1, steps + 1) if steps % n == 0 and (dot.nt * (steps // n) * 1024 <= L1_WEIGHTS or n == steps))
    return replace(dot, row_groups=gr, col_groups=gc, kblocks=kblocks)


def _tile_avx512(sch: s_tir.Schedule, block, loops, dot: Bf16Dot, panels: int, batch: list, parallel: bool,
                 split: int = 1) -> str:
    """``split`` > 1: K in that many interleaved partial sums (a factor block of ``split`` x the
    tile's sums, then the block adds them up under the same parallel loop)."""
    i, j, k2, kk = loops
    name = sch.get(block).name_hint
    j_o, j_p, j_i = sch.split(j, [None, panels, PANEL])
    i_o, i_i = sch.split(i, [None, dot.rows])
    if split > 1:
        k2, k2_u = sch.split(k2, [None, split])
        sch.reorder(j_o, i_o, k2, k2_u, j_p, i_i, j_i, kk)
        sums = sch.rfactor(k2_u, 0)  # the factor block on loops of its own; ``block`` adds the sums up
        j_o, i_o, k2, k2_u, j_p, i_i, j_i, kk = sch.get_loops(sums)[-8:]
        sch.unroll(k2_u)
    else:
        sch.reorder(j_o, i_o, k2, j_p, i_i, j_i, kk)
    if panels > 1:
        sch.unroll(j_p)
    # a product's epilogue (the slice of padded rows, bias, residual, activation) per tile, while its sums
    # are in cache (not with K in partial sums: their sum is the block's own step under the tile)
    epilogue = epilogue_per_tile(sch, block, i_o) if name.startswith(PRODUCTS) and split == 1 else None
    tile = sch.blockize(j_i if dot.rows == 1 else i_i)  # one row: its unit loop stays outside the call
    outer = sch.fuse(*batch, j_o, i_o)
    if parallel:
        sch.parallel(outer)
    if split > 1:  # the partial sums added up right after the tile's calls, vectorized over the tile
        sch.reverse_compute_at(block, outer)
        sch.vectorize(sch.get_loops(block)[-1])
    sch.decompose_reduction(tile, k2)
    sch.tensorize(tile, register(dot))
    sch.annotate(outer, IMPORT_LLVM, dot.llvm_ir)
    vectorize_epilogue(sch, epilogue)
    chains = f", K in {split} interleaved partial sums" if split > 1 else ""
    return (f"{name}: {dot.name} (vdpbf16ps, {dot.rows} rows x {panels} panel{'s' if panels > 1 else ''} of "
            f"{PANEL} channels, fp32 accumulation{chains}), {_where(parallel)}"
            + (", epilogue per tile" if epilogue is not None else ""))


def _tile_amx(sch: s_tir.Schedule, block, loops, dot: AmxBf16, batch: list, parallel: bool = True) -> str:
    i, j, k2, kk = loops
    name = sch.get(block).name_hint
    i_o, i_i = sch.split(i, [None, dot.rows])
    j_o, j_i = sch.split(j, [None, dot.cols])
    sch.reorder(j_o, i_o, i_i, j_i, k2, kk)
    # a product's epilogue (bias, residual, activation) finishes each tile right after its call, while
    # the tile's sums are in cache (then one tile's buffer, not the whole output's; not a convolution's
    # im2col output, which its copy back to NCHW reads)
    epilogue = epilogue_per_tile(sch, block, i_o) if name.startswith(PRODUCTS) else None
    tile = sch.blockize(j_i if dot.rows == 1 else i_i)  # one row: its unit loop stays outside the call
    outer, unit = sch.fuse(*batch, j_o, i_o), None
    if dot.update:  # a unit loop (a split: a step the Schedule page shows) for the init to sit under
        outer, unit = sch.split(outer, [None, 1])
    if parallel:
        sch.parallel(outer)
    # the call sums from tilezero: its init a block of its own, tensorized into no code (no zeros
    # stored before the call, none loaded back)
    if unit is not None:  # the init inside the parallel loop (before the unit loop): the sums stay one call's buffer
        zero_init(sch, tile, unit, dot.rows, dot.cols)
    sch.tensorize(tile, register(dot))
    sch.annotate(sch.get_loops(tile)[0], IMPORT_LLVM, dot.llvm_ir)
    vectorize_epilogue(sch, epilogue)
    groups = f", {dot.row_groups} x {dot.col_groups} grids a call" if dot.row_groups * dot.col_groups > 1 else ""
    return (f"{name}: {dot.name} (AMX tdpbf16ps, {dot.mt} x {dot.nt} tiles of 16 x 16 over K={dot.k}{groups}, "
            f"fp32 accumulation, from tilezero), {_where(parallel)}"
            + (", epilogue per tile" if epilogue is not None else ""))


def _where(parallel: bool) -> str:
    return "parallel outside" if parallel else "on one core (too little work to share)"


__all__ = ["AMX_PARALLEL_MIN_MACS", "MIN_CHAINS", "bf16_block", "tile_bf16"]
