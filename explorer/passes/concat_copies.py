"""``SplitWideConcat``: a concatenation of many tensors becomes a tree of narrow ones.

TOPI writes ``concatenate`` as one expression per output element that picks its input with a chain
of ``if_then_else``, one link per input: an unrolled recurrent layer's output (100 steps
concatenated, :mod:`explorer.models.recurrent`) walked a 100-deep chain for every element, and that
one kernel took 77% of a GRU's time. As a tree of concatenations of at most :data:`FAN_IN` inputs
(which fusion joins into one kernel again), an element walks a chain of ``FAN_IN`` per level: 13 +
8 links instead of 100.
"""

from __future__ import annotations

import tvm
from tvm import relax

from explorer.passes.call_rewrite import rewrite_calls

FAN_IN = 8
_CONCAT = tvm.ir.Op.get("relax.concat")


def _tree(fields: list, axis: int):
    while len(fields) > FAN_IN:
        fields = [relax.op.concat(fields[i:i + FAN_IN], axis) if len(fields[i:i + FAN_IN]) > 1 else fields[i]
                  for i in range(0, len(fields), FAN_IN)]
    return relax.op.concat(fields, axis)


def _split(call: relax.Call, builder):
    if not call.op.same_as(_CONCAT):
        return None
    tensors = call.args[0]
    if not isinstance(tensors, relax.Tuple) or len(tensors.fields) <= FAN_IN or call.attrs.axis is None:
        return None
    return _tree(list(tensors.fields), int(call.attrs.axis))


@tvm.transform.module_pass(opt_level=0, name="SplitWideConcat")
def SplitWideConcat(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Concatenations of more than FAN_IN tensors as trees (see the module docstring)."""
    return rewrite_calls(mod, _split)


__all__ = ["FAN_IN", "SplitWideConcat"]
