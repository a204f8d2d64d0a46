"""Default CPU schedules: what a kernel without a record gets instead of a naive loop nest.

Rules per kind of block, written with :class:`tvm.s_tir.Schedule` primitives and sized from the
target's vector width, vector registers and cores (:class:`CpuSpec`): cheap blocks inlined,
reductions register-tiled with their epilogue, everything else parallel and vectorized, and a
safe fallback for kernels a rule does not fit. See :mod:`.apply` for the order they are tried in.
"""

from explorer.schedule.defaults.apply import (
    DefaultChoice,
    apply_default_schedules,
    default_schedule,
)
from explorer.schedule.defaults.machine import CpuSpec

__all__ = ["CpuSpec", "DefaultChoice", "apply_default_schedules", "default_schedule"]
