"""AMX-INT8 tile kernels for the int8 convolutions and matmuls of :mod:`explorer.passes.qdq_int8`:
``tdpbusd`` (uint8 activations x int8 weights, int32 sums) on AMX tiles of 16 rows x 64 bytes.

The weights are already packed the way a B tile wants them: the QDQ pass writes panels of 16
output channels x 4 input channels (``[O/16, KH, KW, C/4, 16, 4]``, matmul ``[N/16, K/4, 16, 4]``),
so 16 consecutive groups of 4 along K of one panel are one 16 x 64-byte B tile, contiguous. One
call of the kernel computes ``rows = m x mt`` output pixels (``mt`` A/C tiles of ``m`` rows, along
the output width) by 16 output channels over the whole reduction: the ``KH x KW`` taps (each an A
tile of ``m`` rows read ``stride`` pixels apart straight from the padded NHWC input: no im2col),
64 input channels per ``tdpbusd``; the int32 C tiles stay in tile registers from the first tap to
the last. A matmul is the same with one tap.

Linux grants a process its tile state only after ``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``; the kernel asks once per process before its first tile instruction, through
the entry and the flag it shares with the bf16 AMX kernels (:mod:`explorer.schedule.amx_ir`).
The tile code is a small LLVM IR function imported with TVM's ``pragma_import_llvm`` (as the bf16
one): TVM 0.27 has no AMX intrinsics of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from explorer.schedule.amx_ir import DECLARATIONS, c_tiles, entry, tile_config

NAME_PREFIX = "schedx_amx_u8i8_"
_NAME = re.compile(NAME_PREFIX + r"(\d+)x(\d+)x(\d+)_k(\d+)_s(\d+)_t(\d+)x(\d+)")
AMX_FN = "schedx_amx_u8i8_tile"
PANEL = 16  # output channels of a B tile (16 x 4 bytes a row)
K_STEP = 64  # input channels per tdpbusd (a 64-byte tile row)
# (rows per tile, tiles along the rows) the rule tries, most rows first: 16-row tiles where the
# output width allows, 14 and 7 for ResNet's 56-, 28-, 14- and 7-wide stages
GRIDS = ((16, 2), (14, 2), (16, 1), (14, 1), (8, 2), (8, 1), (7, 1))
FEATURES = frozenset({"amx-int8", "amx-tile"})  # LLVM's names (explorer.target); /proc/cpuinfo says amx_int8
# Off: int8 kernels stay on vpdpbusd even where the CPU has AMX-INT8.
AMX_INT8_ENABLED = True


def available(features) -> bool:
    """Whether a CPU with these LLVM ``features`` gets AMX-INT8 kernels."""
    return AMX_INT8_ENABLED and FEATURES <= set(features)


@dataclass(frozen=True)
class AmxInt8:
    """``C[m mt, 16 nt] += A . B`` over ``kh x kw`` taps of ``k`` input channels (``kh == kw == 0``:
    a matmul, ``A[m mt, k]``), A rows ``stride`` pixels apart, ``nt`` weight panels."""

    m: int
    mt: int
    k: int
    stride: int = 1
    kh: int = 0
    kw: int = 0
    nt: int = 1

    @property
    def rows(self) -> int:
        return self.m * self.mt

    @property
    def cols(self) -> int:
        return PANEL * self.nt

    @property
    def name(self) -> str:
        return f"{NAME_PREFIX}{self.m}x{self.mt}x{self.nt}_k{self.k}_s{self.stride}_t{self.kh}x{self.kw}"

    @property
    def function(self) -> str:
        return f"{AMX_FN}_{self.m}x{self.mt}x{self.nt}"

    @property
    def llvm_ir(self) -> str:
        return amx_int8_ir(self.m, self.mt, self.nt)


def amx_int8_ir(m: int, mt: int, nt: int) -> str:
    """The LLVM IR of one call: tile config (``mt x nt`` C tiles and ``mt`` A tiles of ``m`` rows,
    ``nt`` B tiles of 16), the permission request (once per process), the C tiles loaded, then for
    each tap and each 64 input channels ``mt`` A tiles, ``nt`` B tiles and ``mt x nt`` ``tdpbusd``;
    the C tiles stored."""
    fn = f"{AMX_FN}_{m}x{mt}x{nt}"
    a0, b0 = mt * nt, mt * nt + mt
    tiles = [(r, q, r * nt + q) for r in range(mt) for q in range(nt)]
    cptrs, cload, cstore = c_tiles(m, mt, nt)
    body = []
    for r in range(mt):
        body += [f"  %arow{r} = mul i64 %lda, {m * r}", f"  %aoff{r} = add i64 %arow{r}, %i",
                 f"  %ap{r} = getelementptr i8, ptr %abase, i64 %aoff{r}",
                 f"  call void @llvm.x86.tileloadd64(i8 {a0 + r}, ptr %ap{r}, i64 %lda)"]
    body.append("  %bi = mul i64 %i, 16")
    for q in range(nt):
        body += [f"  %bq{q} = mul i64 %bpanel, {q}", f"  %boff{q} = add i64 %bq{q}, %bi",
                 f"  %bp{q} = getelementptr i8, ptr %bbase, i64 %boff{q}",
                 f"  call void @llvm.x86.tileloadd64(i8 {b0 + q}, ptr %bp{q}, i64 64)"]
    body += [f"  call void @llvm.x86.tdpbusd(i8 {t}, i8 {a0 + r}, i8 {b0 + q})" for r, q, t in tiles]
    nl = "\n"
    return f"""
{tile_config(fn + "_cfg", [m] * (mt * nt + mt) + [16] * nt)}
{DECLARATIONS}
declare void @llvm.x86.tdpbusd(i8 immarg, i8 immarg, i8 immarg)
define i32 @{fn}(ptr %c, i64 %ldc, ptr %a, i64 %lda, i64 %ldh, i64 %ldw, i64 %kw, i64 %taps, ptr %b, i64 %kbytes) {{
{entry(fn + "_cfg")}
  %bpanel0 = mul i64 %taps, %kbytes
  %bpanel = mul i64 %bpanel0, 16
{cptrs}
{cload}
  br label %tap
tap:
  %t = phi i64 [0, %go], [%tnext, %tapend]
  %rh = udiv i64 %t, %kw
  %rw = urem i64 %t, %kw
  %ah = mul i64 %rh, %ldh
  %aw = mul i64 %rw, %ldw
  %at = add i64 %ah, %aw
  %abase = getelementptr i8, ptr %a, i64 %at
  %bt = mul i64 %t, %kbytes
  %bt16 = mul i64 %bt, 16
  %bbase = getelementptr i8, ptr %b, i64 %bt16
  br label %loop
loop:
  %i = phi i64 [0, %tap], [%next, %loop]
{nl.join(body)}
  %next = add i64 %i, 64
  %done = icmp eq i64 %next, %kbytes
  br i1 %done, label %tapend, label %loop
tapend:
  %tnext = add i64 %t, 1
  %tdone = icmp eq i64 %tnext, %taps
  br i1 %tdone, label %end, label %tap
end:
{cstore}
  ret i32 0
}}
"""


def register(dot: AmxInt8) -> str:
    """Register ``dot`` as a tensor intrinsic (once per process); returns its name."""
    from tvm.s_tir import TensorIntrin

    if TensorIntrin.get(dot.name, allow_missing=True) is None:
        TensorIntrin.register(dot.name, *(_conv_funcs(dot) if dot.kh else _dense_funcs(dot)))
    return dot.name


def register_for_trace(trace: object) -> None:
    """Register every schedx AMX-INT8 intrinsic a trace (JSON or text) tensorizes with."""
    text = str(trace)
    if NAME_PREFIX in text:
        for m, mt, nt, k, s, kh, kw in set(_NAME.findall(text)):
            register(AmxInt8(int(m), int(mt), int(k), int(s), int(kh), int(kw), int(nt)))


def _dense_funcs(dot: AmxInt8):
    """``C[rows, 16 nt] += A[rows, k] . B[nt, k/4, 16, 4]`` and its call."""
    from tvm.script import tirx as T

    rows, cols, nt, k, k4 = dot.rows, dot.cols, dot.nt, dot.k, dot.k // 4

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (rows, k), "uint8", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (nt, k4, PANEL, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (rows, cols), "int32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:cols], A[0:rows, 0:k], B[0:nt, 0:k4, 0:PANEL, 0:4])
            T.writes(C[0:rows, 0:cols])
            for r, i, kk in T.grid(rows, cols, k):
                with T.sblock("update"):
                    vr, vi, vk = T.axis.remap("SSR", [r, i, kk])
                    C[vr, vi] = C[vr, vi] + T.cast(A[vr, vk], "int32") * T.cast(
                        B[vi // PANEL, vk // 4, vi % PANEL, vk % 4], "int32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa, sc = T.int32(), T.int32()
        A = T.match_buffer(a, (rows, k), "uint8", offset_factor=1, strides=[sa, 1])
        B = T.match_buffer(b, (nt, k4, PANEL, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (rows, cols), "int32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:cols], A[0:rows, 0:k], B[0:nt, 0:k4, 0:PANEL, 0:4])
            T.writes(C[0:rows, 0:cols])
            T.evaluate(T.call_extern("int32", dot.function, T.address_of(C[0, 0]), T.Cast("int64", sc * 4),
                                     T.address_of(A[0, 0]), T.Cast("int64", sa), T.int64(0), T.int64(0), T.int64(1),
                                     T.int64(1), T.address_of(B[0, 0, 0, 0]), T.int64(k)))

    return desc, impl


def _conv_funcs(dot: AmxInt8):
    """``C[rows, 16 nt] += sum over taps A[rh, r * stride + rw, k] . B[nt, rh, rw, k/4, 16, 4]`` and
    its call (A: the padded NHWC input from the tile's first pixel, rows ``stride`` pixels apart)."""
    from tvm.script import tirx as T

    rows, cols, nt, k, k4, s, kh, kw = dot.rows, dot.cols, dot.nt, dot.k, dot.k // 4, dot.stride, dot.kh, dot.kw
    span = (rows - 1) * s + kw

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (kh, span, k), "uint8", offset_factor=1, strides=[T.int32(), T.int32(), 1])
        B = T.match_buffer(b, (nt, kh, kw, k4, PANEL, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (rows, cols), "int32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:cols], A[0:kh, 0:span, 0:k], B[0:nt, 0:kh, 0:kw, 0:k4, 0:PANEL, 0:4])
            T.writes(C[0:rows, 0:cols])
            for r, i, rh, rw, kk in T.grid(rows, cols, kh, kw, k):
                with T.sblock("update"):
                    vr, vi, vh, vw, vk = T.axis.remap("SSRRR", [r, i, rh, rw, kk])
                    C[vr, vi] = C[vr, vi] + T.cast(A[vh, vr * s + vw, vk], "int32") * T.cast(
                        B[vi // PANEL, vh, vw, vk // 4, vi % PANEL, vk % 4], "int32")

    @T.prim_func(s_tir=True)
    def desc1x1(a: T.handle, b: T.handle, c: T.handle) -> None:  # (the block drops its unit tap axes)
        A = T.match_buffer(a, (1, span, k), "uint8", offset_factor=1, strides=[T.int32(), T.int32(), 1])
        B = T.match_buffer(b, (nt, 1, 1, k4, PANEL, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (rows, cols), "int32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:cols], A[0:1, 0:span, 0:k], B[0:nt, 0:1, 0:1, 0:k4, 0:PANEL, 0:4])
            T.writes(C[0:rows, 0:cols])
            for r, i, _rh, _rw, kk in T.grid(rows, cols, 1, 1, k):
                with T.sblock("update"):
                    vr, vi, vk = T.axis.remap("SSR", [r, i, kk])
                    C[vr, vi] = C[vr, vi] + T.cast(A[0, vr * s, vk], "int32") * T.cast(
                        B[vi // PANEL, 0, 0, vk // 4, vi % PANEL, vk % 4], "int32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sh, sw, sc = T.int32(), T.int32(), T.int32()
        A = T.match_buffer(a, (kh, span, k), "uint8", offset_factor=1, strides=[sh, sw, 1])
        B = T.match_buffer(b, (nt, kh, kw, k4, PANEL, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (rows, cols), "int32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:cols], A[0:kh, 0:span, 0:k], B[0:nt, 0:kh, 0:kw, 0:k4, 0:PANEL, 0:4])
            T.writes(C[0:rows, 0:cols])
            T.evaluate(T.call_extern("int32", dot.function, T.address_of(C[0, 0]), T.Cast("int64", sc * 4),
                                     T.address_of(A[0, 0, 0]), T.Cast("int64", sw * s), T.Cast("int64", sh),
                                     T.Cast("int64", sw), T.int64(kw), T.int64(kh * kw),
                                     T.address_of(B[0, 0, 0, 0, 0, 0]), T.int64(k)))

    return (desc1x1 if kh == kw == 1 else desc), impl


__all__ = ["AMX_FN", "AMX_INT8_ENABLED", "FEATURES", "GRIDS", "K_STEP", "NAME_PREFIX", "AmxInt8", "amx_int8_ir",
           "available", "register", "register_for_trace"]
