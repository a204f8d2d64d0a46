"""AMX-BF16 tile kernels for the direct bf16 convolutions of :mod:`explorer.passes.bf16_conv_nhwc`:
``tdpbf16ps`` (bf16 pairs, fp32 sums) on A rows read straight from the padded NHWC bf16 input, the
way :mod:`explorer.schedule.amx_int8` reads its uint8 input (no im2col).

The weights are packed the way a B tile wants them (``[O/16, KH, KW, C/2, 16, 2]``): 16
consecutive channel pairs of one panel are one 16 x 64-byte B tile, contiguous. One call computes
``rows = m x mt`` output pixels (``mt`` A/C tiles of ``m`` rows, along the output width) by ``16 nt``
output channels over the whole reduction; the fp32 C tiles stay in tile registers from the first
tap to the last. Two ways to walk the reduction:

- **taps** (``C`` a multiple of 32): for each of the ``KH x KW`` taps, an A tile of ``m`` pixels
  ``stride`` pixels apart, 32 channels (64 bytes) a ``tdpbf16ps``;
- **rows of taps** (``KW x C <= 32``, a stem's 7 x 4 = 28: 3 channels padded to a pair of pairs): for
  one kernel row the ``KW x C`` values of an output pixel are contiguous in NHWC, and the next
  pixel's start ``stride x C`` values on, so one A tile of ``m`` rows x ``KW x C`` bf16 (rows
  overlapping in memory, which ``tileloadd`` allows) and one ``tdpbf16ps`` take the whole kernel
  row: ``KH`` products a call instead of ``KH x KW``;
- **taps across rows** (``flat``: stride 1 and output rows too short for a tile, a 7x7 map): the
  tile's rows are consecutive pixels of the flattened padded input, across output rows (the
  ``KW - 1`` columns between two rows computed and dropped): tap ``(rh, rw)`` of a tile starts
  ``rh x W' + rw`` pixels on, ``W'`` the padded width.

The tile code is a small LLVM IR function (:func:`explorer.schedule.amx_ir.conv_tiles_ir`: tile
config, the permission request once per process, loads, products, stores) imported with TVM's
``pragma_import_llvm``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from explorer.schedule.amx_conv_intrin import Operands, rows_funcs, taps_funcs, zero_init
from explorer.schedule.amx_ir import conv_tiles_ir, names_in, register_once
from explorer.schedule.bf16_dot import PAIR, PANEL

NAME_PREFIX = "schedx_amx_bf16conv_"
_NAME = re.compile(NAME_PREFIX + r"(\d+)x(\d+)x(\d+)_k(\d+)_s(\d+)_t(\d+)x(\d+)_(taps|rows|flat)(\d*)(?:_y(\d+))?(?:_g(\d+)x(\d+))?(_u)?")
# the init of a call's sums, which the call itself writes (tilezero): no code (register_zero)
ZERO_PREFIX = "schedx_amx_bf16conv_zeroed_by_call_"
_ZERO_NAME = re.compile(ZERO_PREFIX + r"(\d+)x(\d+)(?:_y(\d+))?")
# _NAME and _ZERO_NAME, in words
NAME_FORMAT = f"{NAME_PREFIX}<m>x<mt>x<nt>_k<K>_s<stride>_t<KH>x<KW>_<taps|rows|flat<width>>[_y<rows>][_g<R>x<C>][_u]"
ZERO_FORMAT = f"{ZERO_PREFIX}<rows>x<cols>[_y<rows>]"
AMX_FN = "schedx_amx_bf16_conv_tile"
K_CHANNELS = 32  # input channels per tdpbf16ps in the taps walk (a 64-byte tile row of bf16)
TILE_ROW_BYTES = 64


@dataclass(frozen=True)
class AmxBf16Conv:
    """``C[m mt, 16 nt] = A . B`` over ``kh x kw`` taps of ``k`` input channels, A rows ``stride``
    pixels apart; ``row_taps``: a kernel row's ``kw x k`` values one tile row (module docstring)."""

    m: int
    mt: int
    nt: int
    k: int
    stride: int
    kh: int
    kw: int
    row_taps: bool = False
    flat: int = 0  # tiles across output rows (explorer.passes.bf16_conv_nhwc.conv2d_nhwc_bf16_flat): the padded width
    row_groups: int = 1  # grids of m mt pixels x 16 nt channels a call (one ldtilecfg for all of them)
    col_groups: int = 1
    # the description is the reduction's update alone (the block decomposed, its init tensorized with
    # register_zero: no code); False (traces recorded before): the description holds the init
    update: bool = False
    # the call's pixels are whole output rows, this many (its m mt / out_rows pixels a row: a 28-pixel
    # row's two 14-row tiles, two rows a call: 4 x 1 tiles); its A and C rows one stride apart. More
    # rows than mt (one tile a row): the grid walks them mt at a time, the rest a row at a time (a
    # 7x7 map: 3 pairs and a row)
    out_rows: int = 1

    @property
    def rows(self) -> int:
        """Output pixels a call: a call over more output rows than tile rows takes them one tile a
        row (``mt`` at a time, :func:`explorer.schedule.amx_ir.conv_tiles_ir`)."""
        return self.m * max(self.mt, self.out_rows) * self.row_groups

    @property
    def cols(self) -> int:
        return PANEL * self.nt * self.col_groups

    @property
    def kstep(self) -> int:
        """Bytes of an A tile row: one tap's 32 channels, or a kernel row's ``kw x k`` values."""
        return self.kw * self.k * 2 if self.row_taps else TILE_ROW_BYTES

    @property
    def name(self) -> str:
        walk = "rows" if self.row_taps else f"flat{self.flat}" if self.flat else "taps"
        return (f"{NAME_PREFIX}{self.m}x{self.mt}x{self.nt}_k{self.k}_s{self.stride}_t{self.kh}x{self.kw}"
                f"_{walk}{self._rows}{self._groups}{'_u' if self.update else ''}")

    @property
    def _rows(self) -> str:
        return f"_y{self.out_rows}" if self.out_rows > 1 else ""

    @property
    def _groups(self) -> str:
        return f"_g{self.row_groups}x{self.col_groups}" if self.row_groups * self.col_groups > 1 else ""

    @property
    def function(self) -> str:
        return f"{AMX_FN}_{self.m}x{self.mt}x{self.nt}_b{self.kstep}{self._rows}{self._groups}"

    @property
    def llvm_ir(self) -> str:
        return conv_tiles_ir(self.function, "tdpbf16ps", self.m, self.mt, self.nt, self.kstep, zero_c=True,
                             row_groups=self.row_groups, col_groups=self.col_groups, out_rows=self.out_rows)


