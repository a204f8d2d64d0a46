"""``BatchNormAsScaleShift``: a batch-norm that no convolution absorbs, as one multiply-add.

``FoldBatchnormToConv2D`` folds a batch-norm that follows a convolution into its weights. A
pre-activation batch-norm (ResNet v2, DenseNet: BN -> ReLU -> conv, after a residual add or a
pooling) follows no convolution, and ``DecomposeOpsForInference`` spells it out as TVM writes it:
``(x - mean) / sqrt(var + eps) * gamma + beta``, a subtract, a divide, a multiply and an add per
element. With constant statistics it is an affine map per channel, computed here once (in float64,
stored in float32)::

    scale = gamma / sqrt(var + eps)        shift = beta - mean * scale        y = x * scale + shift

so the kernel does one multiply-add per element, and the ReLU that follows fuses with it. This is
what Relay's ``SimplifyInference`` did to ``batch_norm`` (and ``FoldScaleAxis`` then pushed into a
convolution when it could). Inference only: the moving statistics are used, as
``DecomposeOpsForInference`` does. The call is replaced by the tuple batch-norm returns, so
``CanonicalizeBindings`` folds its get-item and the consumer reads the multiply-add directly.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from explorer.ir.relax_walk import tensor_info
from explorer.passes.bf16_dense import constant_value
from explorer.passes.call_rewrite import rewrite_calls

_BATCH_NORM = tvm.ir.Op.get("relax.nn.batch_norm")


def scale_shift(gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray,
                eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The per-channel ``(scale, shift)`` with ``x * scale + shift`` equal to the batch-norm."""
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    shift = beta.astype(np.float64) - mean.astype(np.float64) * scale
    return scale, shift


def _rewrite(call: relax.Call, builder: relax.BlockBuilder):
    if not call.op.same_as(_BATCH_NORM):
        return None
    x, gamma, beta, mean, var = call.args
    shape, dtype = tensor_info(x.ty)
    values = [constant_value(a) for a in (gamma, beta, mean, var)]
    if shape is None or dtype not in ("float32", "float16") or any(v is None for v in values):
        return None
    a = call.attrs
    axis = int(a.axis) % len(shape)
    g, b, m, v = values
    g = g if a.scale else np.ones_like(g)
    b = b if a.center else np.zeros_like(b)
    scale, shift = scale_shift(g, b, m, v, float(a.epsilon))
    along = [1] * len(shape)
    along[axis] = shape[axis]
    scaled = builder.emit(relax.op.multiply(x, relax.const(scale.astype(dtype).reshape(along))))
    shifted = builder.emit(relax.op.add(scaled, relax.const(shift.astype(dtype).reshape(along))))
    return relax.Tuple([shifted, mean, var])


@tvm.transform.module_pass(opt_level=0, name="BatchNormAsScaleShift")
def BatchNormAsScaleShift(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Every batch-norm with constant parameters as ``x * scale + shift`` (module docstring)."""
    return rewrite_calls(mod, _rewrite)


__all__ = ["BatchNormAsScaleShift", "scale_shift"]
