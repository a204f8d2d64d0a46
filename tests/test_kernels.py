"""Built-in kernels and fused model kernels: shapes, FLOPs from the TIR, numpy references."""

from __future__ import annotations

import pytest
import tvm

from explorer.kernels import BUILTINS, KernelError, builtin_kernel, load_kernel, parse_spec
from explorer.measure import check

SMALL = {
    "matmul": {"M": 32, "N": 48, "K": 16},
    "batch_matmul": {"Bt": 2, "M": 16, "N": 8, "K": 8},
    "dense_bias_relu": {"M": 8, "N": 32, "K": 16},
    "conv2d_nchw": {"C": 4, "H": 8, "W": 8, "K": 8, "stride": 2},
    "conv2d_nhwc": {"C": 4, "H": 8, "W": 8, "K": 8},
    "depthwise_conv2d": {"C": 8, "H": 8, "W": 8},
    "softmax": {"M": 8, "N": 16},
    "layer_norm": {"M": 4, "N": 32},
    "matmul_int8": {"M": 16, "N": 32, "K": 16},
}


def test_every_builtin_has_small_shapes_here():
    assert set(SMALL) == set(BUILTINS)


@pytest.mark.parametrize("name", list(BUILTINS))
def test_unscheduled_builtin_matches_its_numpy_reference(name):
    k = builtin_kernel(name, **SMALL[name])
    ok, why = check(k, tvm.IRModule({"main": k.func}))
    assert ok, why


def test_flops_come_from_the_tir():
    assert builtin_kernel("matmul", M=64, N=32, K=16).info.flops == 2 * 64 * 32 * 16
    conv = builtin_kernel("conv2d_nchw").info  # ResNet-18 layer1: 1x64x56x56, 64 3x3 filters
    assert conv.flops == 2 * 64 * 56 * 56 * 64 * 3 * 3
    assert conv.arithmetic_intensity > 100


def test_buffers_and_outputs():
    k = builtin_kernel("dense_bias_relu", **SMALL["dense_bias_relu"])
    assert [b.name for b in k.inputs] == ["X", "W", "bias"] and [b.name for b in k.outputs] == ["Y"]
    assert k.info.min_bytes == sum(b.nbytes for b in k.info.buffers)


def test_spec_parsing_and_errors():
    assert parse_spec("matmul:M=8, N=4") == ("matmul", {"M": 8, "N": 4})
    assert load_kernel("matmul:M=8,N=8,K=8").info.spec == "matmul:M=8,N=8,K=8"
    with pytest.raises(KernelError, match="unknown kernel 'matmal'"):
        load_kernel("matmal")
    with pytest.raises(KernelError, match="no parameter Q"):
        load_kernel("matmul:Q=3")
    with pytest.raises(KernelError, match="whole number"):
        load_kernel("matmul:M=big")
    with pytest.raises(KernelError, match="divisible by 16"):
        load_kernel("matmul_int8:N=20")


@pytest.mark.parametrize("spec, words", [
    ("matmul:M=1,M=2", "given twice"),
    ("conv2d_nchw:pad=-5", "at least 0"),
    ("conv2d_nchw:stride=0", "positive"),
    ("matmul:M=\uff15\uff11\uff12", "digits 0-9"),  # full-width 512: int() accepts it
    ("matmul:M=99999999999999999999", "far too large"),
    ("matmul:M=2147483648", "too large"),
    ("matmul:M=1.5", "whole number"),
])
def test_specs_refuse_duplicates_negative_sizes_and_foreign_digits(spec, words):
    with pytest.raises(KernelError, match=words):
        parse_spec(spec)


def test_pad_may_be_zero():
    assert parse_spec("conv2d_nchw:pad=0")[1] == {"pad": 0}


def test_fused_kernels_of_a_model_verify_against_the_unscheduled_kernel():
    from explorer.models import load_model
    from explorer.workload import load_kernel as load_any_kernel
    from explorer.workload import model_kernels

    kernels = model_kernels(load_model("small_cnn"))
    names = [k.name for k in kernels]
    assert any("fused" in n for n in names) and all(n.startswith("small_cnn/") for n in names)
    top = kernels[0]
    assert top.reference is None and top.info.flops > 0 and top.info.params["calls"] >= 1
    ok, why = check(top, tvm.IRModule({"main": top.func}))
    assert ok, why
    assert load_any_kernel(top.name, model_kernels_by_name={k.name: k for k in kernels}) is top
    with pytest.raises(KernelError, match="explorer.workload.load_kernel"):
        load_kernel(top.name)  # the built-in loader points to the one that knows models


def test_a_kernel_of_a_model_given_by_path_loads_by_its_listed_name(tmp_path):
    """``schedx kernels --model dir/net.onnx`` lists ``net/fused_...``; ``dir/net.onnx/fused_...``, the
    spec a user then types, names the same kernel (it was refused, naming the kernel as present)."""
    import onnx

    from explorer.models.zoo import build_onnx
    from explorer.workload import load_kernel as load_any_kernel

    path = tmp_path / "my_net.onnx"
    onnx.save(build_onnx("small_cnn"), path)
    kernel = load_any_kernel(f"{path}/fused_transpose_conv2d_add_relu")
    assert kernel.name.endswith("/fused_transpose_conv2d_add_relu") and kernel.info.flops > 0
    with pytest.raises(Exception, match="has no fused kernel 'fused_nothing'"):
        load_any_kernel(f"{path}/fused_nothing")