def row_taps_fit(channels: int, kw: int) -> bool:
    """Whether a kernel row of ``kw`` taps of ``channels`` (pairs) fits one A tile row."""
    return channels % PAIR == 0 and kw * channels * 2 <= TILE_ROW_BYTES


def register(dot: AmxBf16Conv) -> str:
    """Register ``dot`` as a tensor intrinsic (once per process); returns its name."""
    funcs = _flat_funcs if dot.flat else _rows_funcs if dot.out_rows > 1 else _funcs
    return register_once(dot.name, lambda: funcs(dot))


def register_zero(rows: int, cols: int, out_rows: int = 1) -> str:
    """Register the init of an update-form call's ``rows x cols`` fp32 sums (``C = 0``) as a tensor
    intrinsic whose implementation is no code: the call that follows starts its C tiles from
    ``tilezero`` and stores every sum (the zeros would be stored only to be overwritten: a
    ``memset`` per call, 7% of a 3x3 64-channel kernel). Only for the init block of a call made
    with ``update=True``; ``out_rows`` > 1: sums ``[out_rows, rows / out_rows, cols]``; returns its name."""
    return register_once(zero_name(rows, cols, out_rows), lambda: _zero_funcs(rows, cols, out_rows))


def zero_name(rows: int, cols: int, out_rows: int = 1) -> str:
    """The name :func:`register_zero` registers the init of ``rows x cols`` sums under."""
    return f"{ZERO_PREFIX}{rows}x{cols}" + (f"_y{out_rows}" if out_rows > 1 else "")


