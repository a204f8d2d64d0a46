"""The TensorIR description and implementation of an AMX convolution call, one design for the int8
(:mod:`explorer.schedule.amx_int8`) and the bf16 (:mod:`explorer.schedule.amx_bf16_conv`) kernels:
the same tiles of work over the padded NHWC input, only the element types and the instruction apart.

A call computes ``C[pixels, cols]`` (``cols`` output channels, panels of 16) over ``kh x kw`` taps of
``k`` input channels: its A rows read straight from the padded input, ``stride`` pixels apart; its B
the weights packed in panels ``[cols / 16, kh, kw, k / lane, 16, lane]`` (``lane`` values a 32-bit
lane: 4 int8, 2 bf16). Two shapes of pixels:

- **taps** (:func:`taps_funcs`): ``rows`` consecutive pixels of one output row, C ``[rows, cols]``;
- **rows** (:func:`rows_funcs`): ``y`` whole output rows of ``x`` pixels, C ``[y, x, cols]``, A and
  C rows one stride apart.

``zero``: the description holds the kernel's init (``C = 0``: the call computes the whole sum, its C
tiles from ``tilezero``) and reads no C; without it the call adds to C (its update alone: a
decomposed block, or a trace recorded before). A description drops each tap axis of extent 1 (a 1x1
kernel's both, a 1x7's rows, a 7x1's columns), as ``blockize`` drops it from the block it tensorizes:
one kept matched no such kernel, and the default fell back to a scalar loop nest (Inception v3's 1x7
and 7x1 convolutions at ~2 GFLOPS). The implementation calls the tile function
(:func:`explorer.schedule.amx_ir.conv_tiles_ir`) with byte strides: C's row, A's pixel stride, A's row,
A's pixel, taps a kernel row, taps, the bytes a tap reduces (and for rows: A's and C's stride between
output rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

PANEL = 16  # output channels of a B tile: the columns of a C tile
C_BYTES = 4  # an int32 or fp32 sum


@dataclass(frozen=True)
class Operands:
    """A call's element types: ``a`` the input's, ``b`` the packed weights' (``lane`` values a 32-bit
    lane), ``c`` the sums'; ``widen`` an operand as ``c``'s type, spelt as the kernel's block spells
    it (so tensorize matches it)."""

    a: str
    b: str
    c: str
    lane: int
    widen: Callable

    @property
    def size(self) -> int:
        """Bytes of an input value."""
        return 4 // self.lane


def zero_init(c_type: str, *shape: int):
    """``C[0:shape] = 0`` (``[rows, cols]`` or ``[y, x, cols]``) as a kernel's init: a TVMScript macro
    for the descriptions of calls that start from zero."""
    import tvm
    from tvm.script import tirx as T

    zero = tvm.tirx.const(0, c_type)
    if len(shape) == 2:
        rows, cols = shape

        @T.macro
        def init(C):
            with T.init():
                for r, i in T.grid(rows, cols):
                    with T.sblock("init"):
                        vr, vi = T.axis.remap("SS", [r, i])
                        C[vr, vi] = zero

        return init
    y, x, cols = shape

    @T.macro
    def init_rows(C):
        with T.init():
            for r, p, i in T.grid(y, x, cols):
                with T.sblock("init"):
                    vr, vp, vi = T.axis.remap("SSS", [r, p, i])
                    C[vr, vp, vi] = zero

    return init_rows


def taps_funcs(ops: Operands, function: str, *, rows: int, cols: int, k: int, stride: int, kh: int, kw: int,
               zero: bool, per_row: int, taps: int, kbytes: int):
    """``C[rows, cols] (+)= sum over taps widen(A[rh, r * stride + rw, c]) * widen(B[...])`` and its call
    of ``function`` (A: the padded NHWC input from the tile's first pixel): ``taps`` taps of ``kbytes``,
    ``per_row`` a kernel row (a folded kernel row: one tap of ``kw x k`` values a row)."""
    from tvm.script import tirx as T

    nt, kl, lane, s, size, widen = cols // PANEL, k // ops.lane, ops.lane, stride, ops.size, ops.widen
    span = (rows - 1) * s + kw
    init = zero_init(ops.c, rows, cols)

    @T.macro
    def regions(A, B, C):
        if zero:  # (parse-time Python: the call computes the whole sum from zero)
            T.reads(A[0:kh, 0:span, 0:k], B[0:nt, 0:kh, 0:kw, 0:kl, 0:PANEL, 0:lane])
        else:
            T.reads(C[0:rows, 0:cols], A[0:kh, 0:span, 0:k], B[0:nt, 0:kh, 0:kw, 0:kl, 0:PANEL, 0:lane])
        T.writes(C[0:rows, 0:cols])

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (kh, span, k), ops.a, offset_factor=1, strides=[T.int32(), T.int32(), 1])
        B = T.match_buffer(b, (nt, kh, kw, kl, PANEL, lane), ops.b, offset_factor=1)
        C = T.match_buffer(c, (rows, cols), ops.c, offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            regions(A, B, C)
            if zero:
                init(C)
            for r, i, rh, rw, kk in T.grid(rows, cols, kh, kw, k):
                with T.sblock("update"):
                    vr, vi = T.axis.remap("SS", [r, i])
                    vh = T.axis.reduce(kh, rh) if kh > 1 else T.meta_var(0)  # (unit tap axes dropped)
                    vw = T.axis.reduce(kw, rw) if kw > 1 else T.meta_var(0)
                    vk = T.axis.reduce(k, kk)
                    C[vr, vi] = C[vr, vi] + widen(A[vh, vr * s + vw, vk]) * widen(
                        B[vi // PANEL, vh, vw, vk // lane, vi % PANEL, vk % lane])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sh, sw, sc = T.int32(), T.int32(), T.int32()
        A = T.match_buffer(a, (kh, span, k), ops.a, offset_factor=1, strides=[sh, sw, 1])
        B = T.match_buffer(b, (nt, kh, kw, kl, PANEL, lane), ops.b, offset_factor=1)
        C = T.match_buffer(c, (rows, cols), ops.c, offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            regions(A, B, C)
            T.evaluate(T.call_extern("int32", function, T.address_of(C[0, 0]), T.Cast("int64", sc * C_BYTES),
                                     T.address_of(A[0, 0, 0]), T.Cast("int64", sw * (s * size)),
                                     T.Cast("int64", sh * size), T.Cast("int64", sw * size), T.int64(per_row),
                                     T.int64(taps), T.address_of(B[0, 0, 0, 0, 0, 0]), T.int64(kbytes)))

    return desc, impl


def rows_funcs(ops: Operands, function: str, *, y: int, x: int, cols: int, k: int, stride: int, kh: int, kw: int,
               zero: bool):
    """:func:`taps_funcs` for a call over ``y`` whole output rows of ``x`` pixels:
    ``C[y, x, cols] (+)= sum over taps widen(A[y * stride + rh, x * stride + rw, c]) * widen(B[...])``,
    A the padded input from the call's first pixel, C its first output pixel."""
    from tvm.script import tirx as T

    nt, kl, lane, s, size, widen = cols // PANEL, k // ops.lane, ops.lane, stride, ops.size, ops.widen
    height, span = (y - 1) * s + kh, (x - 1) * s + kw
    init = zero_init(ops.c, y, x, cols)

    @T.macro
    def regions(A, B, C):
        if zero:  # (parse-time Python: the call computes the whole sum from zero)
            T.reads(A[0:height, 0:span, 0:k], B[0:nt, 0:kh, 0:kw, 0:kl, 0:PANEL, 0:lane])
        else:
            T.reads(C[0:y, 0:x, 0:cols], A[0:height, 0:span, 0:k], B[0:nt, 0:kh, 0:kw, 0:kl, 0:PANEL, 0:lane])
        T.writes(C[0:y, 0:x, 0:cols])

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (height, span, k), ops.a, offset_factor=1, strides=[T.int32(), T.int32(), 1])
        B = T.match_buffer(b, (nt, kh, kw, kl, PANEL, lane), ops.b, offset_factor=1)
        C = T.match_buffer(c, (y, x, cols), ops.c, offset_factor=1, strides=[T.int32(), T.int32(), 1])
        with T.sblock("root"):
            regions(A, B, C)
            if zero:
                init(C)
            for r, p, i, rh, rw, kk in T.grid(y, x, cols, kh, kw, k):
                with T.sblock("update"):
                    vr, vp, vi = T.axis.remap("SSS", [r, p, i])
                    vh = T.axis.reduce(kh, rh) if kh > 1 else T.meta_var(0)  # (unit tap axes dropped)
                    vw = T.axis.reduce(kw, rw) if kw > 1 else T.meta_var(0)
                    vk = T.axis.reduce(k, kk)
                    C[vr, vp, vi] = C[vr, vp, vi] + widen(A[vr * s + vh, vp * s + vw, vk]) * widen(
                        B[vi // PANEL, vh, vw, vk // lane, vi % PANEL, vk % lane])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sh, sw, sy, sx = T.int32(), T.int32(), T.int32(), T.int32()
        A = T.match_buffer(a, (height, span, k), ops.a, offset_factor=1, strides=[sh, sw, 1])
        B = T.match_buffer(b, (nt, kh, kw, kl, PANEL, lane), ops.b, offset_factor=1)
        C = T.match_buffer(c, (y, x, cols), ops.c, offset_factor=1, strides=[sy, sx, 1])
        with T.sblock("root"):
            regions(A, B, C)
            T.evaluate(T.call_extern("int32", function, T.address_of(C[0, 0, 0]), T.Cast("int64", sx * C_BYTES),
                                     T.address_of(A[0, 0, 0]), T.Cast("int64", sw * (s * size)),
                                     T.Cast("int64", sh * size), T.Cast("int64", sw * size), T.int64(kw),
                                     T.int64(kh * kw), T.address_of(B[0, 0, 0, 0, 0, 0]), T.int64(k * size),
                                     T.Cast("int64", sh * (s * size)), T.Cast("int64", sy * C_BYTES)))

    return desc, impl


__all__ = ["C_BYTES", "Operands", "PANEL", "rows_funcs", "taps_funcs", "zero_init"]
