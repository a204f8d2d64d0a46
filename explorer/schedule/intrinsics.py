"""schedx's own tensor intrinsics, registered on demand: the fp32 FMA micro-kernels
(:mod:`explorer.schedule.microkernel`), the int8 dot products (:mod:`explorer.schedule.int8_dot`) and
the bf16 ones (:mod:`explorer.schedule.bf16_dot`), the AMX-INT8 tiles (:mod:`explorer.schedule.amx_int8`) and
the AMX-BF16 convolution tiles (:mod:`explorer.schedule.amx_bf16_conv`);
AMX names carry their K (and the int8 ones their taps and stride), so only the fixed shapes are
listed in :data:`NAMES`; :func:`is_schedx_name` also knows the names made per shape.

Their names say their shape, so a trace that names one is enough to register it again: every
process that replays a trace or applies a ``tensorize`` step calls :func:`register_for_trace` first.
"""

from __future__ import annotations

from explorer.schedule import amx_bf16_conv, amx_int8, bf16_dot, bf16_intrin, int8_dot, microkernel

NAMES = microkernel.MICROKERNEL_NAMES + int8_dot.INT8_NAMES + bf16_dot.BF16_NAMES

# What each family's names look like, in words: what an error lists when a name is none of them.
FAMILIES = (
    f"fp32 FMA micro-kernels ({', '.join(microkernel.MICROKERNEL_NAMES)})",
    f"int8 dot products ({int8_dot.NAME_PREFIX}<vnni|avx512bw|avx2>_<rows>x<lanes>, e.g. {int8_dot.INT8_NAMES[0]})",
    f"AVX512-BF16 dot products ({bf16_intrin.AVX512BF16_FORMAT}, e.g. {bf16_dot.BF16_NAMES[0]})",
    f"AMX-BF16 matmul tiles ({bf16_intrin.AMX_FORMAT})",
    f"AMX-INT8 tiles ({amx_int8.NAME_FORMAT})",
    f"AMX-BF16 convolution tiles ({amx_bf16_conv.NAME_FORMAT}, and their inits {amx_bf16_conv.ZERO_FORMAT})",
)


def is_schedx_name(name: object) -> bool:
    """Whether ``name`` names an intrinsic schedx registers (:func:`register_for_trace`): one of
    :data:`NAMES`, or a name made per shape that its family registers under that very spelling."""
    return isinstance(name, str) and (name in NAMES or bf16_intrin.is_name(name) or amx_int8.is_name(name)
                                      or amx_bf16_conv.is_name(name))


def register_for_trace(trace: object) -> None:
    """Register every schedx intrinsic a trace (JSON or text), or an intrinsic's name, uses."""
    microkernel.register_for_trace(trace)
    int8_dot.register_for_trace(trace)
    bf16_intrin.register_for_trace(trace)
    amx_int8.register_for_trace(trace)
    amx_bf16_conv.register_for_trace(trace)


__all__ = ["FAMILIES", "NAMES", "is_schedx_name", "register_for_trace"]