def _of_fields(m, mt, nt, k, s, kh, kw, walk, width, y, gr, gc, update) -> AmxBf16Conv:
    """The intrinsic a name's fields (``_NAME``'s groups) say (not registered)."""
    return AmxBf16Conv(int(m), int(mt), int(nt), int(k), int(s), int(kh), int(kw), walk == "rows", int(width or 0),
                       int(gr or 1), int(gc or 1), bool(update), int(y or 1))


def _zero_of_fields(rows, cols, y) -> tuple[int, int, int]:
    """The arguments of :func:`register_zero` an init's name's fields (``_ZERO_NAME``'s groups) say."""
    return int(rows), int(cols), int(y or 1)


def is_name(name: str) -> bool:
    """Whether ``name`` is an AMX-BF16 convolution intrinsic (or the init of one) that
    :func:`register_for_trace` registers under that very name (no leading zeros, no default spelt
    out, a width on ``flat`` alone)."""
    if (found := _NAME.fullmatch(name)) is not None:
        return _of_fields(*found.groups()).name == name
    found = _ZERO_NAME.fullmatch(name)
    return found is not None and zero_name(*_zero_of_fields(*found.groups())) == name


def register_for_trace(trace: object) -> None:
    """Register every schedx AMX-BF16 convolution intrinsic a trace (JSON or text) tensorizes with."""
    for fields in names_in(trace, NAME_PREFIX, _NAME):
        register(_of_fields(*fields))
    for fields in names_in(trace, ZERO_PREFIX, _ZERO_NAME):
        register_zero(*_zero_of_fields(*fields))


def _f32(v):
    """The fp32 value of bf16 bits ``v`` in a description, spelt as
    :func:`explorer.schedule.bf16_dot.widen` spells it (so tensorize matches the kernels)."""
    from tvm.script import tirx as T

    return T.reinterpret("float32", T.shift_left(T.Cast("uint32", v), T.uint32(16)))


OPERANDS = Operands("uint16", "uint16", "float32", PAIR, _f32)


def _zero_funcs(rows: int, cols: int, out_rows: int = 1):
    """``C[rows, cols] = 0`` (``out_rows`` > 1: ``C[out_rows, rows / out_rows, cols]``) and an
    implementation without code (:func:`register_zero`)."""
    from tvm.script import tirx as T

    y, x = out_rows, rows // out_rows

    @T.prim_func(s_tir=True)
    def desc(c: T.handle) -> None:
        C = T.match_buffer(c, (rows, cols), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:rows, 0:cols])
            for r, i in T.grid(rows, cols):
                with T.sblock("init"):
                    vr, vi = T.axis.remap("SS", [r, i])
                    C[vr, vi] = T.float32(0)

    @T.prim_func(s_tir=True)
    def desc_rows(c: T.handle) -> None:
        C = T.match_buffer(c, (y, x, cols), "float32", offset_factor=1, strides=[T.int32(), T.int32(), 1])
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:y, 0:x, 0:cols])
            for r, p, i in T.grid(y, x, cols):
                with T.sblock("init"):
                    vr, vp, vi = T.axis.remap("SSS", [r, p, i])
                    C[vr, vp, vi] = T.float32(0)

    @T.prim_func(s_tir=True)
    def impl(c: T.handle) -> None:
        sc = T.int32()
        C = T.match_buffer(c, (rows, cols), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:rows, 0:cols])
            T.evaluate(0)

    @T.prim_func(s_tir=True)
    def impl_rows(c: T.handle) -> None:
        sy, sx = T.int32(), T.int32()
        C = T.match_buffer(c, (y, x, cols), "float32", offset_factor=1, strides=[sy, sx, 1])
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:y, 0:x, 0:cols])
            T.evaluate(0)

    return (desc_rows, impl_rows) if out_rows > 1 else (desc, impl)


def _funcs(dot: AmxBf16Conv):
    """``C[rows, 16 nt] = sum over taps f32(A[rh, r * stride + rw, c]) * f32(B[nt, rh, rw, c/2, 16, 2])``
    (the whole sum, from zero: the call starts its C tiles with ``tilezero`` instead of loading
    zeros; the description holds the kernel's init, or with ``update`` the update alone, its init
    a block of its own tensorized with :func:`register_zero`) and its call:
    :func:`explorer.schedule.amx_conv_intrin.taps_funcs` (a kernel row's taps as one tile row: one
    tap per kernel row, its bytes the row's)."""
    k, kh, kw = dot.k, dot.kh, dot.kw
    per_row, taps, kbytes = (1, kh, kw * k * 2) if dot.row_taps else (kw, kh * kw, k * 2)
    return taps_funcs(OPERANDS, dot.function, rows=dot.rows, cols=dot.cols, k=k, stride=dot.stride, kh=kh, kw=kw,
                      zero=not dot.update, per_row=per_row, taps=taps, kbytes=kbytes)


