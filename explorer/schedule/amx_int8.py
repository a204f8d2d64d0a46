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

A convolution with few channels (a quantized stem's 3, padded to 4) folds each kernel row into
the reduction instead (:func:`foldable`: ``kw x C`` at most 64 bytes): the ``kw x C`` bytes one
output pixel reads from one input row are contiguous in NHWC, and the next pixel's ``stride x C``
bytes on, so one ``tileloadd`` with that row stride (overlapping rows) is the A tile of ``m``
pixels x ``kw x C`` bytes, and the weights of that kernel row (``[KW, C/4, 16, 4]`` of a panel)
its B tile of ``kw x C / 4`` rows: one ``tdpbusd`` per kernel row, no im2col, no byte read outside
the taps (ResNet's 7x7 stem: 7 ``tdpbusd`` of K = 28 per tile, not 49 of K = 4).

Linux grants a process its tile state only after ``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``; the kernel asks once per process before its first tile instruction, through
the entry and the flag it shares with the bf16 AMX kernels (:mod:`explorer.schedule.amx_ir`).
The tile code is a small LLVM IR function imported with TVM's ``pragma_import_llvm`` (as the bf16
one): TVM 0.27 has no AMX intrinsics of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from explorer.schedule.amx_conv_intrin import Operands, rows_funcs, taps_funcs, zero_init
from explorer.schedule.amx_ir import conv_tiles_ir, names_in, register_once

NAME_PREFIX = "schedx_amx_u8i8_"
_NAME = re.compile(NAME_PREFIX + r"(\d+)x(\d+)x(\d+)_k(\d+)_s(\d+)_t(\d+)x(\d+)(_f)?(_z)?(?:_y(\d+))?")
NAME_FORMAT = f"{NAME_PREFIX}<m>x<mt>x<nt>_k<K>_s<stride>_t<KH>x<KW>[_f][_z][_y<rows>]"  # _NAME, in words
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
    a matmul, ``A[m mt, k]``), A rows ``stride`` pixels apart, ``nt`` weight panels. ``fold``: the
    ``kw`` taps of a kernel row folded into one reduction of ``kw x k`` bytes (few channels, see
    :func:`foldable`): one ``tdpbusd`` per kernel row instead of ``k / 64`` per tap. ``zero``: the
    call computes the whole sum from zero (its description holds the kernel's init, so the block is
    tensorized without a separate loop of zeros, and the C tiles start from ``tilezero`` instead of
    loading the zeros just stored); without it (traces recorded before) it adds to C. ``out_rows`` > 1:
    the call's pixels are that many whole output rows of ``m`` pixels (a 7-wide map: each B tile feeds
    an ``mt x nt`` grid over ``mt`` rows instead of one row's tile; ``mt`` rows at a time, then one at a
    time, after one tile config: :func:`explorer.schedule.amx_ir.conv_tiles_ir`)."""

    m: int
    mt: int
    k: int
    stride: int = 1
    kh: int = 0
    kw: int = 0
    nt: int = 1
    fold: bool = False
    zero: bool = False
    out_rows: int = 1

    @property
    def rows(self) -> int:
        return self.m * max(self.mt, self.out_rows)

    @property
    def cols(self) -> int:
        return PANEL * self.nt

    @property
    def name(self) -> str:
        return (f"{NAME_PREFIX}{self.m}x{self.mt}x{self.nt}_k{self.k}_s{self.stride}_t{self.kh}x{self.kw}"
                f"{'_f' if self.fold else ''}{'_z' if self.zero else ''}"
                f"{f'_y{self.out_rows}' if self.out_rows > 1 else ''}")

    @property
    def kstep(self) -> int:
        """Input bytes a ``tdpbusd`` reduces: 64, or a folded kernel row's ``kw x k``."""
        return self.kw * self.k if self.fold else K_STEP

    @property
    def function(self) -> str:
        return amx_int8_function(self.m, self.mt, self.nt, self.kstep, self.zero, self.out_rows)

    @property
    def llvm_ir(self) -> str:
        return amx_int8_ir(self.m, self.mt, self.nt, self.kstep, self.zero, self.out_rows)


def foldable(kh: int, kw: int, k: int) -> bool:
    """Whether a ``kh x kw`` convolution of ``k`` input channels (padded to 4) reads a kernel row
    as one A tile row: fewer channels than a tile row takes (``k % 64``), ``kw x k`` bytes at most
    64 (a quantized stem's 7 x 4 = 28). The ``kw`` pixels of a kernel row are contiguous in the
    NHWC input (``kw x k`` bytes), and the next output pixel's start ``stride x k`` bytes on: one
    ``tileloadd`` with that row stride (rows overlap) reads the rows of all the tile's pixels."""
    return k % K_STEP != 0 and kh > 1 and kw > 1 and kw * k <= K_STEP


def amx_int8_function(m: int, mt: int, nt: int, kstep: int = K_STEP, zero: bool = False, out_rows: int = 1) -> str:
    """The name of the LLVM function :func:`amx_int8_ir` defines."""
    return (f"{AMX_FN}_{m}x{mt}x{nt}" + (f"_f{kstep}" if kstep != K_STEP else "") + ("_z" if zero else "")
            + (f"_y{out_rows}" if out_rows > 1 else ""))


