"""Register-blocked fp32 FMA micro-kernels as TensorIR tensor intrinsics, and the MetaSchedule
rules that tile around them (the space generator that uses them is search.sketches.space_generator).

A micro-kernel is the innermost block of a BLAS-style matmul: ``C[MR, NR] += A[MR, KR] @ B[KR, NR]``
computed as KR rank-1 updates, each row of C one vector of NR floats (broadcast ``A[i, k]``,
load the ``B[k, :]`` row, fused multiply-add into the C row). Its TIR is plain vector arithmetic
(``ramp``/``broadcast``), so it holds for every ISA; LLVM turns the multiply-add into ``vfmadd``
(x86 FMA3) or ``fmla`` (NEON) of the target's width. NR is the target's fp32 lanes (AVX2: 8,
AVX-512: 16, NEON: 4); MR=8 keeps 8 accumulators in registers, KR=4 unrolls four rank-1 updates.

MetaSchedule's ``MultiLevelTilingWithIntrin`` (what TVM uses for int8 ``dot_16x4_vnni``) splits a
block's innermost loops to the intrinsic's shape, blockizes them, tiles the outer loops as
MultiLevelTiling does, and annotates the inner block; the ``RewriteTensorize`` postprocessor then
tensorizes it. A block whose extents the intrinsic does not divide is left to the plain
MultiLevelTiling rule that follows (no padding), and so is a block whose accesses do not map onto
``C[i, j] += A[i, k] * B[k, j]`` with j contiguous (NCHW conv2d: its W index is ``w + rx``).
Where RandomComputeLocation inlines a padding block into the conv (NHWC), the read becomes an
``if_then_else`` the intrinsic does not match: RewriteTensorize logs a C++ warning ("Tensorize
failed") and that candidate runs untensorized (correct, only not a micro-kernel candidate; about
1 sample in 4 on a small NHWC conv).

Intrinsics are registered lazily, one per shape, named ``schedx_fma_f32_{MR}x{NR}x{KR}``; the name
is enough to register it again, so any process that replays a trace calls
:func:`register_for_trace` first (:func:`explorer.schedule.trace.replay` does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME_PREFIX = "schedx_fma_f32_"
_NAME = re.compile(NAME_PREFIX + r"(\d+)x(\d+)x(\d+)")
MR, KR = 8, 4
# fp32 lanes of the vector widths schedx knows: NEON, AVX2, AVX-512
LANES = (4, 8, 16)
# Tiling levels around the micro-kernel, outermost first. MultiLevelTiling's CPU default ends in a
# spatial level (SSRSRS); ending in a reduction level keeps the k loop right around the kernel, so
# LLVM holds the C tile in registers across it (the BLAS loop order).
STRUCTURE = "SSRSR"


@dataclass(frozen=True)
class MicroKernel:
    """One micro-kernel shape: ``C[mr, nr] += A[mr, kr] @ B[kr, nr]`` in fp32."""

    mr: int
    nr: int
    kr: int

    @property
    def name(self) -> str:
        return f"{NAME_PREFIX}{self.mr}x{self.nr}x{self.kr}"

    @classmethod
    def from_name(cls, name: str) -> MicroKernel | None:
        m = _NAME.fullmatch(name)
        return cls(*(int(g) for g in m.groups())) if m else None


MICROKERNEL_NAMES = tuple(MicroKernel(MR, lanes, KR).name for lanes in LANES)


def why_not(target) -> str:
    """Why ``target`` (an :class:`explorer.target.Target`) gets no micro-kernel ("" when it does)."""
    if not target.cpu_rules:
        return f"{target.label} is not a CPU target: {target.default_schedule} apply"
    from explorer.target.arches import CPU_ARCHES

    known = CPU_ARCHES.get(target.arch)
    if known is None:
        return f"no micro-kernel for {target.arch}"
    if known.fma_feature and known.fma_feature not in target.features:
        return f"{target.label} has no FMA instructions"
    if not target.vector_width:
        return f"the vector width of {target.label} is unknown"
    return ""


def for_target(target) -> MicroKernel | None:
    """The micro-kernel for ``target``'s vector width (None: see :func:`why_not`)."""
    if why_not(target):
        return None
    return MicroKernel(MR, target.vector_width // 32, KR)


def register(kernel: MicroKernel) -> str:
    """Register ``kernel`` as a tensor intrinsic (once per process); returns its name."""
    from tvm.s_tir import TensorIntrin

    if TensorIntrin.get(kernel.name, allow_missing=True) is None:
        TensorIntrin.register(kernel.name, *_prim_funcs(kernel.mr, kernel.nr, kernel.kr))
    return kernel.name


def register_for_trace(trace: object) -> None:
    """Register every schedx micro-kernel a trace (JSON or text) tensorizes with."""
    text = str(trace)
    if NAME_PREFIX in text:
        for shape in set(_NAME.findall(text)):
            if all(0 < int(n) <= 64 for n in shape):  # a shape schedx could have made
                register(MicroKernel(*(int(n) for n in shape)))


def _prim_funcs(mr: int, nr: int, kr: int):
    """The intrinsic's description (what it computes) and implementation (how)."""
    from tvm.script import tirx as T

    def tile(name: str, body):
        """``name``: ``C[mr, nr] += A[mr, kr] . B[kr, nr]`` computed by the macro ``body(A, B, C)``."""
        @T.prim_func(s_tir=True)
        def func(a: T.handle, b: T.handle, c: T.handle) -> None:
            A = T.match_buffer(a, (mr, kr), "float32", offset_factor=1, strides=[T.int32(), 1])
            B = T.match_buffer(b, (kr, nr), "float32", offset_factor=1, strides=[T.int32(), 1])
            C = T.match_buffer(c, (mr, nr), "float32", offset_factor=1, strides=[T.int32(), 1])
            with T.sblock("root"):
                T.reads(C[0:mr, 0:nr], A[0:mr, 0:kr], B[0:kr, 0:nr])
                T.writes(C[0:mr, 0:nr])
                body(A, B, C)
        return func.with_attr("global_symbol", name)

    @T.macro
    def product(A, B, C):
        for i, j, k in T.grid(mr, nr, kr):
            with T.sblock("update"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    @T.macro
    def fmas(A, B, C):
        for k in T.unroll(kr):
            for i in T.unroll(mr):
                C[i, T.ramp(0, 1, nr)] = C[i, T.ramp(0, 1, nr)] + \
                    T.broadcast(A[i, k], nr) * B[k, T.ramp(0, 1, nr)]

    desc, impl = tile("desc", product), tile("impl", fmas)
    return desc, impl


def tiling_with_intrin(intrin: str, structure: str = STRUCTURE):
    """MetaSchedule's ``MultiLevelTilingWithIntrin`` around the registered intrinsic ``intrin``, as
    schedx uses it for every intrinsic of its own (this one and :mod:`.int8_dot`'s)."""
    from tvm.s_tir.meta_schedule.schedule_rule import MultiLevelTilingWithIntrin, ReuseType

    return MultiLevelTilingWithIntrin(intrin, structure=structure, tile_binds=None, max_innermost_factor=64,
                                      vector_load_lens=None, reuse_read=None,
                                      reuse_write=ReuseType(req="may", levels=[1, 2], scope="global"))


def schedule_rule(target, structure: str = STRUCTURE):
    """The rule that tiles fp32 blocks around the target's micro-kernel (the search puts it just
    before ``MultiLevelTiling``, which keeps the blocks it cannot tensorize). Raises
    ``ValueError`` when the target has no micro-kernel."""
    kernel = for_target(target)
    if kernel is None:
        raise ValueError(why_not(target))
    return tiling_with_intrin(register(kernel), structure)


def postprocs() -> list:
    """The default CPU postprocessors with ``RewriteTensorize`` after the reduction rewrite (it
    tensorizes the blocks the rule annotated; its ``vectorize_init_loop`` expects a
    one-dimensional init loop, as int8 dot products have, and fails an internal check on a 2-D
    micro-kernel tile, so it stays off)."""
    from tvm.s_tir import meta_schedule as ms

    procs = list(ms.Postproc.create("llvm"))
    at = next(i for i, p in enumerate(procs) if type(p).__name__ == "RewriteReductionBlock") + 1
    return procs[:at] + [ms.postproc.RewriteTensorize(vectorize_init_loop=False)] + procs[at:]


__all__ = ["MICROKERNEL_NAMES", "MicroKernel", "for_target", "postprocs", "register", "register_for_trace", "schedule_rule",
           "tiling_with_intrin",
           "why_not"]
