"""The graph passes that pay on some CPUs only decide for the CPU an export builds for, never for
the machine that builds it: `schedx export --target cpu:znver3` on an AVX-512 host keeps a
24-channel convolution at 24 (three whole AVX2 vectors), cpu:sapphirerapids pads it to 32 (two
AVX-512 vectors), whatever this machine's own vectors are."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from app.cli import cli
from explorer.passes.conv_channels import padded_channels
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
