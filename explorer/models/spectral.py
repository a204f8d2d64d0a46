"""ONNX's signal operators (``STFT``, ``DFT``, the window generators) as products by constant
Fourier matrices, which TVM's importer takes.

TVM 0.27's importer has none of them: ``torch.stft`` and ``torch.fft.rfft`` in an exported audio
model (a spectrogram front end) or a token mixer (FNet) made the whole model unimportable. With
the frame length, the step and the window fixed, a discrete Fourier transform is linear in its
input, so each becomes an operator TVM already compiles well:

- ``STFT(signal, frame_step, window, frame_length)`` is a strided 1-D convolution of the signal by
  ``2 * bins`` filters, ``window[n] * cos(2 pi k n / N)`` and ``-window[n] * sin(...)`` (real and
  imaginary part of bin ``k``): ``Conv`` ``[B, C, L] -> [B, 2 * bins, frames]``, then reshaped and
  transposed to ONNX's ``[B, frames, bins, 2]``. A complex signal (``C = 2``) is two input channels.
- ``DFT(input, dft_length, axis)`` is a ``MatMul`` by the ``[N_in * C, 2 * bins]`` Fourier matrix
  over the transformed axis and the real/imaginary one (the input zero-padded or cut to
  ``dft_length`` by the matrix's rows), ``inverse`` scaling by ``1 / N`` as ONNX defines it.
- ``HannWindow``, ``HammingWindow``, ``BlackmanWindow`` and ``MelWeightMatrix`` of constant sizes
  are constants (ONNX's reference runtime computes them here).

The cost is the DFT's ``O(N^2)`` multiply-adds against an FFT's ``O(N log N)``, run as dense products
at the machine's FMA rate: for the frame lengths of speech front ends (400-1024 samples) that is what
ONNX Runtime's own kernels do (its STFT is a naive DFT too). Each rewrite keeps the model's meaning,
so ONNX Runtime checks it (the tests compare the rewritten model with the original).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from explorer.errors import UnsupportedOperatorError
from explorer.models.onnx_rewrite import Emitter, GraphView, replace_nodes

GENERATORS = frozenset({"HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"})
SPECTRAL = frozenset({"STFT", "DFT"}) | GENERATORS
_STANDARD = ("", "ai.onnx")


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _name(node: onnx.NodeProto) -> str:
    return node.name or (node.output[0] if node.output else node.op_type)


def _scalar(view: GraphView, node: onnx.NodeProto, index: int, what: str) -> int | None:
    """The constant integer input ``index`` of ``node`` (None when the input is absent)."""
    if len(node.input) <= index or not node.input[index]:
        return None
    value = view.constant(node.input[index])
    if value is None or value.size != 1:
        raise UnsupportedOperatorError(node.op_type, _name(node), f"its {what} is computed at run time; schedx "
                                       "computes a Fourier transform as a product by a constant matrix, so the "
                                       f"{what} must be a constant (export with it fixed)")
    return int(value.reshape(()))


def _signal_shape(view: GraphView, node: onnx.NodeProto) -> tuple[int, ...]:
    shape = view.shape(node.input[0])
    if shape is None:
        raise UnsupportedOperatorError(node.op_type, _name(node), "the shape of its input is not static; fix the "
                                       "model's input shapes (--shapes) so that the transform's size is known")
    if shape[-1] not in (1, 2):
        raise UnsupportedOperatorError(node.op_type, _name(node), f"its input's last dimension is {shape[-1]}; "
                                       "ONNX requires 1 (real) or 2 (complex)")
    return shape


def stft_filters(window: np.ndarray, bins: int, channels: int) -> np.ndarray:
    """``[2 * bins, channels, N]`` convolution filters whose outputs are the real parts of bins
    ``0..bins-1``, then their imaginary parts, of ``DFT(frame * window)`` (``channels`` 2: the
    frame is complex, real and imaginary part as two input channels)."""
    n = window.shape[0]
    theta = 2 * np.pi * np.outer(np.arange(bins), np.arange(n)) / n  # [bins, N]
    cos, sin = window * np.cos(theta), window * np.sin(theta)
    real = [cos, sin][:channels]  # (a + ib)(cos - i sin): re = a cos + b sin
    imag = [-sin, cos][:channels]  #                       im = b cos - a sin
    return np.concatenate([np.stack(real, 1), np.stack(imag, 1)], 0)


def dft_matrix(n_in: int, channels: int, length: int, bins: int, inverse: bool) -> np.ndarray:
    """``[n_in * channels, 2 * bins]``: ``x.reshape(n_in * channels) @ M`` is the transform of
    length ``length`` of ``x`` (``[n_in, channels]``), bin by bin, real then imaginary part
    interleaved as ONNX's last axis is; samples past ``length`` are cut, missing ones are zeros."""
    used = min(n_in, length)
    theta = 2 * np.pi * np.outer(np.arange(used), np.arange(bins)) / length  # [n, k]
    sign = 1.0 if inverse else -1.0
    cos, sin = np.cos(theta), sign * np.sin(theta)  # exp(sign * i * theta) = cos + i sin
    m = np.zeros((n_in, channels, bins, 2))
    m[:used, 0, :, 0], m[:used, 0, :, 1] = cos, sin  # (a)(cos + i sin)
    if channels == 2:
        m[:used, 1, :, 0], m[:used, 1, :, 1] = -sin, cos  # (i b)(cos + i sin)
    if inverse:
        m /= length
    return m.reshape(n_in * channels, bins * 2)


