"""``QDQToInt8Kernels``: quantized convolutions and matmuls computed in integers (QNN's job in Relay).

TVM 0.27 imports a QDQ model (ONNX Runtime's default quantized form) as ``dequantize -> float
conv2d/matmul -> quantize``: the int8 weights are turned back into floats and every product is a
float multiply, so no int8 kernel ever reaches a search. This pass finds

    conv2d(dequantize(x_q, s_x, z_x), dequantize(W_q, s_w, 0))          (NCHW / OIHW, groups 1)
    matmul(dequantize(x_q, s_x, z_x), [permute_dims](dequantize(W_q, s_w, 0)))

with a per-tensor activation scale, constant int8 weights (per-tensor or per-output-channel
scales, zero points 0 as ONNX Runtime writes them) and writes it as

    y_int32 = sum(u8(x) * W)  -  z_u * sum(W)            an int8 kernel, int32 accumulation
    y       = float(y_int32) * (s_x * s_w)               the same real value as before

where ``u8(x)`` is the activation as uint8 (int8 activations are shifted by 128, and their zero
point with them: what x86 dot-product instructions multiply is unsigned x signed bytes) and
``z_u * sum(W)`` is a constant per output channel. Convolutions run in NHWC with the padding
filled with the zero point (it stands for a real 0; an image's rows padded further, to whole
vectors, for the kernel that quantizes and transposes it). The weights are packed once here into panels
of 16 output x 4 input channels (``[O/16, KH, KW, C/4, 16, 4]``, matmul ``[N/16, K/4, 16, 4]``;
channels padded with zero weights), the layout :mod:`explorer.schedule.int8_dot`'s intrinsics load
in one instruction. The kernel's block records its largest |weight| (``schedx.int8_weight_max``),
which decides whether the saturating AVX2/AVX-512BW sequences may compute it, and its stride
(``schedx.int8_row_stride``), which decides whether several output rows form one input tile.

The integer sum is exact, so the result differs from the float path only by float rounding
(verified against ONNX Runtime within one quantization step on tiny nets). The quantize after each
kernel (and the quantized residual sums and max pools) is then written the way ONNX Runtime's fused
operators compute it, a multiply per channel instead of a division (:mod:`explorer.passes.qdq_requantize`):
quantized ResNet-18's output then equals ONNX Runtime's. Anything else (grouped
or dilated convolutions, per-channel activation scales, non-zero weight zero points, weights that
are not constants) is left as it was, and so is every model on a CPU without int8 dot-product
instructions schedx knows (aarch64 for now: NEON's sdot/udot are not registered yet), where int32
multiplies would be slower than the float kernels they replace.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te
from tvm.relax.expr_functor import PyExprMutator, mutator

from explorer.ir.relax_walk import is_constant, iter_bindings, tensor_info
from explorer.passes.pass_target import cpu_rewrite
from explorer.passes.qdq_requantize import requantize
from explorer.schedule.int8_dot import PANEL, ROW_STRIDE_ATTR, WEIGHT_MAX_ATTR

_OP = tvm.ir.Op.get
_DEQUANTIZE, _CONV2D, _MATMUL, _PERMUTE = (_OP("relax.dequantize"), _OP("relax.nn.conv2d"), _OP("relax.matmul"),
                                           _OP("relax.permute_dims"))


_FLOAT_OUT = ("", "None", "void", "float32")  # out_dtype unset means the inputs' (float32)
# An input of at most FEW_CHANNELS channels (an image: 3, padded to 4) is padded on the right to a
# multiple of ROW_VECTOR columns: the kernel that quantizes, transposes and pads it then reads its
# rows as whole float vectors (explorer.schedule.defaults.simple; ResNet's 230 columns were read
# value by value: docs/notes/measurements.md, "AMX-INT8 stem").
FEW_CHANNELS = 4
ROW_VECTOR = 16


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def _const(expr) -> np.ndarray | None:
    value = getattr(expr, "value", None) if is_constant(expr) else None
    return value.numpy() if hasattr(value, "numpy") else None


def _static_shape(expr) -> list[int] | None:
    shape, _ = tensor_info(expr.ty)
    return None if shape is None else list(shape)


def conv2d_nhwc_int8(x: te.Tensor, w: te.Tensor, stride_h: int, stride_w: int, out_h: int, out_w: int,
                     weight_max: int) -> te.Tensor:
    """``y[n, h, w, o] = sum x[n, h*sh + kh, w*sw + kw, c] * W[o // 16, kh, kw, c // 4, o % 16, c % 4]``
    in int32 (``x`` uint8 NHWC, already padded; ``W`` int8 in 16x4 panels)."""
    n, _, _, c = x.shape
    panels, kh, kw = w.shape[0], w.shape[1], w.shape[2]
    rh, rw, rc = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, c), "rc")
    return te.compute(
        (n, out_h, out_w, panels * PANEL),
        lambda b, h, ww, o: te.sum(
            x[b, h * stride_h + rh, ww * stride_w + rw, rc].astype("int32")
            * w[o // PANEL, rh, rw, rc // 4, o % PANEL, rc % 4].astype("int32"), axis=[rh, rw, rc]),
        name="conv2d_nhwc_int8", attrs={WEIGHT_MAX_ATTR: weight_max, ROW_STRIDE_ATTR: stride_w})


def dense_int8(x: te.Tensor, w: te.Tensor, weight_max: int) -> te.Tensor:
    """``y[m, n] = sum x[m, k] * W[n // 16, k // 4, n % 16, k % 4]`` in int32 (``x`` uint8)."""
    m, k = x.shape
    rk = te.reduce_axis((0, k), "rk")
    return te.compute(
        (m, w.shape[0] * PANEL),
        lambda i, j: te.sum(x[i, rk].astype("int32") * w[j // PANEL, rk // 4, j % PANEL, rk % 4].astype("int32"),
                            axis=rk),
        name="dense_int8", attrs={WEIGHT_MAX_ATTR: weight_max})


@mutator
class _Rewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.rewritten = 0

    # -- reading the pattern -------------------------------------------------------------
    def _bound(self, expr):
        """The expression a variable is bound to (the variable itself when it is not bound here)."""
        if isinstance(expr, relax.Var):
            value = self.lookup_binding(expr)
            if value is not None:
                return value
        return expr

    def _dequantized(self, expr):
        """``(x_q, scale, zero_point, axis)`` when ``expr`` is a dequantize, else None."""
        call = self._bound(expr)
        if not (isinstance(call, relax.Call) and call.op.same_as(_DEQUANTIZE)):
            return None
        x, scale, zp = call.args[0], _const(call.args[1]), _const(call.args[2])
        if scale is None or zp is None:
            return None
        return x, scale.astype(np.float64), zp.astype(np.int64), int(call.attrs.axis)

    def _activation(self, expr):
        """``(uint8 activation expr, its zero point, its scale)`` for a per-tensor dequantize."""
        deq = self._dequantized(expr)
        if deq is None:
            return None
        xq, scale, zp, _ = deq
        dtype = tensor_info(xq.ty)[1]
        if scale.size != 1 or zp.size != 1 or dtype not in ("int8", "uint8"):
            return None
        if dtype == "uint8":
            return xq, int(zp.reshape(())), float(scale.reshape(()))
        shifted = self.builder_.emit(relax.op.astype(
            relax.op.add(relax.op.astype(xq, "int16"), relax.const(128, "int16")), "uint8"))
        return shifted, int(zp.reshape(())) + 128, float(scale.reshape(()))

    def _weight(self, expr, out_axis: int):
        """``(int8 weights, per-output-channel scale)`` for a dequantize of constant int8 weights
        with zero points 0, scales per tensor or along ``out_axis``."""
        deq = self._dequantized(expr)
        if deq is None:
            return None
        wq, scale, zp, axis = deq
        w = _const(wq)
        if w is None or w.dtype != np.int8 or np.any(zp != 0):
            return None
        channels = w.shape[out_axis]
        if scale.size == 1:
            return w, np.full(channels, float(scale.reshape(())))
        if scale.size == channels and axis % w.ndim == out_axis:
            return w, scale.reshape(-1)
        return None

    # -- writing the integer form --------------------------------------------------------
    def _finish(self, acc, corr: np.ndarray, scale: np.ndarray, out_channels: int, channel_axis: int):
        """float(acc - corr) * scale along the last axis, sliced to ``out_channels``."""
        emit = self.builder_.emit
        y = emit(relax.op.subtract(acc, relax.const(corr.astype(np.int32))))
        y = emit(relax.op.multiply(relax.op.astype(y, "float32"), relax.const(scale.astype(np.float32))))
        if scale.size != out_channels:
            y = emit(relax.op.strided_slice(y, axes=[channel_axis], begin=[0], end=[out_channels]))
        return y

    def visit_call_(self, op):
        call = self.visit_expr_post_order(op)
        if isinstance(call, relax.Call) and call.op.same_as(_CONV2D):
            new = self._conv2d(call)
        elif isinstance(call, relax.Call) and call.op.same_as(_MATMUL):
            new = self._matmul(call)
        else:
            return call
        if new is None:
            return call
        self.rewritten += 1
        return new

    def _conv2d(self, call):
        a = call.attrs
        if (a.data_layout, a.kernel_layout, a.out_layout) != ("NCHW", "OIHW", "NCHW") or int(a.groups) != 1 \
                or any(int(d) != 1 for d in a.dilation) or str(a.out_dtype) not in _FLOAT_OUT:
            return None
        shape, out_shape = _static_shape(call.args[0]), _static_shape(call)
        weight = self._weight(call.args[1], 0)
        if shape is None or out_shape is None or weight is None:
            return None
        act = self._activation(call.args[0])
        if act is None:
            return None
        x, zu, sx = act
        w, sw = weight
        o, c, kh, kw = w.shape
        op, cp = _up(o, PANEL), _up(c, 4)
        wp = np.zeros((op, cp, kh, kw), np.int8)
        wp[:o, :c] = w
        packed = wp.transpose(0, 2, 3, 1).reshape(op // PANEL, PANEL, kh, kw, cp // 4, 4).transpose(0, 2, 3, 4, 1, 5)
        pt, pl, pb, pr = (int(p) for p in a.padding)
        if cp <= FEW_CHANNELS:  # an image: its padded rows whole vectors (columns the convolution never reads)
            pr += _up(shape[3] + pl + pr, ROW_VECTOR) - (shape[3] + pl + pr)
        emit = self.builder_.emit
        xn = emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
        if pt or pl or pb or pr or cp != c:
            xn = emit(relax.op.nn.pad(xn, [0, 0, pt, pb, pl, pr, 0, cp - c], pad_value=float(zu)))
        out_h, out_w = out_shape[2], out_shape[3]
        acc = emit(self.builder_.call_te(
            conv2d_nhwc_int8, xn, relax.const(np.ascontiguousarray(packed)), int(a.strides[0]), int(a.strides[1]),
            out_h, out_w, int(np.abs(w.astype(np.int32)).max(initial=0)), primfunc_name_hint="conv2d_nhwc_int8"))
        corr = np.zeros(op, np.int64)
        corr[:o] = zu * wp[:o].astype(np.int64).sum(axis=(1, 2, 3))
        scale = np.zeros(op)
        scale[:o] = sx * sw
        y = self._finish(acc, corr, scale, o, 3)
        return relax.op.permute_dims(y, [0, 3, 1, 2])

    def _matmul(self, call):
        if str(call.attrs.out_dtype) not in _FLOAT_OUT:
            return None
        rhs = self._bound(call.args[1])
        transposed = isinstance(rhs, relax.Call) and rhs.op.same_as(_PERMUTE) and (
            rhs.attrs.axes is not None and [int(i) for i in rhs.attrs.axes] == [1, 0])
        weight = self._weight(rhs.args[0], 0) if transposed else self._weight(call.args[1], 1)
        shape, out_shape = _static_shape(call.args[0]), _static_shape(call)
        if weight is None or shape is None or out_shape is None or len(shape) < 2:
            return None
        w, sw = weight
        w = w if transposed else w.T  # [N, K]
        if w.ndim != 2:
            return None
        act = self._activation(call.args[0])
        if act is None:
            return None
        x, zu, sx = act
        n, k = w.shape
        np_, kp = _up(n, PANEL), _up(k, 4)
        wp = np.zeros((np_, kp), np.int8)
        wp[:n, :k] = w
        packed = wp.reshape(np_ // PANEL, PANEL, kp // 4, 4).transpose(0, 2, 1, 3)
        emit = self.builder_.emit
        m = int(np.prod(shape[:-1]))
        x2 = emit(relax.op.reshape(x, [m, k])) if len(shape) != 2 else x
        if kp != k:
            x2 = emit(relax.op.nn.pad(x2, [0, 0, 0, kp - k], pad_value=float(zu)))
        acc = emit(self.builder_.call_te(dense_int8, x2, relax.const(np.ascontiguousarray(packed)),
                                         int(np.abs(w.astype(np.int32)).max(initial=0)), primfunc_name_hint="dense_int8"))
        corr = np.zeros(np_, np.int64)
        corr[:n] = zu * wp[:n].astype(np.int64).sum(axis=1)
        scale = np.zeros(np_)
        scale[:n] = sx * sw
        y = self._finish(acc, corr, scale, n, 1)
        return relax.op.reshape(y, out_shape) if len(out_shape) != 2 else y


def _dequantizes(mod: tvm.IRModule) -> bool:
    """Whether any Relax function of ``mod`` binds a dequantize (a float model then costs a scan,
    not a pass of the rewriting mutator that changes nothing)."""
    return any(isinstance(b.value, relax.Call) and b.value.op.same_as(_DEQUANTIZE)
               for f in mod.functions.values() if isinstance(f, relax.Function) for b in iter_bindings(f))


def int8_kernels_for(target) -> bool:
    """Whether :func:`QDQToInt8Kernels` writes int8 kernels for ``target`` (an
    :class:`explorer.target.Target`): a CPU with int8 dot-product instructions schedx knows."""
    from explorer.schedule.int8_dot import isa_for

    return bool(target.cpu_rules) and isa_for(target) is not None


@tvm.transform.module_pass(opt_level=0, name="QDQToInt8Kernels")
@cpu_rewrite
def QDQToInt8Kernels(mod: tvm.IRModule, target) -> tvm.IRModule:
    """Quantized conv2d/matmul as int8 kernels with int32 accumulation (see the module docstring),
    on a CPU with int8 dot-product instructions; elsewhere the model is left as it is (without
    them, int32 multiplies are slower than the float kernels)."""
    if not _dequantizes(mod) or not int8_kernels_for(target):
        return mod
    rewriter = _Rewriter(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    if not rewriter.rewritten:
        return mod
    return requantize(relax.transform.DeadCodeElimination()(rewriter.builder_.get()))


__all__ = ["QDQToInt8Kernels", "conv2d_nhwc_int8", "dense_int8", "int8_kernels_for"]
