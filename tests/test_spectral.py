"""ONNX's signal operators (STFT, DFT, window generators), which TVM's importer lacks, import as
products by constant Fourier matrices: each rewritten model computes what ONNX Runtime computes
for the original (real and complex signals, one- and two-sided, inverse, padded and cut lengths,
both DFT opsets), a model with them compiles with TVM and verifies, and a transform whose sizes
are computed at run time is refused with a message naming the node and what to fix."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from explorer.errors import UnsupportedOperatorError
from explorer.models import import_onnx
from explorer.models.spectral import has_spectral_ops, rewrite_spectral
from tests.onnx_cases import ort_run, random_feeds, tvm_run


def _int(name, value):
    return numpy_helper.from_array(np.array(value, "int64"), name)


def _stft_model(samples=1000, channels=1, step=160, length=400, window="init", onesided=1):
    inits, inputs = [_int("step", step)], ["x", "step"]
    nodes = []
    if window == "init":
        inits.append(numpy_helper.from_array(np.hanning(length + 1)[:-1].astype("float32"), "win"))
        inputs.append("win")
    elif window == "op":  # a window operator of constant size
        inits.append(_int("wlen", length))
        nodes.append(helper.make_node("HannWindow", ["wlen"], ["win"]))
        inputs.append("win")
    elif window == "input":  # computed at run time
        inputs.append("w_in")
    else:
        inputs.append("")
    inits.append(_int("len", length))
    inputs.append("len")
    nodes.append(helper.make_node("STFT", inputs, ["y"], onesided=onesided))
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, samples, channels])]
    if window == "input":
        graph_inputs.append(helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [length]))
    graph = helper.make_graph(nodes, "stft", graph_inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _dft_model(shape, axis, *, inverse=0, onesided=0, length=None, opset=17):
    inits, inputs, attrs = [], ["x"], {"inverse": inverse, "onesided": onesided}
    if length is not None:
        inits.append(_int("n", length))
    inputs.append("n" if length is not None else "")
    if opset >= 20:
        inits.append(_int("axis", axis))
        inputs.append("axis")
    else:
        attrs["axis"] = axis
    while inputs[-1] == "":
        inputs.pop()
    graph = helper.make_graph([helper.make_node("DFT", inputs, ["y"], **attrs)], "dft",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10 if opset >= 20 else 8)


def _same_as_onnx_runtime(model, rtol=1e-4):
    rewritten, notes = rewrite_spectral(onnx.shape_inference.infer_shapes(model))
    assert notes and not has_spectral_ops(rewritten)
    feeds = random_feeds(model)
    want, got = ort_run(model, feeds)[0], ort_run(rewritten, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())
    return rewritten


@pytest.mark.parametrize("case", [
    dict(),  # torch.stft's export: real, one-sided, a Hann window
    dict(window="none"),  # a rectangular frame of frame_length
    dict(onesided=0, step=100, length=256),
    dict(channels=2, onesided=0, length=128, step=64),  # a complex signal
    dict(window="op", length=256, step=128),  # the window from HannWindow
])
def test_an_stft_rewritten_computes_what_onnx_runtime_does(case):
    rewritten = _same_as_onnx_runtime(_stft_model(**case))
    assert "Conv" in [n.op_type for n in rewritten.graph.node]  # one strided convolution


@pytest.mark.parametrize("case", [
    dict(shape=[2, 64, 1], axis=1, onesided=1),  # rfft
    dict(shape=[2, 16, 24, 2], axis=1),  # a complex transform over an outer axis
    dict(shape=[2, 16, 24, 2], axis=2, inverse=1),
    dict(shape=[3, 50, 1], axis=1, length=64),  # zero-padded
    dict(shape=[3, 50, 2], axis=1, length=32),  # cut
    dict(shape=[2, 8, 32, 1], axis=-2, opset=20, onesided=1),  # the axis as an input
])
def test_a_dft_rewritten_computes_what_onnx_runtime_does(case):
    _same_as_onnx_runtime(_dft_model(**case))


def test_a_window_computed_at_run_time_is_refused_naming_the_node():
    model = _stft_model(window="input")
    with pytest.raises(UnsupportedOperatorError, match="window is computed at run time"):
        rewrite_spectral(model)


def test_a_model_with_an_stft_compiles_with_tvm_and_matches_onnx_runtime():
    length, step = 256, 128
    nodes = [helper.make_node("Unsqueeze", ["wav", "last"], ["x"]),
             helper.make_node("STFT", ["x", "step", "win", "len"], ["spec"]),
             helper.make_node("Mul", ["spec", "spec"], ["power"]),
             helper.make_node("ReduceSum", ["power", "last"], ["mag"], keepdims=0),
             helper.make_node("Add", ["mag", "eps"], ["mag_eps"]),
             helper.make_node("Log", ["mag_eps"], ["logmag"])]
    inits = [_int("last", [-1]), _int("step", step), _int("len", length),
             numpy_helper.from_array(np.hanning(length + 1)[:-1].astype("float32"), "win"),
             numpy_helper.from_array(np.array(1e-6, "float32"), "eps")]
    graph = helper.make_graph(nodes, "spectrogram", [helper.make_tensor_value_info("wav", TensorProto.FLOAT, [1, 4096])],
                              [helper.make_tensor_value_info("logmag", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    loaded = import_onnx(model)
    assert any("STFT" in note for note in loaded.info.notes)
    feeds = random_feeds(model)
    want = ort_run(model, feeds)[0]
    np.testing.assert_allclose(tvm_run(loaded, feeds)[0], want, rtol=1e-3, atol=1e-3)


def test_torch_fft2_exported_as_a_user_would_imports_and_matches_onnx_runtime(tmp_path):
    """FNet's token mixing (``fft2(x).real``) through ``torch.onnx.export``: two DFTs over a complex
    tensor made of the real input."""
    torch = pytest.importorskip("torch")

    class FourierMixing(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft2(x.to(torch.complex64)).real

    path = tmp_path / "fnet_mixing.onnx"
    torch.onnx.export(FourierMixing(), (torch.randn(1, 16, 32),), str(path), dynamo=True, verbose=False)
    model = onnx.load(str(path))
    assert [n.op_type for n in model.graph.node].count("DFT") == 2
    feeds = random_feeds(model)
    want = ort_run(model, feeds)[0]
    np.testing.assert_allclose(tvm_run(import_onnx(model), feeds)[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