def _stft(node: onnx.NodeProto, view: GraphView) -> Emitter:
    shape = _signal_shape(view, node)
    if len(shape) != 3:
        raise UnsupportedOperatorError("STFT", _name(node), f"its signal has shape {list(shape)}; ONNX's STFT takes "
                                       "[batch, samples, 1 or 2]")
    batch, samples, channels = shape
    step = _scalar(view, node, 1, "frame step")
    length = _scalar(view, node, 3, "frame length")
    window = view.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if window is None and len(node.input) > 2 and node.input[2]:
        raise UnsupportedOperatorError("STFT", _name(node), "its window is computed at run time; schedx needs it "
                                       "constant (a registered buffer, or a window operator of constant size)")
    if length is None and window is None:
        raise UnsupportedOperatorError("STFT", _name(node), "it has neither a window nor a frame length")
    length = length if length is not None else int(window.shape[0])
    window = np.ones(length) if window is None else np.asarray(window, np.float64).reshape(-1)
    if window.shape[0] != length or step is None or step < 1 or length > samples:
        raise UnsupportedOperatorError("STFT", _name(node), f"frame length {length}, window of {window.shape[0]}, "
                                       f"step {step} on {samples} samples do not make frames")
    onesided = bool(_attrs(node).get("onesided", 1))
    bins = length // 2 + 1 if onesided else length
    frames = (samples - length) // step + 1
    dtype = helper.tensor_dtype_to_np_dtype(_elem_type(view, node.input[0]))
    em = Emitter(view, _name(node))
    if channels == 1:
        x = em.reshape(node.input[0], (batch, 1, samples))
    else:
        x = em.op("Transpose", [node.input[0]], perm=[0, 2, 1])
    filters = em.const(stft_filters(window, bins, channels).astype(dtype), "fourier_filters")
    y = em.op("Conv", [x, filters], strides=[step], kernel_shape=[length])  # [B, 2 * bins, frames]
    y = em.reshape(y, (batch, 2, bins, frames))
    em.op("Transpose", [y], out=node.output[0], perm=[0, 3, 2, 1])
    return em


def _elem_type(view: GraphView, name: str) -> int:
    return view.elem_types.get(name, onnx.TensorProto.FLOAT)


def _dft(node: onnx.NodeProto, view: GraphView) -> Emitter:
    shape = _signal_shape(view, node)
    attrs = _attrs(node)
    rank = len(shape)
    if view.opset >= 20:
        axis = _scalar(view, node, 2, "axis")
        axis = -2 if axis is None else axis
    else:
        axis = int(attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank - 1:
        raise UnsupportedOperatorError("DFT", _name(node), f"axis {axis} of an input of rank {rank}")
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    if inverse and onesided:
        raise UnsupportedOperatorError("DFT", _name(node), "an inverse transform with onesided=1 (ONNX leaves it "
                                       "undefined)")
    n_in, channels = shape[axis], shape[-1]
    length = _scalar(view, node, 1, "DFT length") or n_in
    bins = length // 2 + 1 if onesided else length
    dtype = helper.tensor_dtype_to_np_dtype(_elem_type(view, node.input[0]))
    em = Emitter(view, _name(node))
    others = [d for d in range(rank - 1) if d != axis]
    x = node.input[0]
    if axis != rank - 2:  # the transformed axis next to the real/imaginary one
        x = em.op("Transpose", [x], perm=[*others, axis, rank - 1])
    outer = [shape[d] for d in others]
    x = em.reshape(x, (*outer, n_in * channels))
    y = em.op("MatMul", [x, em.const(dft_matrix(n_in, channels, length, bins, inverse).astype(dtype), "fourier")])
    if axis == rank - 2:
        em.reshape(y, (*outer, bins, 2), out=node.output[0])
        return em
    y = em.reshape(y, (*outer, bins, 2))
    back = [0] * rank  # position of each output dimension in y
    for pos, d in enumerate(others):
        back[d] = pos
    back[axis], back[rank - 1] = rank - 2, rank - 1
    em.op("Transpose", [y], out=node.output[0], perm=back)
    return em


def _generator(node: onnx.NodeProto, view: GraphView) -> Emitter:
    value = view.constant(node.output[0])
    if value is None:
        raise UnsupportedOperatorError(node.op_type, _name(node), "its size is computed at run time; export "
                                       "it with a constant size (or the window as a registered buffer)")
    em = Emitter(view, _name(node))
    em.op("Identity", [em.const(value, node.op_type.lower())], out=node.output[0])
    return em


def _rewrite(node: onnx.NodeProto, view: GraphView) -> Emitter | None:
    if node.domain not in _STANDARD or node.op_type not in SPECTRAL:
        return None
    if node.op_type == "STFT":
        return _stft(node, view)
    if node.op_type == "DFT":
        return _dft(node, view)
    return _generator(node, view)


def has_spectral_ops(model: onnx.ModelProto) -> bool:
    return any(n.op_type in SPECTRAL and n.domain in _STANDARD for n in model.graph.node)


def rewrite_spectral(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` with every STFT, DFT and window operator of its main graph written as
    constant Fourier products (see the module's docstring), and a note naming what was rewritten;
    raises ``UnsupportedOperatorError`` for one whose sizes or window are computed at run time."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    counts: dict[str, int] = {}

    def rewrite(node: onnx.NodeProto, view: GraphView) -> Emitter | None:
        emitted = _rewrite(node, view)
        if emitted is not None:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
        return emitted

    if not replace_nodes(out, rewrite):
        return out, []
    what = ", ".join(f"{n} {op}" for op, n in sorted(counts.items()))
    return out, [f"{what} computed as products by constant Fourier matrices (STFT as a strided convolution, DFT as "
                 "a matrix product; TVM's importer has no signal operators)"]


__all__ = ["GENERATORS", "SPECTRAL", "dft_matrix", "has_spectral_ops", "rewrite_spectral", "stft_filters"]
