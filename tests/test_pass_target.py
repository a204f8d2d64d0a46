"""The graph passes that pay on some CPUs only decide for the CPU an export builds for, never for
the machine that builds it: `schedx export --target cpu:znver3` on an AVX-512 host keeps a
24-channel convolution at 24 (three whole AVX2 vectors), cpu:sapphirerapids pads it to 32 (two
AVX-512 vectors), whatever this machine's own vectors are."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from app.cli import cli
from explorer.passes.conv_channels import padded_channels
from explorer.passes.pass_target import pass_cpu_target
from explorer.workload.fusion import pipeline_target
from explorer.target import host_target, parse_target


def _projection(path, channels: int = 24) -> str:
    """A 1x1 convolution from 32 channels to ``channels`` (MobileNetV2's projection), NCHW as exported."""
    w = np.random.default_rng(0).normal(0, 0.2, (channels, 32, 1, 1)).astype("float32")
    graph = helper.make_graph([helper.make_node("Conv", ["input", "w"], ["out"])], "projection",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 32, 20, 20])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, channels, 20, 20])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def _exported_tasks(model: str, spec: str, out) -> list[str]:
    result = CliRunner().invoke(cli, ["export", model, "--target", spec, "-o", str(out), "--no-db", "--no-verify",
                                      "--no-layers", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    assert report["ok"] and report["target"]["spec"] == spec
    return [t["name"] for t in report["tasks"]]


@pytest.mark.parametrize("spec,padded", [("cpu:znver3", False), ("cpu:sapphirerapids", True)])
def test_the_channel_padding_follows_the_build_target_not_the_host(tmp_path, spec, padded):
    assert padded_channels(24, parse_target(spec).cpu_spec().lanes("float32")) == (32 if padded else 24)
    conv = [t for t in _exported_tasks(_projection(tmp_path / "p.onnx"), spec, tmp_path / "b") if "conv" in t]
    assert len(conv) == 1 and ("strided_slice" in conv[0]) == padded, conv


def test_this_machine_pads_for_its_own_vectors(tmp_path):
    padded = padded_channels(24, host_target().cpu_spec().lanes("float32")) != 24
    conv = [t for t in _exported_tasks(_projection(tmp_path / "p.onnx"), "cpu", tmp_path / "b") if "conv" in t]
    assert len(conv) == 1 and ("strided_slice" in conv[0]) == padded, conv


def _cpu_rewrites_model(path) -> str:
    """What each CPU-only rewrite takes, NCHW as exported: a 1x1 expansion 8 -> 48 at 112 x 112 (2.4 MB,
    more than an L2), ReLU6, a stride-2 depthwise conv (ExpandIntoDepthwise), a 1x1 projection to 75
    channels (no vector divides them: PadConvOutputChannels), a 3x3 stride-1 conv at 56 x 56 (Winograd)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, shape).astype("float32"), name) for name, shape in
             (("we", (48, 8, 1, 1)), ("wd", (48, 1, 3, 3)), ("wp", (75, 48, 1, 1)), ("w3", (32, 75, 3, 3)))]
    inits += [numpy_helper.from_array(np.array(v, "float32"), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
    nodes = [helper.make_node("Conv", ["input", "we"], ["e"]), helper.make_node("Clip", ["e", "lo", "hi"], ["ea"]),
             helper.make_node("Conv", ["ea", "wd"], ["d"], group=48, pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Conv", ["d", "wp"], ["p"]),
             helper.make_node("Conv", ["p", "w3"], ["out"], pads=[1] * 4)]
    graph = helper.make_graph(nodes, "cpu_rewrites", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 112, 112])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_a_cuda_build_keeps_the_plain_convolutions_that_a_cpu_build_rewrites_and_compiles(tmp_path):
    """The rewrites for a CPU's vectors and caches (a tile of the bands' schedule, channels padded to
    whole vectors, Winograd products for a CPU's GEMM) are none of a GPU's business: a CUDA build's task
    pipeline leaves its convolutions to dlight, and nvcc compiles them (nothing runs: no GPU here)."""
    model = _cpu_rewrites_model(tmp_path / "m.onnx")
    cpu = " ".join(_exported_tasks(model, "cpu:znver3", tmp_path / "cpu"))
    assert all(k in cpu for k in ("expand_depthwise", "strided_slice", "winograd")), cpu
    result = CliRunner().invoke(cli, ["export", model, "--target", "cuda:sm_80", "-o", str(tmp_path / "cuda"),
                                      "--no-db", "--no-layers", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    tasks = [t["name"] for t in report["tasks"]]
    assert not any(k in n for n in tasks for k in ("expand_depthwise", "strided_slice", "winograd")), tasks
    assert sum("conv2d" in n for n in tasks) == 4, tasks
    assert report["ok"] and (tmp_path / "cuda" / "kernels_sm_80.cubin").stat().st_size > 0, report


def test_the_passes_see_the_cpu_built_for_and_no_cpu_for_a_device():
    assert pass_cpu_target().is_host  # no target: this machine
    with pipeline_target(None):
        assert pass_cpu_target().is_host
    with pipeline_target(parse_target("cpu:znver3")):
        assert pass_cpu_target().cpu_name == "znver3"
    with pipeline_target(parse_target("cuda:sm_80")):
        assert pass_cpu_target() is None
