"""WinogradConv3x3: 3x3 stride-1 convolutions on large enough maps become Winograd F(4x4, 3x3)
products (input tiles, their transform, one batched product per tile position, the output
transform, the output tiles); the same numbers as a direct convolution, where the rule says it pays."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from explorer.passes.winograd import conv_by_winograd, winograd_pays
from explorer.schedule.codegen import code_views
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.workload import load_workload

TILE = re.compile(r"register tile (\d+)x(\d+)")


def _direct(x: np.ndarray, w: np.ndarray, pads) -> np.ndarray:
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    oh, ow = xp.shape[1] - 2, xp.shape[2] - 2
    return sum(np.einsum("nhwc,ck->nhwk", xp[:, i:i + oh, j:j + ow], w[i, j].astype(np.float64))
               for i in range(3) for j in range(3))


@pytest.mark.parametrize("shape,pads", [((1, 13, 11, 8), (1, 1, 1, 1)), ((2, 9, 9, 4), (0, 0, 0, 0)),
                                        ((1, 17, 20, 5), (0, 1, 2, 1)), ((1, 4, 4, 3), (1, 1, 1, 1))])
def test_the_transforms_compute_the_direct_convolution(shape, pads):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((3, 3, shape[3], 7)).astype(np.float32)
    got, want = conv_by_winograd(x, w, pads), _direct(x, w, pads)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_the_rule_takes_resnet_stages_with_enough_tiles_and_channels():
    assert winograd_pays(1, 56, 56, 64, 64)  # ResNet-18's first stage: 196 tiles
    assert winograd_pays(1, 28, 28, 128, 128) and winograd_pays(1, 14, 14, 256, 256)  # 49 and 16 tiles
    assert not winograd_pays(1, 7, 7, 512, 512)  # 4 tiles: products 4 rows thin, the direct kernel wins
    assert winograd_pays(4, 7, 7, 512, 512)  # ... unless a batch gives them rows
    assert not winograd_pays(1, 112, 112, 16, 16)  # transforms cost more than the product saves
    assert not winograd_pays(1, 32, 32, 3, 16)  # an RGB stem
    assert not winograd_pays(1, 8, 8, 32, 64)  # little work: five kernels for 1 M multiply-adds


def _conv_model(path, *, size=28, channels=64, stride=1, group=1, dilation=1, pads=(1, 1, 1, 1), batch=1):
    """Conv (+ bias) then ReLU, NCHW as exported."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.1, (channels, channels // group, 3, 3)).astype("float32"), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, (channels,)).astype("float32"), "b")]
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], pads=list(pads), strides=[stride, stride],
                              group=group, dilations=[dilation, dilation]),
             helper.make_node("Relu", ["c"], ["out"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                            [batch, channels, size, size])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def _task_names(path) -> list[str]:
    return [t.name for t in load_workload(path).tasks()]


def test_a_convolution_becomes_products_and_tile_gathers(tmp_path):
    names = _task_names(_conv_model(tmp_path / "c.onnx"))
    assert not any("conv2d" in n for n in names), names
    # the input transform's column half, the batched product, the output transform
    assert sum("matmul" in n for n in names) == 3, names
    assert any("winograd_input_rows" in n for n in names) and any("winograd_output_tiles" in n and "relu" in n
                                                                  for n in names), names  # the epilogue follows


@pytest.mark.parametrize("kind", ["stride", "group", "dilation", "small_map"])
def test_convolutions_the_rule_or_the_transform_cannot_take_stay_direct(tmp_path, kind):
    args = {"stride": {"stride": 2}, "group": {"group": 2}, "dilation": {"dilation": 2, "pads": (2, 2, 2, 2)},
            "small_map": {"size": 7}}[kind]
    names = _task_names(_conv_model(tmp_path / "c.onnx", **args))
    assert any("conv2d" in n for n in names) and not any("winograd" in n for n in names), names


def test_a_grouped_convolution_with_wide_groups_becomes_one_product_per_point_and_group(tmp_path):
    tasks = load_workload(_conv_model(tmp_path / "c.onnx", group=2, channels=256, size=18)).tasks()
    assert not any("conv2d" in t.name for t in tasks), [t.name for t in tasks]
    product = next(t for t in tasks if _batched_product(t))
    data, weights = (tuple(int(x) for x in p.shape) for p in product.mod["main"].params[:2])
    assert data == (36 * 2, 25, 128) and weights == (36 * 2, 128, 128), (data, weights)


def _batched_product(task) -> bool:
    return "matmul" in task.name and len(task.mod["main"].params[0].shape) == 3


def _input_rows(task) -> bool:  # the gather of the input tiles with B^T applied to their rows
    return "winograd_input_rows" in task.name


@pytest.mark.parametrize("kernel", [_batched_product, _input_rows])
@pytest.mark.parametrize("spec", ["cpu:x86-64-v3", "cpu:x86-64-v4", "aarch64:cortex-a76"])
def test_the_products_get_vector_register_tiles_on_every_width(tmp_path, spec, kernel):
    target = parse_target(spec)
    cpu = target.cpu_spec()
    tasks = load_workload(_conv_model(tmp_path / "c.onnx")).tasks()
    func, choice = default_schedule(next(t for t in tasks if kernel(t)).mod["main"], cpu)
    tile = TILE.search(" ".join(choice.steps))
    assert tile and int(tile.group(2)) % cpu.lanes("float32") == 0, choice.steps
    if kernel is _batched_product:  # one weight matrix per tile point, packed in panels of the tile's width
        # unless its rows are one tile wide already (contiguous as they are)
        assert ("weights packed in panels" in choice.steps[0]) is (int(tile.group(2)) < 64), choice.steps
    if spec.startswith("cpu"):  # compiled, not run: multiply-adds on the width's registers
        asm = code_views(tvm.IRModule({"main": func}), target).asm
        register = "zmm" if "v4" in spec else "ymm"
        assert re.search(rf"vfmadd\w+\s+.*%{register}", asm), asm[:2000]


@pytest.mark.heavy
@pytest.mark.parametrize("args", [{}, {"pads": (0, 1, 2, 1), "size": 30}, {"batch": 2, "size": 14, "channels": 96},
                                  {"group": 2, "channels": 256, "size": 18}])  # ResNeSt's split attention
def test_winograd_models_match_onnx_runtime(tmp_path, args):
    from export import export_workload

    path = _conv_model(tmp_path / "c.onnx", **args)
    assert any("winograd" in n for n in _task_names(path))
    report = export_workload(load_workload(path), "cpu", tmp_path / "b", layers=False)
    assert report.ok and report.verified, report.verdict


@pytest.mark.heavy
def test_winograd_kernels_cross_compile_for_arm(tmp_path):
    """Built and checked, not run: the aarch64 library cross-compiled. (A CUDA build keeps the direct
    convolution for dlight: tests/test_pass_target.py.)"""
    from export import export_workload

    for name, args in (("c", {}), ("grouped", {"group": 2, "channels": 256, "size": 18})):
        path = _conv_model(tmp_path / f"{name}.onnx", **args)
        assert any("winograd" in n for n in _task_names(path))
        report = export_workload(load_workload(path), "aarch64:cortex-a76", tmp_path / name, layers=False)
        assert report.ok, report.verdict
