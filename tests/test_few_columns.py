"""Products with fewer output columns than a vector over many rows (a NeRF's colour head, a token
classifier's few classes) run as dot products along the reduction, the weight laid out once at
build time, instead of copying the activations transposed on every call.

Each decision is checked by building for AVX2 and AVX-512 (compile only: the steps and the
instructions); the values on this machine."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import te, topi

from explorer.schedule.defaults import default_schedule
from explorer.schedule.defaults.machine import CpuSpec
from explorer.target import host_target, parse_target

AVX2 = ("cpu:x86-64-v3", CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64"))
AVX512 = ("cpu:x86-64-v4", CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64"))


def _head(rows: int = 512, depth: int = 128, columns: int = 3, weight: bool = True):
    """``sigmoid(x @ w + b)``, as NeRF's colour head is fused (``w`` [depth, columns], a weight)."""
    x = te.placeholder((rows, depth), name="x")
    w = te.placeholder((depth, columns), name="w")
    b = te.placeholder((columns,), name="b")
    k = te.reduce_axis((0, depth), name="k")
    y = te.compute((rows, columns), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="matmul")
    out = topi.sigmoid(topi.add(y, b))
    func = te.create_prim_func([x, w, b, out])
    return func.with_attr("schedx.weight_buffers", [1, 2]) if weight else func


def _asm(func, spec: str) -> str:
    return tvm.tirx.build(tvm.IRModule({"main": func}), target=parse_target(spec).tvm()).inspect_source("asm")


@pytest.mark.parametrize("spec, cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("columns", [3, 6])
def test_a_few_columns_become_dot_products_with_vector_partial_sums(spec, cpu, columns):
    func, choice = default_schedule(_head(columns=columns), cpu)
    assert choice.rule == "full" and choice.steps[0].startswith(f"dot products over 128 for {columns} columns"), choice
    assert "laid out with the reduction innermost at build time" in choice.steps[0]
    assert "16 partial results" in choice.steps[0] if cpu.vector_bits == 512 else "8 partial results" in choice.steps[0]
    asm = _asm(func, spec)
    register = "zmm" if cpu.vector_bits == 512 else "ymm"
    assert "vfmadd" in asm and register in asm
    assert "gather" not in asm  # (the transposed copy of the rows gathered; the weight's copy runs at build time)


@pytest.mark.parametrize("spec, cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_four_or_eight_columns_keep_their_register_tile_and_one_its_rows(spec, cpu):
    """4 or 8 columns make a tile's vector (16x4, 28x8 tiles ran faster than the pixels transposed:
    :func:`explorer.schedule.defaults.layouts.few_channels_pixel_axis`); one column is a dot
    product per row already (no output axis to tile)."""
    for columns in (4, 8):
        _, choice = default_schedule(_head(columns=columns), cpu)
        assert choice.steps[0].startswith("register tile"), choice
    _, choice = default_schedule(_head(columns=1), cpu)
    assert choice.steps[0].startswith("parallel rows (matmul") and "partial results in a vector" in choice.steps[0]


@pytest.mark.parametrize("case", ["activations", "one row", "short reduction"])
def test_not_a_few_column_product_of_a_weight_keeps_its_rule(case):
    """Two activations (nothing to lay out at build time), a single row (its own one-row tile) and a
    reduction shorter than two vectors keep the rules they had."""
    head = {"activations": _head(weight=False), "one row": _head(rows=1), "short reduction": _head(depth=16)}[case]
    _, choice = default_schedule(head, AVX512[1])
    assert not choice.steps[0].startswith("dot products"), choice


@pytest.mark.parametrize("columns", [1, 3, 5])
def test_the_dot_products_compute_the_head(columns):
    cpu = host_target().cpu_spec()
    func, choice = default_schedule(_head(rows=300, depth=100, columns=columns), cpu)
    rng = np.random.default_rng(columns)
    x = rng.standard_normal((300, 100)).astype("float32")
    w = rng.standard_normal((100, columns)).astype("float32")
    b = rng.standard_normal(columns).astype("float32")
    args = [tvm.runtime.tensor(a) for a in (x, w, b, np.zeros((300, columns), "float32"))]
    tvm.tirx.build(tvm.IRModule({"main": func}), target=host_target().tvm())["main"](*args)
    want = 1 / (1 + np.exp(-(x.astype(np.float64) @ w + b)))
    np.testing.assert_allclose(args[-1].numpy(), want, rtol=1e-5, atol=1e-6)


def _colour_head(path):
    """Gemm 64 -> 3 (a weight) + Sigmoid over 2048 rows, as NeRF's colour head exports."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.2, (3, 64)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.2, (3,)).astype("float32"), "b")
    nodes = [helper.make_node("Gemm", ["input", "w", "b"], ["g"], transB=1), helper.make_node("Sigmoid", ["g"], ["out"])]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2048, 64])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2048, 3])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_a_colour_head_from_onnx_takes_the_dot_products(tmp_path):
    from explorer.workload import load_workload

    mod = load_workload(_colour_head(tmp_path / "head.onnx")).fused_module()
    kernels = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    head = [f for name, f in kernels.items() if "matmul" in name or "dense" in name]
    assert len(head) == 1, list(kernels)
    _, choice = default_schedule(head[0], AVX512[1])
    assert choice.steps[0].startswith("dot products over 64 for 3 columns"), choice


@pytest.mark.heavy
def test_a_colour_head_exports_with_its_weight_laid_out_at_build_time_and_verifies(tmp_path):
    from export import export_workload
    from explorer.workload import load_workload

    report = export_workload(load_workload(_colour_head(tmp_path / "head.onnx")), "cpu", tmp_path / "bundle",
                             layers=False)
    assert report.ok and report.verified, report.verdict
