"""The TensorIR descriptions and implementations of :mod:`explorer.schedule.bf16_dot`'s
intrinsics (what each computes, and the call that computes it), and their registration. The
descriptions spell the bf16 widening as :func:`explorer.schedule.bf16_dot.widen` does, so
tensorize matches the kernels."""

from __future__ import annotations

import re

from explorer.schedule.amx_ir import names_in, register_once
from explorer.schedule.bf16_dot import DOT_FN, NAME_PREFIX, PAIR, PANEL, PREFETCH_FN, AmxBf16, Bf16Dot

_NAME = re.compile(NAME_PREFIX + r"(avx512bf16_(\d+)x(\d+)(?:_w(\d+))?(?:_s(\d+))?(?:_pf(\d+))?|amx_(16|32)x(16|32)x(\d+)(?:_g(\d+)x(\d+))?(?:_kb(\d+))?(_zero)?(_u)?)")
# _NAME, in words: its two families
AVX512BF16_FORMAT = f"{NAME_PREFIX}avx512bf16_<rows>x<16 panels>[_w<weights rank>][_s<stride>][_pf<panels ahead>]"
AMX_FORMAT = f"{NAME_PREFIX}amx_<rows>x<cols>x<K>[_g<R>x<C>][_kb<N>][_zero][_u]"


def register(dot: Bf16Dot | AmxBf16) -> str:
    """Register ``dot`` as a tensor intrinsic (once per process); returns its name."""
    return register_once(dot.name, lambda: amx_funcs(dot) if isinstance(dot, AmxBf16) else
                         dot_funcs(dot.rows) if dot.one_panel else
                         panel_funcs(dot.rows, dot.panels, dot.weights_rank, dot.stride, dot.ahead))


