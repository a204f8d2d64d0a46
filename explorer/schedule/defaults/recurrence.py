"""A recurrent layer's whole sequence as one kernel: the time loop inside, the state in registers.

Unrolled into plain operators (:mod:`explorer.models.recurrent` with ``sequence_kernels=False``),
a layer over T steps is 2T to 3T kernels, each a call of Relax's VM. Here one PrimFunc runs every
step of every direction of a layer: per step a matrix-vector product of the state by the
recurrence weights (``h @ R^T``), then the gates, writing ``Y[t]``. The input projection
``X @ W^T + b`` of all steps and directions stays one matrix product before it.

The kernel carries its :class:`~.recurrence_spec.RecurrenceSpec`, so that a build swaps in the
variant for its target (:func:`for_target`): :mod:`.recurrence_cpu` (the CPU's vector width) or
:mod:`.recurrence_gpu`, both written as TVMScript (:mod:`.recurrence_script`), already scheduled
(``tirx.is_scheduled``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.schedule.defaults.recurrence_cpu import cpu_recurrence
from explorer.schedule.defaults.recurrence_gpu import gpu_recurrence
from explorer.schedule.defaults.recurrence_spec import ATTR, spec_of

if TYPE_CHECKING:  # TVM is imported where a kernel is made
    import tvm

_OWN_ATTRS = frozenset({"s_tir", "tirx.noalias", "tirx.is_scheduled", ATTR})  # the variant's own


def for_target(func: tvm.tirx.PrimFunc, *, lanes: int | None = None, gpu: bool = False) -> tvm.tirx.PrimFunc | None:
    """A recurrence kernel ``func`` written again for a CPU with ``lanes`` float lanes or for a
    GPU, keeping ``func``'s other attributes (its global symbol); None when ``func`` is none."""
    spec = spec_of(func)
    if spec is None:
        return None
    made = gpu_recurrence(spec) if gpu else cpu_recurrence(spec, lanes or 8)
    for key, value in (func.attrs or {}).items():
        if key not in _OWN_ATTRS:  # the caller's: global symbol, op pattern, weight buffers
            made = made.with_attr(key, value)
    return made


__all__ = ["for_target"]