def amx_int8_ir(m: int, mt: int, nt: int, kstep: int = K_STEP, zero: bool = False, out_rows: int = 1) -> str:
    """The LLVM IR of one call: tile config (``mt x nt`` C tiles and ``mt`` A tiles of ``m`` rows x
    ``kstep`` bytes, ``nt`` B tiles of ``kstep / 4`` rows), the permission request (once per
    process), the C tiles loaded (``zero``: ``tilezero``), then for each tap and each ``kstep``
    input bytes ``mt`` A tiles, ``nt`` B tiles and ``mt x nt`` ``tdpbusd``; the C tiles stored."""
    return conv_tiles_ir(amx_int8_function(m, mt, nt, kstep, zero, out_rows), "tdpbusd", m, mt, nt, kstep, zero_c=zero,
                         out_rows=out_rows)


def register(dot: AmxInt8) -> str:
    """Register ``dot`` as a tensor intrinsic (once per process); returns its name."""
    funcs = _rows_funcs if dot.out_rows > 1 else _conv_funcs if dot.kh else _dense_funcs
    return register_once(dot.name, lambda: funcs(dot))


def _of_fields(m, mt, nt, k, s, kh, kw, fold, zero, out_rows) -> AmxInt8:
    """The intrinsic a name's fields (``_NAME``'s groups) say (not registered)."""
    return AmxInt8(int(m), int(mt), int(k), int(s), int(kh), int(kw), int(nt), bool(fold), bool(zero),
                   int(out_rows or 1))


def is_name(name: str) -> bool:
    """Whether ``name`` is an AMX-INT8 intrinsic that :func:`register_for_trace` registers under that
    very name (no leading zeros, no default spelt out)."""
    found = _NAME.fullmatch(name)
    return found is not None and _of_fields(*found.groups()).name == name


def register_for_trace(trace: object) -> None:
    """Register every schedx AMX-INT8 intrinsic a trace (JSON or text) tensorizes with."""
    for fields in names_in(trace, NAME_PREFIX, _NAME):
        register(_of_fields(*fields))


def _int32(v):
    """An operand's value as an int32 sum's: what the int8 kernels' blocks spell."""
    from tvm.script import tirx as T

    return T.cast(v, "int32")


OPERANDS = Operands("uint8", "int8", "int32", 4, _int32)


def _dense_funcs(dot: AmxInt8):
    """``C[rows, 16 nt] += A[rows, k] . B[nt, k/4, 16, 4]`` (``zero``: ``=``, from the kernel's init) and
    its call."""
    from tvm.script import tirx as T

    rows, cols, nt, k, k4, zero = dot.rows, dot.cols, dot.nt, dot.k, dot.k // 4, dot.zero
    init = zero_init("int32", rows, cols)

    @T.macro
    def regions(A, B, C):
        if zero:  # (parse-time Python: the call computes the whole sum from zero)
            T.reads(A[0:rows, 0:k], B[0:nt, 0:k4, 0:PANEL, 0:4])
        else:
            T.reads(C[0:rows, 0:cols], A[0:rows, 0:k], B[0:nt, 0:k4, 0:PANEL, 0:4])
        T.writes(C[0:rows, 0:cols])

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (rows, k), "uint8", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (nt, k4, PANEL, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (rows, cols), "int32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            regions(A, B, C)
            if zero:
                init(C)
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
            regions(A, B, C)
            T.evaluate(T.call_extern("int32", dot.function, T.address_of(C[0, 0]), T.Cast("int64", sc * 4),
                                     T.address_of(A[0, 0]), T.Cast("int64", sa), T.int64(0), T.int64(0), T.int64(1),
                                     T.int64(1), T.address_of(B[0, 0, 0, 0]), T.int64(k)))

    return desc, impl


def _conv_funcs(dot: AmxInt8):
    """``C[rows, 16 nt] += sum over taps A[rh, r * stride + rw, k] . B[nt, rh, rw, k/4, 16, 4]``
    (``zero``: ``=``, from the kernel's init) and its call: :func:`explorer.schedule.amx_conv_intrin.taps_funcs`
    (folded: each kernel row one tap of ``kw x k`` bytes; A's pixels are ``k`` bytes apart, the block
    reads all the input's channels)."""
    per_row, taps, kbytes = (1, dot.kh, dot.kw * dot.k) if dot.fold else (dot.kw, dot.kh * dot.kw, dot.k)
    return taps_funcs(OPERANDS, dot.function, rows=dot.rows, cols=dot.cols, k=dot.k, stride=dot.stride, kh=dot.kh,
                      kw=dot.kw, zero=dot.zero, per_row=per_row, taps=taps, kbytes=kbytes)


def _rows_funcs(dot: AmxInt8):
    """:func:`_conv_funcs` for a call over ``out_rows`` whole output rows of ``m`` pixels:
    :func:`explorer.schedule.amx_conv_intrin.rows_funcs`."""
    return rows_funcs(OPERANDS, dot.function, y=dot.out_rows, x=dot.m, cols=dot.cols, k=dot.k, stride=dot.stride,
                      kh=dot.kh, kw=dot.kw, zero=dot.zero)


__all__ = ["AMX_FN", "AMX_INT8_ENABLED", "FEATURES", "GRIDS", "K_STEP", "NAME_FORMAT", "NAME_PREFIX", "AmxInt8",
           "amx_int8_function", "amx_int8_ir", "available", "foldable", "is_name", "register", "register_for_trace"]