def _of_fields(_, rows, lanes, rank, stride, ahead, m, n, k, gr, gc, kb, zero, update) -> Bf16Dot | AmxBf16:
    """The intrinsic a name's fields (``_NAME``'s groups) say (not registered)."""
    if rows:
        return Bf16Dot(int(rows), int(lanes) // PANEL, int(rank or 3), int(stride or 1), ahead=int(ahead or 0))
    return AmxBf16(int(k), int(m) // 16, int(n) // PANEL, zero=bool(zero), row_groups=int(gr or 1),
                   col_groups=int(gc or 1), update=bool(update), kblocks=int(kb or 1))


def is_name(name: str) -> bool:
    """Whether ``name`` is a bf16 intrinsic (AVX512-BF16 or AMX-BF16) that :func:`register_for_trace`
    registers under that very name (no leading zeros, no default spelt out)."""
    found = _NAME.fullmatch(name)
    try:
        return found is not None and _of_fields(*found.groups()).name == name
    except ValueError:  # fields no intrinsic has (no rows, no panels, a zero stride)
        return False


def register_for_trace(trace: object) -> None:
    """Register every schedx bf16 intrinsic a trace (JSON or text) tensorizes with."""
    for fields in names_in(trace, NAME_PREFIX, _NAME):
        register(_of_fields(*fields))


def dot_funcs(rows: int):
    """``C[rows, 16] += A[rows, 2] . B[16, 2]`` and its ``vdpbf16ps`` implementation: the pair of
    A as one 32-bit word broadcast to 16 lanes, the 64-byte panel row of B as 16 words."""
    from tvm.script import tirx as T

    lanes = PANEL

    def over_rows(name: str, body):
        """``name``: ``C[rows, 16] += A[rows, 2] . B[16, 2]`` computed by the macro ``body(A, B, C)``."""
        @T.prim_func(s_tir=True)
        def func(a: T.handle, b: T.handle, c: T.handle) -> None:
            A = T.match_buffer(a, (rows, PAIR), "uint16", offset_factor=1, strides=[T.int32(), 1])
            B = T.match_buffer(b, (lanes, PAIR), "uint16", offset_factor=1)
            C = T.match_buffer(c, (rows, lanes), "float32", offset_factor=1, strides=[T.int32(), 1])
            with T.sblock("root"):
                T.reads(C[0:rows, 0:lanes], A[0:rows, 0:PAIR], B[0:lanes, 0:PAIR])
                T.writes(C[0:rows, 0:lanes])
                body(A, B, C)
        return func.with_attr("global_symbol", name)

    @T.macro
    def product(A, B, C):
        for r, i, k in T.grid(rows, lanes, PAIR):
            with T.sblock("update"):
                vr, vi, vk = T.axis.remap("SSR", [r, i, k])
                C[vr, vi] = C[vr, vi] + T.reinterpret(
                    "float32", T.shift_left(T.Cast("uint32", A[vr, vk]), T.uint32(16))) * T.reinterpret(
                    "float32", T.shift_left(T.Cast("uint32", B[vi, vk]), T.uint32(16)))

    @T.macro
    def dot_calls(A, B, C):
        for r in T.unroll(rows):
            C[r, T.ramp(T.int32(0), 1, lanes)] = T.call_extern(
                "float32x16", DOT_FN, C[r, T.ramp(T.int32(0), 1, lanes)],
                T.broadcast(T.reinterpret("int32", A[r, T.ramp(T.int32(0), 1, PAIR)]), lanes),
                T.reinterpret("int32x16", B[0, T.ramp(T.int32(0), 1, PAIR * lanes)]))

    desc, impl = over_rows("desc", product), over_rows("impl", dot_calls)

    @T.prim_func(s_tir=True)
    def desc_one_row(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (1, PAIR), "uint16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (lanes, PAIR), "uint16", offset_factor=1)
        C = T.match_buffer(c, (1, lanes), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0, 0:lanes], A[0, 0:PAIR], B[0:lanes, 0:PAIR])
            T.writes(C[0, 0:lanes])
            for i, k in T.grid(lanes, PAIR):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[0, vi] = C[0, vi] + T.reinterpret(
                        "float32", T.shift_left(T.Cast("uint32", A[0, vk]), T.uint32(16))) * T.reinterpret(
                        "float32", T.shift_left(T.Cast("uint32", B[vi, vk]), T.uint32(16)))

    # one row: the block to tensorize has no row iterator left (a unit one is dropped), nor may the description
    return (desc_one_row if rows == 1 else desc), impl


def panel_funcs(rows: int, panels: int, rank: int = 3, stride: int = 1, ahead: int = 0):
    """``C[rows, 16 panels] += A[rows x stride, 2] . B[panels, 16, 2]`` (loops panel, row, lane, pair: the
    order the schedules tile in; every ``stride``-th row of A; B read as ``rank`` dimensions, unit ones
    between its panels and their 16 x 2)
    and its ``vdpbf16ps`` implementation, row by row, each row's broadcast pair feeding every panel
    (:class:`explorer.schedule.bf16_dot.Bf16Dot`); ``ahead``: each call first asks for each panel's line
    that many panels on into L2."""
    from tvm.script import tirx as T

    lanes, units, span = PANEL, (0,) * (rank - 3), (rows - 1) * stride + 1

    def over_panels(name: str, body):
        import tvm

        steps = [tvm.tirx.Var(f"unit_stride{d}", "int32") for d in range(len(units))]  # (one each: not one shared)

        @T.prim_func(s_tir=True)
        def func(a: T.handle, b: T.handle, c: T.handle) -> None:
            A = T.match_buffer(a, (span, PAIR), "uint16", offset_factor=1, strides=[T.int32(), 1])
            B = T.match_buffer(b, (panels, *(1 for _ in units), lanes, PAIR), "uint16", offset_factor=1,
                               strides=[T.int32(), *steps, PAIR, 1])
            C = T.match_buffer(c, (rows, panels * lanes), "float32", offset_factor=1, strides=[T.int32(), 1])
            with T.sblock("root"):
                T.reads(C[0:rows, 0:panels * lanes], A[0:span, 0:PAIR], B[0:panels, *(slice(0, 1) for _ in units), 0:lanes, 0:PAIR])
                T.writes(C[0:rows, 0:panels * lanes])
                body(A, B, C)
        return func.with_attr("global_symbol", name)

    @T.macro
    def update(A, B, C, vr, vj, vk):
        C[vr, vj] = C[vr, vj] + T.reinterpret(
            "float32", T.shift_left(T.Cast("uint32", A[vr * stride, vk]), T.uint32(16))) * T.reinterpret(
            "float32", T.shift_left(T.Cast("uint32", B[vj // lanes, *units, vj % lanes, vk]), T.uint32(16)))

    @T.macro
    def product(A, B, C):
        for p, r, i, k in T.grid(panels, rows, lanes, PAIR):
            with T.sblock("update"):
                vr = T.axis.spatial(rows, r)
                vj = T.axis.spatial(panels * lanes, p * lanes + i)
                vk = T.axis.reduce(PAIR, k)
                update(A, B, C, vr, vj, vk)

    @T.macro
    def one_panel(A, B, C):  # (the schedule's block has no unit panel loop to match)
        for r, i, k in T.grid(rows, lanes, PAIR):
            with T.sblock("update"):
                vr, vj, vk = T.axis.remap("SSR", [r, i, k])
                update(A, B, C, vr, vj, vk)

    @T.macro
    def prefetch(B):  # each panel's line ``ahead`` panels on (past B's panels: a prefetch never faults)
        for p in T.unroll(panels):
            T.evaluate(T.call_extern("void", PREFETCH_FN, T.address_of(B[p + ahead, *units, 0, 0])))

    @T.macro
    def dot_calls(A, B, C):
        for r in T.unroll(rows):
            for p in T.unroll(panels):
                C[r, T.ramp(p * lanes, 1, lanes)] = T.call_extern(
                    "float32x16", DOT_FN, C[r, T.ramp(p * lanes, 1, lanes)],
                    T.broadcast(T.reinterpret("int32", A[r * stride, T.ramp(T.int32(0), 1, PAIR)]), lanes),
                    T.reinterpret("int32x16", B[p, *units, 0, T.ramp(T.int32(0), 1, PAIR * lanes)]))

    @T.macro
    def prefetched(A, B, C):
        prefetch(B)
        dot_calls(A, B, C)

    return (over_panels("desc", product if panels > 1 else one_panel),
            over_panels("impl", prefetched if ahead else dot_calls))


def amx_funcs(dot):
    """``C[rows, cols] += A[rows, k] . B[cols / 16, k/2, 16, 2]`` (``dot.zero``: ``=``, the sum from
    zero; the block of :attr:`~explorer.schedule.bf16_dot.AmxBf16.rows` x ``cols``, every group's)
    and its AMX implementation (one
    call of the IR function :func:`explorer.schedule.bf16_dot.amx_ir`: tile config, permission
    once per process, tileloadd/tdpbf16ps over k, tilestored)."""
    from tvm.script import tirx as T

    k, rows, cols, nt = dot.k, dot.rows, dot.cols, dot.nt * dot.col_groups  # nt: the block's panels
    half = k // PAIR

    @T.macro
    def product(A, B, C):
        for r, i, k2, kk in T.grid(rows, cols, half, PAIR):
            with T.sblock("update"):
                vr, vi, vk2, vkk = T.axis.remap("SSRR", [r, i, k2, kk])
                C[vr, vi] = C[vr, vi] + T.reinterpret(
                    "float32", T.shift_left(T.Cast("uint32", A[vr, vk2 * 2 + vkk]), T.uint32(16))) * T.reinterpret(
                    "float32", T.shift_left(T.Cast("uint32", B[vi // PANEL, vk2, vi % PANEL, vkk]), T.uint32(16)))

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (rows, k), "uint16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (nt, half, PANEL, PAIR), "uint16", offset_factor=1,
                           strides=[T.int32(), PANEL * PAIR, PAIR, 1])
        C = T.match_buffer(c, (rows, cols), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:cols], A[0:rows, 0:k], B[0:nt, 0:half, 0:PANEL, 0:PAIR])
            T.writes(C[0:rows, 0:cols])
            product(A, B, C)

    @T.prim_func(s_tir=True)
    def desc_zero(a: T.handle, b: T.handle, c: T.handle) -> None:  # the whole sum, from zero (the block's init)
        A = T.match_buffer(a, (rows, k), "uint16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (nt, half, PANEL, PAIR), "uint16", offset_factor=1,
                           strides=[T.int32(), PANEL * PAIR, PAIR, 1])
        C = T.match_buffer(c, (rows, cols), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(A[0:rows, 0:k], B[0:nt, 0:half, 0:PANEL, 0:PAIR])
            T.writes(C[0:rows, 0:cols])
            with T.init():
                for r, i in T.grid(rows, cols):
                    with T.sblock("init"):
                        vr, vi = T.axis.remap("SS", [r, i])
                        C[vr, vi] = T.float32(0)
            product(A, B, C)

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa, sb, sc = T.int32(), T.int32(), T.int32()
        A = T.match_buffer(a, (rows, k), "uint16", offset_factor=1, strides=[sa, 1])
        B = T.match_buffer(b, (nt, half, PANEL, PAIR), "uint16", offset_factor=1, strides=[sb, PANEL * PAIR, PAIR, 1])
        C = T.match_buffer(c, (rows, cols), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:cols], A[0:rows, 0:k], B[0:nt, 0:half, 0:PANEL, 0:PAIR])
            T.writes(C[0:rows, 0:cols])
            # address_of, not access_ptr: TVM's storage rewrite may give C the memory of a dead
            # uint16 buffer (a convolution's packed input), and access_ptr's lowering then refuses
            T.evaluate(T.call_extern("int32", dot.function, T.address_of(C[0, 0]), T.Cast("int64", sc * 4),
                                     T.address_of(A[0, 0]), T.Cast("int64", sa * 2), T.address_of(B[0, 0, 0, 0]),
                                     T.Cast("int64", sb * 2), T.int64(k * 2)))

    return (desc_zero if dot.zero and not dot.update else desc), impl


__all__ = ["AMX_FORMAT", "AVX512BF16_FORMAT", "amx_funcs", "dot_funcs", "is_name", "panel_funcs", "register",
           "register_for_trace"]
