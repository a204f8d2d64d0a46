"""schedx's own tensor intrinsics, registered on demand: the fp32 FMA micro-kernels
(:mod:`explorer.schedule.microkernel`), the int8 dot products (:mod:`explorer.schedule.int8_dot`) and
the bf16 ones (:mod:`explorer.schedule.bf16_dot`), the AMX-INT8 tiles (:mod:`explorer.schedule.amx_int8`) and
the AMX-BF16 convolution tiles (:mod:`explorer.schedule.amx_bf16_conv`);
AMX names carry their K (and the int8 ones their taps and stride), so only the AVX512-BF16 shapes
are listed in :data:`NAMES`.

Their names say their shape, so a trace that names one is enough to register it again: every
process that replays a trace or applies a ``tensorize`` step calls :func:`register_for_trace` first.
"""

from __future__ import annotations

from explorer.schedule import amx_bf16_conv, amx_int8, bf16_dot, bf16_intrin, int8_dot, microkernel

NAMES = microkernel.MICROKERNEL_NAMES + int8_dot.INT8_NAMES + bf16_dot.BF16_NAMES


def register_for_trace(trace: object) -> None:
    """Register every schedx intrinsic a trace (JSON or text), or an intrinsic's name, uses."""
    microkernel.register_for_trace(trace)
    int8_dot.register_for_trace(trace)
    bf16_intrin.register_for_trace(trace)
    amx_int8.register_for_trace(trace)
    amx_bf16_conv.register_for_trace(trace)


__all__ = ["NAMES", "register_for_trace"]
