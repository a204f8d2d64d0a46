"""``FastActivations``: sigmoid, SiLU and GELU as vectorizable polynomials.

TVM's ``FastMathTransform`` rewrites ``exp``, ``erf``, ``tanh`` and ``softmax``, not the activations
that hold them: ``R.sigmoid`` (SiLU/Swish as ``x * sigmoid(x)``, squeeze-excitation gates, LSTM
gates), ``R.nn.silu``, ``R.nn.gelu`` and ``R.nn.gelu_tanh`` are legalized to TOPI's, which call
libm's ``expf``/``erff``/``tanhf`` once per element: LLVM cannot vectorize a libm call, so an
EfficientNet convolution whose SiLU epilogue is such a call ran at 7% of the machine's peak. This
pass, run after the layout conversion (a ``call_tir`` would stop it) and before ``LegalizeOps``,
writes them with TOPI's polynomial ``fast_exp``/``fast_erf``/``fast_tanh`` (float32 only; other
dtypes keep TVM's). The results stay within the export's tolerance of ONNX Runtime, which
approximates these functions too.

``x ** c`` with a constant small integer ``c`` (GPT-2's GELU ``x ** 3``, LayerNorm's variance as
``Pow(x - mean, 2)`` in many ONNX exports) is a libm ``powf`` call per element as well: it becomes
multiplications (and ``x ** 0.5`` a square root), still Relax operators that fuse as before.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax, te, topi

from explorer.passes.call_rewrite import rewrite_calls


def _one(x: te.Tensor):
    return tvm.tirx.const(1.0, x.dtype)


def fast_sigmoid(x: te.Tensor) -> te.Tensor:
    e = topi.fast_exp(topi.negative(x))
    return te.compute(x.shape, lambda *i: _one(x) / (_one(x) + e(*i)), name="fast_sigmoid")


def fast_silu(x: te.Tensor) -> te.Tensor:
    e = topi.fast_exp(topi.negative(x))
    return te.compute(x.shape, lambda *i: x(*i) / (_one(x) + e(*i)), name="fast_silu")


def fast_gelu(x: te.Tensor) -> te.Tensor:
    erf = topi.fast_erf(topi.multiply(x, tvm.tirx.const(1 / math.sqrt(2.0), x.dtype)))
    half = tvm.tirx.const(0.5, x.dtype)
    return te.compute(x.shape, lambda *i: half * x(*i) * (_one(x) + erf(*i)), name="fast_gelu")


def fast_gelu_tanh(x: te.Tensor) -> te.Tensor:
    k, c = math.sqrt(2.0 / math.pi), 0.044715
    inner = te.compute(x.shape, lambda *i: tvm.tirx.const(k, x.dtype) * (x(*i) + tvm.tirx.const(c, x.dtype)
                                                                           * x(*i) * x(*i) * x(*i)), name="gelu_in")
    th = topi.fast_tanh(inner)
    half = tvm.tirx.const(0.5, x.dtype)
    return te.compute(x.shape, lambda *i: half * x(*i) * (_one(x) + th(*i)), name="fast_gelu_tanh")


FAST = {"relax.sigmoid": fast_sigmoid, "relax.nn.silu": fast_silu, "relax.nn.gelu": fast_gelu,
        "relax.nn.gelu_tanh": fast_gelu_tanh}


def _float32(expr) -> bool:
    ty = getattr(expr, "ty", None) or getattr(expr, "struct_info", None)
    return getattr(ty, "dtype", None) == "float32"


_POWER = tvm.ir.Op.get("relax.power")


def _small_power(call: relax.Call):
    """``x * x * ...`` for ``x ** c`` with ``c`` a constant 1..4, ``sqrt(x)`` for ``c == 0.5``; else None."""
    x, c = call.args
    if not isinstance(c, tvm.ir.Constant) or not _float32(x):
        return None
    value = c.value.numpy()
    if value.size != 1:
        return None
    c = float(value.reshape(()))
    if c == 0.5:
        return relax.op.sqrt(x)
    if c not in (1.0, 2.0, 3.0, 4.0):
        return None
    out = x
    for _ in range(int(c) - 1):
        out = relax.op.multiply(out, x)
    return out


def _fast(call: relax.Call, builder: relax.BlockBuilder):
    if call.op.same_as(_POWER):
        return _small_power(call)
    name = getattr(call.op, "name", None)
    make = FAST.get(name) if isinstance(name, str) else None
    if make is None or len(call.args) != 1 or not _float32(call.args[0]):
        return None
    return builder.call_te(make, call.args[0], primfunc_name_hint=name.split(".")[-1])


@tvm.transform.module_pass(opt_level=0, name="FastActivations")
def FastActivations(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Rewrite float32 sigmoid, SiLU and GELU as fast polynomials, small powers as products (see the
    module docstring)."""
    return rewrite_calls(mod, _fast)


__all__ = ["FAST", "FastActivations", "fast_gelu", "fast_gelu_tanh", "fast_sigmoid", "fast_silu"]
