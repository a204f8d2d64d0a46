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

from explorer.schedule.amx_ir import DECLARATIONS, RELEASE, c_tiles, entry, tile_config

NAME_PREFIX = "schedx_dot_bf16_"
PANEL = 16  # output channels per weight panel: the fp32 lanes of one vdpbf16ps, the columns of one AMX tile
PAIR = 2  # bf16 values per 32-bit lane
AMX_K = 32  # K per tdpbf16ps (a 64-byte tile row of bf16)
ROWS = (8, 4, 2, 1)
# the block annotation of the kernels this module computes (its value: the number of weight panels)
BF16_ATTR = "schedx.bf16_dense"
# the packing block (fp32 -> bf16 bits): kept a block of its own, never inlined into the product
PACK_ATTR = "schedx.bf16_pack"

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


def amx_ir(mt: int, nt: int, zero: bool = False) -> str:
    """The LLVM IR of one AMX call on an ``mt x nt`` grid of 16 x 16 fp32 tiles (tmm0.. the C
    tiles, then ``mt`` A tiles, then ``nt`` B tiles, each 16 rows of 64 bytes): tile config, the
    permission request (once per process), ``tileloadd``/``tdpbf16ps`` 32 K at a time, stores.
    ``zero``: the C tiles start from ``tilezero`` (the call computes the whole sum), not loaded."""
    c, a0, b0 = 0, mt * nt, mt * nt + mt
    fn = f"{AMX_FN}_{mt}x{nt}" + ("_zero" if zero else "")
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
    cptrs, cload, cstore = c_tiles(16, mt, nt)
    if zero:  # no load of zeros just stored (it waits for those stores to drain)
        cload = "\n".join(f"  call void @llvm.x86.tilezero(i8 {t})" for t in range(mt * nt))
    nl = "\n"
    return f"""
{tile_config(fn + "_cfg", [16] * (mt * nt + mt + nt))}
{DECLARATIONS}
declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)
declare void @llvm.x86.tilezero(i8 immarg)
define i32 @{fn}(ptr %c, i64 %ldc, ptr %a, i64 %lda, ptr %b, i64 %bpanel, i64 %kbytes) {{
{entry(fn + "_cfg")}
{cptrs}
{cload}
  br label %loop
loop:
  %i = phi i64 [0, %go], [%next, %loop]
{nl.join(body)}
  %next = add i64 %i, 64
  %done = icmp eq i64 %next, %kbytes
  br i1 %done, label %end, label %loop
end:
{cstore}
{RELEASE}
  ret i32 0
}}
"""


@dataclass(frozen=True)
class Bf16Dot:
    """AVX512-BF16: ``C[rows, 16] += A[rows, 2] . B[16, 2]`` (bf16 bits, fp32 accumulation)."""

    rows: int
    isa: str = "avx512bf16"

    @property
    def name(self) -> str:
        return f"{NAME_PREFIX}avx512bf16_{self.rows}x{PANEL}"

    @property
    def llvm_ir(self) -> str:
        return DOT_IR


@dataclass(frozen=True)
class AmxBf16:
    """AMX-BF16: ``C[16 mt, 16 nt] += A[16 mt, k] . B[nt, k/2, 16, 2]`` over a whole reduction of
    ``k``, on an ``mt x nt`` grid of tiles (2 x 2: four tdpbf16ps per four tile loads). ``zero``:
    ``C = A . B``, the whole sum from ``tilezero`` (the description has the block's init)."""

    k: int
    mt: int = 2
    nt: int = 2
    isa: str = "amx"
    zero: bool = False

    @property
    def rows(self) -> int:
        return 16 * self.mt

    @property
    def cols(self) -> int:
        return PANEL * self.nt

    @property
    def name(self) -> str:
        return f"{NAME_PREFIX}amx_{self.rows}x{self.cols}x{self.k}" + ("_zero" if self.zero else "")

    @property
    def function(self) -> str:
        return f"{AMX_FN}_{self.mt}x{self.nt}" + ("_zero" if self.zero else "")

    @property
    def llvm_ir(self) -> str:
        return amx_ir(self.mt, self.nt, self.zero)


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
    (A signalling NaN may become infinity: its payload is in the bits rounded away.)"""
    import tvm

    u = tvm.tirx.reinterpret("uint32", x)
    c = lambda v: tvm.tirx.const(v, "uint32")  # noqa: E731
    return ((u + c(0x7FFF) + ((u >> c(16)) & c(1))) >> c(16)).astype("uint16")


def widen(bits):
    """A TE/TIR expression: the fp32 value of bf16 ``bits`` (uint16). The intrinsics' descriptions
    spell it the same way, so tensorize recognises it."""
    import tvm

    return tvm.tirx.reinterpret("float32", bits.astype("uint32") << tvm.tirx.const(16, "uint32"))


__all__ = ["AMX_FN", "AMX_K", "BF16_ATTR", "BF16_NAMES", "DOT_FN", "NAME_PREFIX", "PACK_ATTR", "PAIR", "PANEL", "ROWS",
           "AmxBf16", "Bf16Dot", "amx_ir", "isa_from", "to_bits", "why_not", "widen"]