def _rows_funcs(dot: AmxBf16Conv):
    """:func:`_funcs` (update form) for a call over ``out_rows`` whole output rows of ``x`` pixels:
    :func:`explorer.schedule.amx_conv_intrin.rows_funcs`."""
    return rows_funcs(OPERANDS, dot.function, y=dot.out_rows, x=dot.rows // dot.out_rows, cols=dot.cols, k=dot.k,
                      stride=dot.stride, kh=dot.kh, kw=dot.kw, zero=False)


def _flat_funcs(dot: AmxBf16Conv):
    """:func:`_funcs` for a kernel tiled across rows: A the flattened padded input from the tile's
    first pixel, tap ``(rh, rw)`` of row ``r`` at ``r + rh * width + rw``."""
    from tvm.script import tirx as T

    rows, cols, nt, k, k2, kh, kw, width = dot.rows, dot.cols, dot.cols // PANEL, dot.k, dot.k // PAIR, dot.kh, dot.kw, dot.flat
    update = dot.update
    span = rows + (kh - 1) * width + kw - 1
    init = zero_init("float32", rows, cols)

    @T.macro
    def regions(A, B, C):
        if update:  # (parse-time Python: the sums read, the init a block of its own)
            T.reads(C[0:rows, 0:cols], A[0:span, 0:k], B[0:nt, 0:kh, 0:kw, 0:k2, 0:PANEL, 0:PAIR])
        else:
            T.reads(A[0:span, 0:k], B[0:nt, 0:kh, 0:kw, 0:k2, 0:PANEL, 0:PAIR])
        T.writes(C[0:rows, 0:cols])

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (span, k), "uint16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (nt, kh, kw, k2, PANEL, PAIR), "uint16", offset_factor=1)
        C = T.match_buffer(c, (rows, cols), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            regions(A, B, C)
            if not update:
                init(C)
            for r, i, rh, rw, kk in T.grid(rows, cols, kh, kw, k):
                with T.sblock("update"):
                    vr, vi = T.axis.remap("SS", [r, i])
                    # a tap axis of extent 1 dropped, as blockize drops it (a 1x7 or 7x1 kernel:
                    # explorer.schedule.amx_conv_intrin)
                    vh = T.axis.reduce(kh, rh) if kh > 1 else T.meta_var(0)
                    vw = T.axis.reduce(kw, rw) if kw > 1 else T.meta_var(0)
                    vk = T.axis.reduce(k, kk)
                    C[vr, vi] = C[vr, vi] + _f32(A[vr + vh * width + vw, vk]) * _f32(
                        B[vi // PANEL, vh, vw, vk // PAIR, vi % PANEL, vk % PAIR])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa, sc = T.int32(), T.int32()
        A = T.match_buffer(a, (span, k), "uint16", offset_factor=1, strides=[sa, 1])
        B = T.match_buffer(b, (nt, kh, kw, k2, PANEL, PAIR), "uint16", offset_factor=1)
        C = T.match_buffer(c, (rows, cols), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            regions(A, B, C)
            T.evaluate(T.call_extern("int32", dot.function, T.address_of(C[0, 0]), T.Cast("int64", sc * 4),
                                     T.address_of(A[0, 0]), T.Cast("int64", sa * 2),
                                     T.Cast("int64", sa * (2 * width)), T.Cast("int64", sa * 2), T.int64(kw),
                                     T.int64(kh * kw), T.address_of(B[0, 0, 0, 0, 0, 0]), T.int64(k * 2)))

    return desc, impl


__all__ = ["AMX_FN", "K_CHANNELS", "NAME_FORMAT", "NAME_PREFIX", "ZERO_FORMAT", "ZERO_PREFIX", "AmxBf16Conv", "is_name",
           "register", "register_for_trace", "register_zero", "row_taps_fit", "zero_name"]
