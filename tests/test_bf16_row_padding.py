"""A bf16 weight product whose rows the largest tile does not divide (a ViT's 197 tokens, Swin's 196)
is computed on rows padded with zeros to whole tiles, 8 rows on vdpbf16ps and 16 on AMX, and
sliced back after (:func:`explorer.schedule.bf16_dot.padded_rows`): unpadded, 197 rows took tiles
of one row, 196 tiles of four.
Compile-only per target on any host; the numeric runs where /proc/cpuinfo lists AVX512-BF16."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax, te

from explorer.ir.relax_walk import iter_bindings, tensor_info
from explorer.passes.bf16_dense import bf16_products, dense_bf16, pack_weights, why_fp32
from explorer.schedule.bf16_dot import padded_rows
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from tests.bf16_products import check_dense_bf16
from tests.cpu_marks import NEEDS_BF16


@pytest.mark.parametrize("rows, k, isa, expected", [
    (197, 768, "avx512bf16", 200), (197, 768, "amx", 208), (77, 512, "avx512bf16", 80), (77, 512, "amx", 80),
    (7, 64, "avx512bf16", 8), (13, 256, "amx", 16),
    (196, 384, "avx512bf16", 200),  # tiles of 4 rows divide it: 1.4x slower than 8
    (100, 768, "amx", 112), (197, 24, "amx", 200),  # K = 24 fills no tile row: vdpbf16ps's 8 rows
    (1, 512, "avx512bf16", 1), (6, 512, "avx512bf16", 6), (9, 512, "amx", 9),  # more than a quarter more rows
    (128, 768, "avx512bf16", 128), (128, 768, "amx", 128), (197, 768, None, 197)])
def test_rows_pad_to_whole_tiles_where_that_adds_at_most_a_quarter(rows, k, isa, expected):
    assert padded_rows(rows, k, isa) == expected


def test_the_tiles_rule_reads_the_padded_rows_and_the_reason_the_real_ones():
    """197 x 768 -> 192 on an AMX CPU: 208 rows fill whole tiles, so it runs in bf16 (unpadded it was
    no tile's and, 197 > 16 rows, stayed fp32 on vdpbf16ps); a reason names the rows the model has."""
    assert why_fp32(197, 192, 768, "amx") is None
    assert why_fp32(197, 192, 768, "avx512bf16").startswith("197x768 -> 192: 197 rows > 16")


def _matmul_relax(shape: tuple, k: int = 64, n: int = 256) -> tvm.IRModule:
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((*shape, k), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.const(rng.standard_normal((k, n)).astype("float32"))))
            out = bb.emit_output(relax.op.add(y, relax.const(rng.standard_normal(n).astype("float32"))))
        bb.emit_func_output(out)
    return bb.get()


def _kernel_rows(mod: tvm.IRModule) -> int:
    """The rows the module's dense_bf16 kernel computes (its output's second-to-last axis)."""
    (shape,) = [tensor_info(b.var.ty)[0] for b in iter_bindings(mod["main"]) if isinstance(b.value, relax.Call)
                and b.value.args and getattr(b.value.args[0], "name_hint", "").startswith("dense_bf16")]
    return int(shape[-2])


@pytest.mark.parametrize("shape, isa, rows", [((1, 197), "avx512bf16", 200), ((1, 197), "amx", 208),
                                              ((3, 7), "avx512bf16", 24)])  # [3, 7, K]: reshaped to 21 rows
def test_the_pass_pads_the_kernels_rows_and_slices_them_off(shape, isa, rows):
    mod, converted, kept = bf16_products(_matmul_relax(shape), isa=isa, fast_vectors=True)
    assert converted == 1 and kept == ()
    assert _kernel_rows(mod) == rows
    assert [int(v) for v in tensor_info(mod["main"].ret_ty)[0]] == [*shape, 256]


@pytest.mark.parametrize("spec, tile", [("cpu:znver4", "8 rows x 2 panels"), ("cpu:sapphirerapids", "AMX")])
def test_a_197_row_product_padded_gets_the_full_tile(spec, tile):
    """Built for each target (compile only): 8-row vdpbf16ps tiles (unpadded: tiles of one row), AMX
    tiles on Sapphire Rapids (unpadded: vdpbf16ps)."""
    target = parse_target(spec)
    x = te.placeholder((197, 768), "float32", "x")
    w = te.placeholder((12, 384, 16, 2), "uint16", "w")
    func, choice = default_schedule(te.create_prim_func([x, w, dense_bf16(x, w, rows_to=padded_rows(
        197, 768, target.cpu_spec().bf16_dot))]), target.cpu_spec())
    assert tile in choice.steps[0], choice
    asm = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()).mod.inspect_source("asm")
    assert ("tdpbf16ps" if tile == "AMX" else "vdpbf16ps") in asm


@NEEDS_BF16
def test_the_padded_kernel_computes_the_real_rows_and_zeros_below():
    m, n, k = 197, 32, 96
    x = te.placeholder((m, k), "float32", "x")
    w = te.placeholder((n // 16, k // 2, 16, 2), "uint16", "w")
    func, _ = default_schedule(te.create_prim_func([x, w, dense_bf16(x, w, rows_to=200)]),
                               parse_target("cpu").cpu_spec())
    lib = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("cpu").tvm())
    rng = np.random.default_rng(1)
    xs, ws = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
    out = tvm.runtime.tensor(np.full((200, n), np.nan, "float32"))
    lib["main"](tvm.runtime.tensor(xs), tvm.runtime.tensor(pack_weights(ws)), out)
    check_dense_bf16(out.numpy()[:m], xs, ws)
    assert not out.numpy()[m:].any()  # the padded rows are zeros (the packing block wrote them)


def _mlp_onnx(rows: int) -> onnx.ModelProto:
    """x[1, rows, 256] -> MatMul 512 -> Add -> Relu -> MatMul 256: few rows by many weights, which
    vdpbf16ps takes on every AVX512-BF16 CPU (measured fast or not)."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.normal(0, 0.1, (256, 512)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 512).astype("float32"), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.1, (512, 256)).astype("float32"), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, 256])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@NEEDS_BF16
def test_a_13_row_model_padded_to_16_exports_and_verifies(tmp_path):
    from export.flow import export_workload

    path = tmp_path / "mlp13.onnx"
    onnx.save(_mlp_onnx(13), path)
    report = export_workload(str(path), "cpu", tmp_path / "bundle", precision="bf16", layers=False)
    assert report.verified, report.verdict
    assert report.manifest["precision"]["converted_products"] == 2
    names = [task["name"] for task in report.manifest["tasks"]]  # the padded rows sliced off in each product's kernel
    assert len(names) == 2 and all("dense_bf16" in name and "strided_slice" in name for name in names), names


def test_symbolic_rows_build_as_they_are_and_are_never_padded():
    x, w = te.placeholder((te.var("m"), 64), "float32", "x"), te.placeholder((2, 32, 16, 2), "uint16", "w")
    assert str(dense_bf16(x, w).shape[0]) == "m"
    with pytest.raises(ValueError, match="pads static rows only"):
        dense_bf16(x, w, rows_to=8)
