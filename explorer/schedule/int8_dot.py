"""int8 dot-product micro-kernels as TensorIR tensor intrinsics, and the rules that tile around them.

The kernels of a quantized model that :mod:`explorer.passes.qdq_int8` writes compute
``C[.., o] += int32(A[.., c]) * int32(W[o // 16, .., c // 4, o % 16, c % 4])`` with uint8
activations and int8 weights packed in 16x4 panels. One intrinsic call takes four channels of
``rows`` output pixels against a ``lanes x 4`` weight panel (contiguous: 32 or 64 bytes):

- ``vnni`` (AVX-512 VNNI, 16 lanes): ``vpdpbusd``, four u8 x s8 products summed into each int32
  lane, exact;
- ``avx512bw`` (16 lanes) and ``avx2`` (8 lanes): ``vpmaddubsw`` then ``vpmaddwd`` by ones. The
  first sums *pairs* of u8 x s8 products into int16 with saturation, so these two are exact only
  when every weight lies in [-64, 64] (255 * 64 * 2 < 32767). ONNX Runtime quantizes weights to 7
  bits on such CPUs for this reason (``reduce_range``); the pass records each kernel's largest
  weight magnitude on its block (:data:`WEIGHT_MAX_ATTR`), and these intrinsics are offered only
  to blocks whose weights fit.

Rows: ``rows`` accumulators per weight load stay in registers: 4 where the output width allows,
7 for ResNet's 7- and 14-wide stages, then 2, and 1 for any shape (also for strided convolutions,
whose output rows are no dense ``rows x 4`` tile of the input). Tiling structure ``SSRSR``
(ending in a reduction level, as the fp32 micro-kernel): with MetaSchedule's default ``SSRSRS``
the vectorizer later wraps a spatial loop around the tensorized call, which either fails
("Cannot broadcast lanes=32 to 64") or recursed until TVM crashed when built.

Measured (AVX2, 2 cores, 3x3 conv 64->64, random samples of the design space): 115-176 GOPS on a
28x28 output (4 rows), 73-105 GOPS on 7x7; ResNet-18's int8 convolutions with the default
schedules 160-239 GOPS (``python -m benchmarks.bench_int8``).
Intrinsics are registered lazily under names that say their shape (``schedx_dot_u8i8_avx2_4x8``);
any process that replays a trace calls :func:`register_for_trace` first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME_PREFIX = "schedx_dot_u8i8_"
_NAME = re.compile(NAME_PREFIX + r"(vnni|avx512bw|avx2)_(\d+)x(\d+)")
# the block annotations the QDQ pass sets on its int8 kernels: the largest |weight| of that kernel,
# and how far apart in the input its consecutive output rows read (a convolution's stride)
WEIGHT_MAX_ATTR = "schedx.int8_weight_max"
ROW_STRIDE_ATTR = "schedx.int8_row_stride"
SATURATING = ("avx512bw", "avx2")
SAFE_WEIGHT_MAX = 64
PANEL = 16  # weights are packed in panels of 16 output channels x 4 input channels
LANES = {"vnni": 16, "avx512bw": 16, "avx2": 8}
ROWS = (4, 7, 2, 1)
STRUCTURE = "SSRSR"


@dataclass(frozen=True)
class Int8Dot:
    """One intrinsic: ``C[rows, lanes] += A[rows, 4] (u8) . B[lanes, 4] (s8)`` in int32."""

    isa: str
    rows: int

    @property
    def lanes(self) -> int:
        return LANES[self.isa]

    @property
    def name(self) -> str:
        return f"{NAME_PREFIX}{self.isa}_{self.rows}x{self.lanes}"

    @property
    def saturates(self) -> bool:
        return self.isa in SATURATING


INT8_NAMES = tuple(Int8Dot(isa, rows).name for isa in LANES for rows in ROWS)


def isa_for(target) -> str | None:
    """The int8 dot-product instruction set of an :class:`explorer.target.Target` (None: none)."""
    return isa_from(target.features, target.arch)


def isa_from(features, arch: str) -> str | None:
    """The int8 dot-product instruction set of a CPU with these LLVM ``features`` (None: none)."""
    from explorer.target.arches import CPU_ARCHES

    features = set(features)
    known = CPU_ARCHES.get(arch)
    return next((isa for needs, isa in known.int8_dot if needs <= features), None) if known else None


def for_target(target) -> list[Int8Dot]:
    """The intrinsics a search on ``target`` tiles int8 kernels around, first choice first."""
    isa = isa_for(target)
    return [] if isa is None else [Int8Dot(isa, rows) for rows in ROWS]


def register(dot: Int8Dot) -> str:
    """Register ``dot`` as a tensor intrinsic (once per process); returns its name."""
    from tvm.s_tir import TensorIntrin

    if TensorIntrin.get(dot.name, allow_missing=True) is None:
        TensorIntrin.register(dot.name, *_prim_funcs(dot))
    return dot.name


def register_for_trace(trace: object) -> None:
    """Register every schedx int8 intrinsic a trace (JSON or text) tensorizes with."""
    text = str(trace)
    if NAME_PREFIX in text:
        for isa, rows, lanes in set(_NAME.findall(text)):
            dot = Int8Dot(isa, int(rows))
            if int(rows) in ROWS and dot.lanes == int(lanes):
                register(dot)


def _combine(dot: Int8Dot, acc, a_word, b):
    """The instruction sequence: ``acc`` (int32 x lanes) plus the dot products of the four bytes
    in ``a_word`` (one int32) with each lane's four bytes of ``b``."""
    from tvm.script import tirx as T

    lanes = dot.lanes
    if dot.isa == "vnni":  # LLVM's vpdpbusd takes the bytes as <64 x i8> (it took <16 x i32> before LLVM 20)
        a = T.reinterpret("int8x64", T.broadcast(a_word, lanes))
        return T.call_llvm_pure_intrin("int32x16", "llvm.x86.avx512.vpdpbusd.512", acc, a, b)
    maddubs, maddwd = (("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512") if dot.isa == "avx512bw"
                       else ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"))
    pairs = T.call_llvm_pure_intrin(f"int16x{2 * lanes}", maddubs,
                                    T.reinterpret(f"uint8x{4 * lanes}", T.broadcast(a_word, lanes)), b)
    return acc + T.call_llvm_pure_intrin(f"int32x{lanes}", maddwd, pairs, T.broadcast(T.int16(1), 2 * lanes))


def _prim_funcs(dot: Int8Dot):
    """The intrinsic's description (what it computes) and implementation (how)."""
    from tvm.script import tirx as T

    rows, lanes = dot.rows, dot.lanes
    if rows == 1:
        @T.prim_func(s_tir=True)
        def desc1(A: T.Buffer((4,), "uint8", offset_factor=1), B: T.Buffer((lanes, 4), "int8", offset_factor=1),
                  C: T.Buffer((lanes,), "int32", offset_factor=1)) -> None:
            with T.sblock("root"):
                T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
                T.writes(C[0:lanes])
                for i, k in T.grid(lanes, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

        @T.prim_func(s_tir=True)
        def impl1(A: T.Buffer((4,), "uint8", offset_factor=1), B: T.Buffer((lanes, 4), "int8", offset_factor=1),
                  C: T.Buffer((lanes,), "int32", offset_factor=1)) -> None:
            with T.sblock("root"):
                T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
                T.writes(C[0:lanes])
                C[T.ramp(T.int32(0), 1, lanes)] = _combine(
                    dot, C[T.ramp(T.int32(0), 1, lanes)], T.reinterpret("int32", A[T.ramp(T.int32(0), 1, 4)]),
                    B[0, T.ramp(T.int32(0), 1, 4 * lanes)])

        return desc1, impl1

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (rows, 4), "uint8", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (lanes, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (rows, lanes), "int32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:lanes], A[0:rows, 0:4], B[0:lanes, 0:4])
            T.writes(C[0:rows, 0:lanes])
            for r, i, k in T.grid(rows, lanes, 4):
                with T.sblock("update"):
                    vr, vi, vk = T.axis.remap("SSR", [r, i, k])
                    C[vr, vi] = C[vr, vi] + T.cast(A[vr, vk], "int32") * T.cast(B[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (rows, 4), "uint8", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (lanes, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (rows, lanes), "int32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:lanes], A[0:rows, 0:4], B[0:lanes, 0:4])
            T.writes(C[0:rows, 0:lanes])
            for r in T.unroll(rows):
                C[r, T.ramp(T.int32(0), 1, lanes)] = _combine(
                    dot, C[r, T.ramp(T.int32(0), 1, lanes)], T.reinterpret("int32", A[r, T.ramp(T.int32(0), 1, 4)]),
                    B[0, T.ramp(T.int32(0), 1, 4 * lanes)])

    return desc, impl


def weight_max(block) -> int | None:
    """The largest |weight| the QDQ pass recorded on ``block`` (a TIR SBlock), or None."""
    value = block.annotations.get(WEIGHT_MAX_ATTR) if block.annotations else None
    return None if value is None else int(value)


def row_stride(block) -> int:
    """How far apart the input rows of consecutive output rows of ``block`` are (1 if unrecorded)."""
    value = block.annotations.get(ROW_STRIDE_ATTR) if block.annotations else None
    return 1 if value is None else int(value)


def fits(dot: Int8Dot, block) -> bool:
    """Whether ``dot`` may compute ``block``: one of the QDQ pass's int8 kernels, with weights in
    range when the intrinsic saturates, and (for several rows at once) dense input rows: a strided
    convolution's rows are not one ``rows x 4`` tile of its input, so it gets the one-row kernel."""
    bound = weight_max(block)
    if bound is None or (dot.saturates and bound > SAFE_WEIGHT_MAX):
        return False
    return dot.rows == 1 or row_stride(block) == 1


def schedule_rules(target) -> list:
    """One ``MultiLevelTilingWithIntrin`` per intrinsic of ``target`` (rows 4 first), each offered
    only the blocks it :func:`fits`. Empty for a target without int8 dot products."""
    from explorer.schedule.microkernel import tiling_with_intrin

    return [_only_fitting(dot, tiling_with_intrin(register(dot), STRUCTURE)) for dot in for_target(target)]


def _only_fitting(dot: Int8Dot, inner):
    """A schedule rule that hands ``inner`` only the blocks ``dot`` :func:`fits` (others pass
    through unchanged, to the rules after it)."""
    from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule
    from tvm.ir.utils import derived_object

    @derived_object
    class OnlyFitting(PyScheduleRule):
        def _initialize_with_tune_context(self, context) -> None:
            inner._initialize_with_tune_context(context)

        def apply(self, sch, block):
            if not fits(dot, sch.get(block)):
                return [sch]
            return list(inner.apply(sch, block))

        def clone(self):
            return _only_fitting(dot, inner.clone())

    return OnlyFitting()


def has_int8_kernel(func) -> bool:
    """Whether a PrimFunc holds a block the QDQ pass made (one a search tiles around these)."""
    from explorer.ir.tir_walk import blocks

    return any(weight_max(b) is not None for b in blocks(func))


__all__ = ["INT8_NAMES", "Int8Dot", "NAME_PREFIX", "PANEL", "ROW_STRIDE_ATTR", "SAFE_WEIGHT_MAX", "WEIGHT_MAX_ATTR", "fits", "for_target",
           "has_int8_kernel", "isa_for", "isa_from", "register", "register_for_trace", "row_stride", "schedule_rules",
           "weight_max"]
