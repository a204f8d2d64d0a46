"""bf16 dot-product micro-kernels (fp32 accumulation) as TensorIR tensor intrinsics: one design,
two back ends over the same weights layout.

The kernels :mod:`explorer.passes.bf16_dense` writes compute

    C[i, j] = sum_{k2, kk} f32(A[i, 2*k2 + kk]) * f32(W[j // 16, k2, j % 16, kk])

where ``A`` holds the activations as bf16 bits (uint16: rounded to nearest even by the kernel's
own packing block, :func:`to_bits`) and ``W`` the weights as bf16 bits packed once at build time
in panels of 16 output channels x pairs along K (``[N/16, K/2, 16, 2]``). That panel is what
both instructions read:

- ``avx512bf16``: ``vdpbf16ps`` (16 fp32 lanes, each += the dot product of one pair of bf16):
  one call takes ``rows`` output rows by 16 channels for one pair ``kk`` (the 64-byte panel row
  ``W[p, k2]``; the activation pair is one 32-bit broadcast). :class:`Bf16Dot`.
- ``amx``: ``tdpbf16ps`` on AMX tiles: one call takes a 16 x 16 output tile over the whole
  reduction, 32 K at a time (A tile 16 rows x 64 bytes, B tile = 16 panel rows of 64 bytes: the
  same panel). :class:`AmxBf16`. Linux grants a process its tile state only after
  ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; the kernel makes that system call
  itself, once per process, before its first tile instruction (so a bundle needs no loader help).

Why the instructions are reached through a small LLVM IR function (imported with TVM's
``pragma_import_llvm`` and inlined by LLVM) instead of ``T.call_llvm_pure_intrin``: LLVM 22's
``llvm.x86.avx512bf16.dpbf16ps.512`` takes ``<32 x bfloat>`` operands, and TVM 0.27's lowering
runs ``BF16ComputeLegalize`` on every LLVM target, which rewrites any bfloat16 expression to
float32 (the call then fails LLVM's verifier: ``<32 x float>`` passed for ``<32 x bfloat>``). The
IR function takes ``<16 x i32>`` and bitcasts; the instruction in the assembly is the same.
Intrinsics are registered lazily (:mod:`explorer.schedule.bf16_intrin`) under names that say
their shape; any process that replays a trace calls its ``register_for_trace`` first.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.schedule.amx_groups import GroupLoop, groups_ir, offset
from explorer.schedule.amx_ir import DECLARATIONS, RELEASE, c_tiles, entry, tile_config

NAME_PREFIX = "schedx_dot_bf16_"
PANEL = 16  # output channels per weight panel: the fp32 lanes of one vdpbf16ps, the columns of one AMX tile
PAIR = 2  # bf16 values per 32-bit lane
QUIET_NAN_BIT = 0x40  # of bf16 bits: set in every NaN :func:`to_bits` writes
AMX_K = 32  # K per tdpbf16ps (a 64-byte tile row of bf16)
AMX_TILE_ROWS = 16  # rows of an AMX tile
ROWS = (8, 4, 2, 1)
# the pixels of one output row a direct convolution's vdpbf16ps tile takes (each a broadcast a step;
# :mod:`explorer.schedule.defaults.bf16_vector_conv`): a count in this range that divides the row
VECTOR_CONV_ROWS = range(2, 17)
# (a call of several grids asks for the next call's B panels, the weights just after its own, into L2:
# a few lines each K step spread over all its steps, so they arrive from L3 or memory while it computes)
# the block annotation of the kernels this module computes (its value: the number of weight panels)
BF16_ATTR = "schedx.bf16_dense"
# the packing block (fp32 -> bf16 bits): kept a block of its own, never inlined into the product
PACK_ATTR = "schedx.bf16_pack"
# a product of two activations (:mod:`explorer.passes.bf16_attention`): its value, the number of batch
# axes outside the product's four loops (attention's batch and heads)
BATCH_ATTR = "schedx.bf16_batch"
# a packing block into panels (:func:`explorer.passes.bf16_attention.bf16_panels`): how the panels read the
# operand, "rows" or "columns" (:mod:`explorer.schedule.defaults.bf16_panels` schedules each its own way)
PANEL_READ_ATTR = "schedx.bf16_panel_read"

DOT_FN = "schedx_dpbf16ps_512"
AMX_FN = "schedx_amx_bf16_tile"
DOT_IR = f"""
define <16 x float> @{DOT_FN}(<16 x float> %acc, <16 x i32> %a, <16 x i32> %b) {{
  %x = bitcast <16 x i32> %a to <32 x bfloat>
  %y = bitcast <16 x i32> %b to <32 x bfloat>
  %r = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc, <32 x bfloat> %x, <32 x bfloat> %y)
  ret <16 x float> %r
}}
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
"""
# a cache line into L2 (prefetcht1): a direct convolution's next weight panels (:attr:`Bf16Dot.ahead`). The
# instruction is inline assembly on the address as a plain register, with no memory effect LLVM can see:
# ``llvm.prefetch`` reads its pointer argument for LLVM's alias analysis, and as LLVM cannot tell the next
# panels' address from the sums', LICM then kept every sum in memory (a store after each vdpbf16ps: 3x slower)
PREFETCH_FN = "schedx_prefetch_l2"
PREFETCH_IR = f"""
define void @{PREFETCH_FN}(ptr %p) alwaysinline nounwind willreturn memory(inaccessiblemem: readwrite) {{
  call void asm sideeffect "prefetcht1 ($0)", "r"(ptr %p) #0
  ret void
}}
attributes #0 = {{ nounwind willreturn memory(inaccessiblemem: readwrite) }}
"""


def runs_on_tiles(rows: int, reduction: int, isa: str) -> bool:
    """Whether a product of ``rows`` x ``reduction`` runs on AMX tiles on a CPU whose bf16
    instructions are ``isa`` (the one rule the bf16 pass and the default schedule both ask); else on
    vdpbf16ps."""
    return isa == "amx" and rows % AMX_TILE_ROWS == 0 and reduction % AMX_K == 0


# a count of rows (or columns) that its instruction's tiles do not divide is padded with zeros to whole tiles
# where that adds at most this share of it (a ViT's 197 tokens: 200 rows on vdpbf16ps, 208 on AMX; one row, or
# six, stay)
PAD_MAX_SHARE = 0.25


def padded_to(count: int, tiles: tuple[int, ...]) -> int:
    """``count`` rounded up to a multiple of the first of ``tiles`` (in order of preference) for which
    that adds at most :data:`PAD_MAX_SHARE` of it; ``count`` itself where none does."""
    return next((to for to in (-(-count // tile) * tile for tile in tiles) if to - count <= PAD_MAX_SHARE * count),
                count)


def padded_rows(rows: int, reduction: int, isa: str | None) -> int:
    """The rows the bf16 kernel of a ``rows`` x ``reduction`` product computes on a CPU whose bf16
    instructions are ``isa`` (None: no rule, the rows as they are): ``rows``, or more (zeros, sliced
    off after) where the largest tile does not divide them: whole AMX tiles of 16 rows (where K
    fills tile rows), else whole tiles of vdpbf16ps's most rows (8, :data:`ROWS`), within
    :data:`PAD_MAX_SHARE`. Unpadded, a 197-row product took tiles of one row, which read every
    weight panel once a row: 197 x 768 -> 192 at 236 GFLOPS, 200 rows in tiles of 8 at 815; a
    196-row one (Swin's 14 x 14 tokens) tiles of 4: 196 x 384 -> 1536 at 574 GFLOPS, 200 rows at
    802 (Zen 5, 2 threads, the kernel alone; docs/notes/measurements.md)."""
    if isa is None or runs_on_tiles(rows, reduction, isa):
        return rows
    return padded_to(rows, ((AMX_TILE_ROWS,) if runs_on_tiles(AMX_TILE_ROWS, reduction, isa) else ()) + (ROWS[0],))


def zero_beyond(index, extent: int, bits):
    """``bits`` where ``index`` < ``extent``, else a zero (a padded row's, reduction's or column's bits)."""
    import tvm

    return tvm.tirx.if_then_else(index < extent, bits, tvm.tirx.const(0, "uint16"))


def amx_ir(mt: int, nt: int, zero: bool = False, row_groups: int = 1, col_groups: int = 1, kblocks: int = 1) -> str:
    """The LLVM IR of one AMX call on an ``mt x nt`` grid of 16 x 16 fp32 tiles (tmm0.. the C
    tiles, then ``mt`` A tiles, then ``nt`` B tiles, each 16 rows of 64 bytes): tile config, the
    permission request (once per process), ``tileloadd``/``tdpbf16ps`` 32 K at a time, stores.
    ``zero``: the C tiles start from ``tilezero`` (the call computes the whole sum), not loaded.
    ``row_groups`` x ``col_groups``: the call computes that many such grids after one ``ldtilecfg``
    (column groups outside, so a group's B panels serve every row group in turn while in cache;
    the next rows ``16 mt`` A and C rows on, the next channels ``nt`` panels on), and prefetches
    the next call's B panels (just after its own) into L2; ``kblocks``: the groups walk K in that
    many blocks, each group's sums from ``tilezero`` in the first, loaded back in the next (a
    block's B panels stay in L1 for every row group). One group emits the IR it always did."""
    c, a0, b0 = 0, mt * nt, mt * nt + mt
    fn = function_name(mt, nt, zero, row_groups, col_groups, kblocks)
    body = []
    for r in range(mt):
        body += [f"  %arow{r} = mul i64 %lda, {16 * r}", f"  %aoff{r} = add i64 %arow{r}, %i",
                 f"  %ap{r} = getelementptr i8, ptr %a, i64 %aoff{r}",
                 f"  call void @llvm.x86.tileloadd64(i8 {a0 + r}, ptr %ap{r}, i64 %lda)"]
    for q in range(nt):
        body += [f"  %bq{q} = mul i64 %bpanel, {q}", f"  %bi{q} = mul i64 %i, 16",
                 f"  %boff{q} = add i64 %bq{q}, %bi{q}",
                 f"  %bp{q} = getelementptr i8, ptr %b, i64 %boff{q}",
                 f"  call void @llvm.x86.tileloadd64(i8 {b0 + q}, ptr %bp{q}, i64 64)"]
    body += [f"  call void @llvm.x86.tdpbf16ps(i8 {c + r * nt + q}, i8 {a0 + r}, i8 {b0 + q})"
             for r in range(mt) for q in range(nt)]
    grouped = row_groups * col_groups > 1
    lines = -(-16 * nt // row_groups) if grouped else 0  # per step: 1 KB a panel over the row groups
    if lines:
        body += [f"  %pfo = mul i64 %i, {lines}", "  %pfs = getelementptr i8, ptr %pf, i64 %pfo"]
        body += [f"  %pf{line} = getelementptr i8, ptr %pfs, i64 {64 * line}\n"
                 f"  call void @llvm.prefetch.p0(ptr %pf{line}, i32 0, i32 2, i32 1)" for line in range(lines)]
    cptrs, cload, cstore = c_tiles(16, mt, nt)
    if zero:  # no load of zeros just stored (it waits for those stores to drain)
        czero = "\n".join(f"  call void @llvm.x86.tilezero(i8 {t})" for t in range(mt * nt))
        # K in blocks: the first block's sums start from zero, the next ones' from the stored sums
        cload = czero if kblocks == 1 else f"""  br i1 %first, label %czero, label %cload
czero:
{czero}
  br label %start
cload:
{cload}
  br label %start
start:"""
    nl = "\n"
    args = "ptr %c, i64 %ldc, ptr %a, i64 %lda, ptr %b, i64 %bpanel, i64 %kbytes"
    head = f"""
{tile_config(fn + "_cfg", [16] * (mt * nt + mt + nt))}
{DECLARATIONS}
declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)
declare void @llvm.x86.tilezero(i8 immarg)
declare void @llvm.prefetch.p0(ptr, i32 immarg, i32 immarg, i32 immarg)
"""
    if grouped:  # the grid's code a function of its own (no ldtilecfg), called per group
        head += _groups_ir(fn, args, mt, nt, row_groups, col_groups, lines, kblocks) + f"""
define internal i32 @{fn}_grid({args}, ptr %pf, i1 %first) alwaysinline {{
go:"""
    else:
        head += f"""define i32 @{fn}({args}) {{
{entry(fn + "_cfg")}"""
    return head + f"""
{cptrs}
{cload}
  br label %loop
loop:
  %i = phi i64 [0, %{"start" if kblocks > 1 else "go"}], [%next, %loop]
{nl.join(body)}
  %next = add i64 %i, 64
  %done = icmp eq i64 %next, %kbytes
  br i1 %done, label %end, label %loop
end:
{cstore}
{"" if grouped else RELEASE}
  ret i32 0
}}
"""


def _groups_ir(fn: str, args: str, mt: int, nt: int, row_groups: int, col_groups: int, lines: int,
               kblocks: int = 1) -> str:
    """``@fn``: the tile configuration loaded once, then ``@fn_grid`` for each group: K blocks
    (``kblocks``, each a column group's B panels kept in L1 for every row group) outside, column
    groups (``nt`` panels, ``%bpanel`` bytes apart, and ``64 nt`` bytes of C) next, row groups
    (``16 mt`` rows of A and C) inside; each group's share of the next call's B panels to prefetch,
    ``lines`` cache lines a K step, from ``%pf`` on."""
    setup = [f"  %bstep = mul i64 %bpanel, {nt}", f"  %bnext = mul i64 %bstep, {col_groups}",
             f"  %cstep = mul i64 %ldc, {16 * mt}", f"  %astep = mul i64 %lda, {16 * mt}",
             f"  %kbb = udiv i64 %kbytes, {kblocks}", "  %kbb16 = mul i64 %kbb, 16"]
    # each row group's share of the next call's B panels: group gi of all, ``lines`` cache lines a K step
    prefetch = (f"  %gk = mul i64 %kb, {col_groups}", "  %gi0a = add i64 %gk, %gc", f"  %gi0 = mul i64 %gi0a, {row_groups}",
                "  %gi = add i64 %gi0, %gr", "  %pfg0 = mul i64 %gi, %kbb", f"  %pfg = mul i64 %pfg0, {lines}",
                "  %pfo = add i64 %bnext, %pfg", "  %pfp = getelementptr i8, ptr %b, i64 %pfo")
    loops = [GroupLoop("kblock", "kb", kblocks, ("  %first = icmp eq i64 %kb, 0", offset("akp", "a", "kb", "%kbb"),
                                                 offset("bkp", "b", "kb", "%kbb16"))),
             GroupLoop("colgroup", "gc", col_groups, (offset("ccp", "c", "gc", 64 * nt),
                                                      offset("bcp", "bkp", "gc", "%bstep"))),
             GroupLoop("rowgroup", "gr", row_groups, (offset("crp", "ccp", "gr", "%cstep"),
                                                      offset("arp", "akp", "gr", "%astep"), *prefetch))]
    call = (f"  %res = call i32 @{fn}_grid(ptr %crp, i64 %ldc, ptr %arp, i64 %lda, ptr %bcp, i64 %bpanel, i64 %kbb, "
            "ptr %pfp, i1 %first)")
    return groups_ir(fn, args, setup, loops, call)


def function_name(mt: int, nt: int, zero: bool, row_groups: int, col_groups: int, kblocks: int) -> str:
    """The name of the IR function of an AMX call (one per distinct body: a library may hold several)."""
    groups = f"_g{row_groups}x{col_groups}" if row_groups * col_groups > 1 else ""
    return f"{AMX_FN}_{mt}x{nt}{groups}" + (f"_kb{kblocks}" if kblocks > 1 else "") + ("_zero" if zero else "")


@dataclass(frozen=True)
class Bf16Dot:
    """AVX512-BF16: ``C[rows, 16] += A[rows, 2] . B[16, 2]`` (bf16 bits, fp32 accumulation); with
    ``panels`` > 1, ``C[rows, 16 panels] += A[rows, 2] . B[panels, 16, 2]`` (the panels at any
    distance apart), computed row by row, each row's broadcast pair feeding every panel's
    ``vdpbf16ps`` in turn: ``rows x panels`` sums, ``panels`` weight rows and one broadcast live at a
    time (one panel a call instead kept every row's broadcast live across the panels' calls, and
    LLVM spilled the sums of a 14 x 2 tile). ``weights_rank``, ``stride``, ``ahead``: see the fields."""

    rows: int
    panels: int = 1
    # the dimensions of the weights buffer the panels are read from (a product's [N/16, K/2, 16, 2]: 4;
    # a direct convolution's [O/16, KH, KW, C/2, 16, 2]: 6): the description reads B in as many
    # (its panels' axis first, unit axes between it and a panel's 16 x 2), so that tensorize matches
    weights_rank: int = 3
    # how far apart (in A's rows) the rows of the tile are read: a strided convolution's output pixels read
    # every ``stride``-th input pixel of a row (the description's A spans ``(rows - 1) x stride + 1`` rows)
    stride: int = 1
    isa: str = "avx512bf16"
    # each call also asks for the weight line this many panels past each of its own into L2 (0: none): a
    # weights-heavy convolution's next block of output channels (the same offset in the next panels), whose
    # weights then arrive from L3 or memory while this block computes its rows
    ahead: int = 0

    @property
    def name(self) -> str:
        rank = f"_w{self.weights_rank}" if self.weights_rank != 3 else ""
        stride = f"_s{self.stride}" if self.stride != 1 else ""
        ahead = f"_pf{self.ahead}" if self.ahead else ""
        return f"{NAME_PREFIX}avx512bf16_{self.rows}x{PANEL * self.panels}{rank}{stride}{ahead}"

    def __post_init__(self):
        if self.rows < 1 or self.panels < 1 or self.weights_rank < 3 or self.stride < 1 or self.ahead < 0:
            raise ValueError(f"no vdpbf16ps call of {self.rows} rows, {self.panels} panels, weights of rank "
                             f"{self.weights_rank}, stride {self.stride}, prefetch {self.ahead} panels ahead")

    @property
    def one_panel(self) -> bool:
        """Whether this is the plain one-panel call (its description has no panel loop)."""
        return self.panels == 1 and self.weights_rank == 3 and self.stride == 1 and not self.ahead

    @property
    def llvm_ir(self) -> str:
        return DOT_IR + (PREFETCH_IR if self.ahead else "")


@dataclass(frozen=True)
class AmxBf16:
    """AMX-BF16: ``C[16 mt, 16 nt] += A[16 mt, k] . B[nt, k/2, 16, 2]`` over a whole reduction of
    ``k``, on an ``mt x nt`` grid of tiles (2 x 2: four tdpbf16ps per four tile loads). ``zero``:
    ``C = A . B``, the whole sum from ``tilezero`` (the description has the block's init).
    ``row_groups`` x ``col_groups``: one call computes that many grids side by side (a block of
    :attr:`rows` x :attr:`cols`) after one ``ldtilecfg``, K in ``kblocks`` blocks. ``update``: the
    description is the update alone (the block's init tensorized apart, into no code)."""

    k: int
    mt: int = 2
    nt: int = 2
    isa: str = "amx"
    zero: bool = False
    row_groups: int = 1
    col_groups: int = 1
    # with ``zero``: the description is the reduction's update alone (the block decomposed, its init
    # tensorized into no code: no zeros stored before the call); False (traces recorded before): the
    # description holds the init, which TVM keeps as a memset of the block before the call
    update: bool = False
    kblocks: int = 1  # K in this many blocks, each over every group (a call of several row groups)

    @property
    def rows(self) -> int:
        """The rows of the call's block (every row group's)."""
        return 16 * self.mt * self.row_groups

    @property
    def cols(self) -> int:
        """The columns of the call's block (every column group's)."""
        return PANEL * self.nt * self.col_groups

    @property
    def _groups(self) -> str:
        return f"_g{self.row_groups}x{self.col_groups}" if self.row_groups * self.col_groups > 1 else ""

    @property
    def name(self) -> str:
        return (f"{NAME_PREFIX}amx_{16 * self.mt}x{PANEL * self.nt}x{self.k}{self._groups}"
                + (f"_kb{self.kblocks}" if self.kblocks > 1 else "") + ("_zero" if self.zero else "")
                + ("_u" if self.zero and self.update else ""))

    @property
    def function(self) -> str:
        return function_name(self.mt, self.nt, self.zero, self.row_groups, self.col_groups, self.kblocks)

    @property
    def llvm_ir(self) -> str:
        return amx_ir(self.mt, self.nt, self.zero, self.row_groups, self.col_groups, self.kblocks)


BF16_NAMES = tuple(Bf16Dot(rows).name for rows in ROWS)


def isa_from(features, arch: str = "x86_64") -> str:
    """The bf16 product instructions of a CPU with these LLVM ``features`` ("" when none)."""
    from explorer.target.arches import CPU_ARCHES

    feats, known = set(features), CPU_ARCHES.get(arch)
    return next((isa for needs, isa in known.bf16_dot if needs <= feats), "") if known else ""


def why_not(features, arch: str = "x86_64") -> str:
    """Why a CPU with these features gets no bf16 kernels ("" when it does)."""
    return "" if isa_from(features, arch) else "it has no AVX512-BF16 (vdpbf16ps) nor AMX-BF16 instructions"


def to_bits(x):
    """A TE/TIR expression: the fp32 ``x`` rounded to nearest even bf16, as its 16 bits (uint16).
    A NaN stays a NaN of the same sign: its top 16 bits with the quiet bit set, as ``vcvtneps2bf16``
    converts it (rounding its bits would carry a payload of ones into the sign, 0x7FFFFFFF to -0,
    or round a payload below the top 16 bits away, to infinity: a NaN in a model's input would
    vanish from its output). Finite values and infinities round as before, bit for bit.

    NaN is told apart on the integer bits (``u << 1`` above infinity's), three vector instructions
    more (an add, a compare into a mask, a masked or): TVM 0.27 does not vectorize ``tirx.isnan`` (the
    loop is scalarized, and LLVM gathers), and folds ``x != x`` to false."""
    import tvm

    u = tvm.tirx.reinterpret("uint32", x)
    c = lambda v: tvm.tirx.const(v, "uint32")  # noqa: E731
    high = u >> c(16)
    rounded = (u + c(0x7FFF) + (high & c(1))) >> c(16)
    nan = (u << c(1)) > c(0xFF000000)  # (the sign shifted out: exponent all ones, a mantissa not zero)
    return tvm.tirx.Select(nan, high | c(QUIET_NAN_BIT), rounded).astype("uint16")


def widen(bits):
    """A TE/TIR expression: the fp32 value of bf16 ``bits`` (uint16). The intrinsics' descriptions
    spell it the same way, so tensorize recognises it."""
    import tvm

    return tvm.tirx.reinterpret("float32", bits.astype("uint32") << tvm.tirx.const(16, "uint32"))


__all__ = ["AMX_FN", "AMX_K", "AMX_TILE_ROWS", "AmxBf16", "BATCH_ATTR", "BF16_ATTR", "BF16_NAMES", "Bf16Dot", "DOT_FN",
           "NAME_PREFIX", "PACK_ATTR", "PAIR", "PANEL", "PANEL_READ_ATTR", "PREFETCH_FN", "PREFETCH_IR",
           "PAD_MAX_SHARE", "QUIET_NAN_BIT", "ROWS", "amx_ir",
           "isa_from", "padded_rows", "padded_to", "runs_on_tiles", "to_bits", "why_not", "widen",
           "zero_beyond"]
