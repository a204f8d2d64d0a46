"""``FastActivations``: sigmoid, SiLU, GELU, sine and cosine as vectorizable polynomials.

TVM's ``FastMathTransform`` rewrites ``exp``, ``erf``, ``tanh`` and ``softmax``, not the activations
that hold them: ``R.sigmoid`` (SiLU/Swish as ``x * sigmoid(x)``, squeeze-excitation gates, LSTM
gates), ``R.nn.silu``, ``R.nn.gelu`` and ``R.nn.gelu_tanh`` are legalized to TOPI's, which call
libm's ``expf``/``erff``/``tanhf`` once per element: LLVM cannot vectorize a libm call, so an
EfficientNet convolution whose SiLU epilogue is such a call ran at 7% of the machine's peak. This
pass, run after the layout conversion (a ``call_tir`` would stop it) and before ``LegalizeOps``,
writes them with TOPI's polynomial ``fast_exp``/``fast_erf``/``fast_tanh`` (float32 only; other
dtypes keep TVM's). The results stay within the export's tolerance of ONNX Runtime, which
approximates these functions too.

``R.sin`` and ``R.cos`` (NeRF's positional encoding, rotary position embeddings, audio features) are
libm's ``sinf``/``cosf`` per element too: they become a reduction to [-pi/4, pi/4] by the nearest
multiple of pi/2 (pi/2 in three parts, Cody and Waite's) and Cephes' minimax polynomials for sine and
cosine there, the quadrant picking which and its sign. Within float32's rounding (2e-7 of sinf's) for
|x| up to 1e5 on any target, and up to 1e6 where LLVM fuses the reduction's multiply-subtracts (FMA:
x86-64-v3 and later, aarch64); 1e-4 at 1e7; past about 2.6e7 the quadrant count is no longer the
nearest and the values are no sine's (unbounded past 1e8). Angles that large carry no phase in
float32 anyway (its spacing there is 2 and more), and the export's verification would show them.

``x ** c`` with a constant ``c`` (GPT-2's GELU ``x ** 3``, LayerNorm's variance as ``Pow(x - mean, 2)``
in many ONNX exports, LRN's ``** 0.75`` in AlexNet, GoogLeNet and ZFNet, ``** -0.5`` for a reciprocal
square root) is a libm ``powf`` call per element as well: where ``c`` is a multiple of 1/4 up to 4 in
magnitude it becomes multiplications of ``x``, ``sqrt(x)`` and ``sqrt(sqrt(x))`` (a vector instruction
each), still Relax operators that fuse as before.
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


# pi/2 in three parts (Cody and Waite): the first two have few enough significant bits that their
# products with a quadrant count below 2**16 (|x| < ~1e5) are exact in float32, so the reduced
# argument keeps its bits (further where the subtractions are fused multiply-adds: module docstring).
_HALF_PI = (1.5703125, 4.837512969970703125e-4, 7.54978995489188216e-8)
_SIN = (-1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4)  # Cephes sinf on [-pi/4, pi/4]
_COS = (4.166664568298827e-2, -1.388731625493765e-3, 2.443315711809948e-5)  # Cephes cosf there


def _sine(x: te.Tensor, quarter_turns: int, name: str) -> te.Tensor:
    """``sin(x + quarter_turns * pi/2)``: ``x`` reduced by its nearest multiple ``n`` of pi/2 to ``r``
    in [-pi/4, pi/4], then ``sin(r)`` or ``cos(r)`` by ``n``'s quadrant, negated in the lower half.
    No libm call: every step a vector instruction. NaN and infinities give NaN, as ``sinf`` does."""
    def c(v):
        return tvm.tirx.const(v, x.dtype)

    def value(*i):
        v = x(*i)
        n = tvm.tirx.floor(v * c(2 / math.pi) + c(0.5))
        r = v
        for part in _HALF_PI:
            r = r - n * c(part)
        z = r * r
        sin_r = r + r * z * (c(_SIN[0]) + z * (c(_SIN[1]) + z * c(_SIN[2])))
        cos_r = c(1.0) - c(0.5) * z + z * z * (c(_COS[0]) + z * (c(_COS[1]) + z * c(_COS[2])))
        quadrant = (n.astype("int32") + quarter_turns) & 3
        pick = tvm.tirx.Select((quadrant & 1) == 1, cos_r, sin_r)
        return tvm.tirx.Select((quadrant & 2) == 2, -pick, pick)
    return te.compute(x.shape, value, name=name)


def fast_sin(x: te.Tensor) -> te.Tensor:
    return _sine(x, 0, "fast_sin")


def fast_cos(x: te.Tensor) -> te.Tensor:
    return _sine(x, 1, "fast_cos")


FAST = {"relax.sigmoid": fast_sigmoid, "relax.nn.silu": fast_silu, "relax.nn.gelu": fast_gelu,
        "relax.nn.gelu_tanh": fast_gelu_tanh, "relax.sin": fast_sin, "relax.cos": fast_cos}


def _float32(expr) -> bool:
    ty = getattr(expr, "ty", None) or getattr(expr, "struct_info", None)
    return getattr(ty, "dtype", None) == "float32"


_POWER = tvm.ir.Op.get("relax.power")


def _power_of(x, c: float):
    """``x ** c`` as products of ``x``, ``sqrt(x)`` and ``sqrt(sqrt(x))`` for ``c`` a multiple of 1/4 in
    (0, 4] (LRN's ``** 0.75``: ``sqrt(x) * sqrt(sqrt(x))``); None for any other ``c``. Each factor is
    correctly rounded, so the product is within a few ulp of ``powf``'s, and where ``powf`` gives NaN
    (a negative ``x`` to a fractional power) so does ``sqrt``."""
    quarters = c * 4
    if quarters != int(quarters) or not 0 < quarters <= 16:
        return None
    whole, frac = divmod(int(quarters), 4)
    factors = [x] * whole
    root = relax.op.sqrt(x) if frac else None
    if frac >= 2:
        factors.append(root)
    if frac % 2:
        factors.append(relax.op.sqrt(root))
    out = factors[0]
    for factor in factors[1:]:
        out = relax.op.multiply(out, factor)
    return out


def _small_power(call: relax.Call):
    """``x ** c`` with ``c`` a constant multiple of 1/4 between -4 and 4 (not 0) as products of ``x`` and
    its square roots (:func:`_power_of`), a negative ``c`` as the reciprocal; else None."""
    x, c = call.args
    if not isinstance(c, tvm.ir.Constant) or not _float32(x):
        return None
    value = c.value.numpy()
    if value.size != 1:
        return None
    c = float(value.reshape(()))
    out = _power_of(x, abs(c))
    if out is None or c > 0:
        return out
    return relax.op.divide(relax.const(1.0, "float32"), out)


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
    """Rewrite float32 sigmoid, SiLU, GELU, sine and cosine as fast polynomials, small powers as products (see the
    module docstring)."""
    return rewrite_calls(mod, _fast)


__all__ = ["FAST", "FastActivations", "fast_cos", "fast_gelu", "fast_gelu_tanh", "fast_sigmoid", "fast_silu", "fast_sin"]
