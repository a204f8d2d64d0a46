"""Activations handed to a bf16 convolution already rounded, by the kernel that computes them.

The direct AMX kernel (:mod:`explorer.passes.bf16_conv_nhwc`) rounds its fp32 input to bf16 in a
packing block of its own: one more pass over the activations, in fp32 (4 bytes a value read, 2
written). Where the input is the output of a convolution's chain (the convolution, its bias, its
activation: MobileNet's depthwise convolutions before their projections, ResNet's first convolution
of a block before its second) and this convolution is its only reader, the rounding moves into that
producer: the graph gets ``to_bits(x)`` (the same rounding to nearest even, so the numbers are
identical) between the two, ``FuseOps`` fuses it into the producer's kernel as one more
element-wise step (after the bias and the activation: a direct kernel's epilogue, or an fp32
kernel's tail), the producer writes 2 bytes a value instead of 4, and the consumer's packing only
pads (or, for a 1x1 convolution whose channels fill whole tile rows, is not there). On AMX:
MobileNetV2 ~3% (depthwise producers); ResNet-18 2-5% at 1 and 2 threads (its blocks' first
convolutions: the producers themselves faster, writing half the bytes; the second ones ~5%).

A producer with other readers (a block's output, read by the next block and its residual add; a
pool's output, read by a convolution and a residual add) stays fp32: it would need both outputs.
Between two direct kernels the rounding fuses only once ``SinkTransposes`` has cancelled their
transposes without leaving an alias (``y = x``, a step ``FuseOps`` does not fuse through).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, te

from explorer.ir.relax_walk import iter_bindings, use_counts
from explorer.schedule.bf16_dot import to_bits

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
# the element-wise steps of a chain (bias, batch-norm's scale, activations); a call_tir counts where
# its output has its first input's shape (the legalized maximum and minimum of a relu6)
_STEPS = tuple(tvm.ir.Op.get(f"relax.{name}") for name in ("add", "multiply", "clip", "maximum", "minimum", "nn.relu"))
BITS_NAME = "bf16_bits"
# element-wise steps between the producing convolution and the consumer (bias add, max, min: relu6;
# a pre-activation batch-norm's multiply and add, then relu)
MAX_CHAIN = 4


def _input(call: relax.Call):
    """The tensor an element-wise step reads first (a ``call_tir``'s first argument)."""
    if call.op.same_as(_CALL_TIR):
        return call.args[1].fields[0] if len(call.args[1].fields) else None
    return call.args[0] if call.args else None


def _conv_tail(var, bound: dict, uses: dict) -> bool:
    """Whether ``var`` ends a convolution's chain of element-wise steps (each read once)."""
    for _ in range(MAX_CHAIN + 1):
        value = bound.get(var)
        if not isinstance(value, relax.Call) or uses.get(var, 0) != 1:
            return False
        if value.op.same_as(_CONV2D):
            return True
        if not (any(value.op.same_as(op) for op in _STEPS) or value.op.same_as(_CALL_TIR)):
            return False
        var = _input(value)
        if var is None or not tvm_ffi.structural_equal(var.ty, value.ty):  # (a step that reshapes: no chain)
            return False
    return False


def rounded_by_producer(mod: tvm.IRModule) -> set:
    """The variables of ``mod``'s Relax functions that a convolution's chain computes and
    exactly one binding reads (module docstring): where a bf16 convolution reading one may take it
    as bf16 bits (:func:`emit_bits`)."""
    found = set()
    for func in mod.functions.values():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        bound = {b.var: b.value for b in iter_bindings(func) if isinstance(b, relax.VarBinding)}
        uses = use_counts(func)
        found.update(var for var in bound if _conv_tail(var, bound, uses))
    return found


def _bits(x: te.Tensor) -> te.Tensor:
    return te.compute(x.shape, lambda *i: to_bits(x(*i)), name=BITS_NAME)


def emit_bits(x: relax.Expr, builder: relax.BlockBuilder) -> relax.Expr:
    """``x`` (fp32) rounded to nearest even bf16, as its bits (uint16): an element-wise kernel that
    ``FuseOps`` fuses into ``x``'s producer."""
    return builder.emit(builder.call_te(_bits, x, primfunc_name_hint=BITS_NAME))


__all__ = ["BITS_NAME", "emit_bits", "rounded_by_producer"]
