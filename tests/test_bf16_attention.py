"""A bf16 build's attention: the Q, K and V projections (three weight products of the same
activations) as one product on their weights side by side, and the products of two activations
(``Q K^T``, ``P V``) as bf16 kernels that round both operands at run time, on AMX tiles or
``vdpbf16ps``. Relax- and compile-level checks on any host; the numeric ones where /proc/cpuinfo
lists the instructions."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax, te

from explorer.passes import bf16_attention
from explorer.passes.bf16_attention import batch_dense_bf16
from explorer.passes.bf16_dense import bf16_products, bf16_round
from explorer.precision import BF16_TOLERANCE
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from tests.bf16_models import DIM, HEADS, HIDDEN, SEQ, attention_relax
from tests.cpu_marks import HAS_BF16, NEEDS_AMX

def _fused(mod: tvm.IRModule) -> tvm.IRModule:
    from tvm.relax import transform

    return tvm.transform.Sequential([transform.LegalizeOps(), transform.AnnotateTIROpPattern(), transform.FoldConstant(),
                                     transform.FuseOps(), transform.FuseTIR()])(mod)


def test_qkv_become_one_product_and_attention_two_bf16_kernels():
    mod, converted, _ = bf16_products(attention_relax())
    text = mod["main"].script(show_meta=False)
    assert converted == 5  # three projections and the two products of activations
    assert text.count("R.call_tir(dense_bf16") == 1 and f"(1, {SEQ}, {3 * HIDDEN})" in text  # Q, K, V side by side
    assert text.count("R.strided_slice") == 3 and "R.matmul" not in text
    assert text.count("R.call_tir(batch_dense_bf16") == 2  # Q K^T and P V


def test_k_transposed_is_read_by_rows_so_its_heads_split_as_q_and_v_do():
    mod, _, _ = bf16_products(attention_relax())
    text = mod["main"].script(show_meta=False)
    assert "axes=[0, 2, 3, 1]" not in text and text.count("axes=[0, 2, 1, 3]") == 3  # K as Q and V come
    assert text.count("R.call_tir(batch_dense_bf16") == 2


def test_products_of_different_activations_stay_separate():
    bb = relax.BlockBuilder()
    x, z = (relax.Var(n, relax.TensorType((1, SEQ, HIDDEN), "float32")) for n in "xz")
    w = np.ones((HIDDEN, HIDDEN), "float32")
    with bb.function("main", [x, z]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(relax.op.matmul(x, relax.const(w)), relax.op.matmul(z, relax.const(w))))
        bb.emit_func_output(out)
    mod, converted, _ = bf16_products(bb.get())
    text = mod["main"].script(show_meta=False)
    assert converted == 2 and text.count("R.call_tir(dense_bf16") == 2 and "R.strided_slice" not in text


def _scores_func(heads: int, m: int, n: int, k: int, b_rows: bool = False) -> tvm.tirx.PrimFunc:
    """``(a @ b) * 0.125`` on ``[1, heads, m, k] x [1, heads, k, n]`` (``b_rows``: ``b`` given as its
    transpose ``[1, heads, n, k]``), as FuseOps leaves ``Q K^T`` and its scale."""
    a = te.placeholder((1, heads, m, k), "float32", "a")
    b = te.placeholder((1, heads, n, k) if b_rows else (1, heads, k, n), "float32", "b")
    y = batch_dense_bf16(a, b, b_rows)
    return te.create_prim_func([a, b, te.compute(y.shape, lambda *i: y[i] * 0.125, name="scale")])


def _built(spec: str, shape=(HEADS, SEQ, SEQ, DIM), b_rows: bool = False):
    target = parse_target(spec)
    func, choice = default_schedule(_scores_func(*shape, b_rows), target.cpu_spec())
    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()), choice


def test_sapphirerapids_runs_attention_products_on_amx_tiles_heads_in_parallel():
    lib, choice = _built("cpu:sapphirerapids")
    assert choice.rule == "full" and "AMX" in choice.steps[0] and "epilogue per tile" in choice.steps[0], choice
    asm = lib.mod.inspect_source("asm")
    assert "tdpbf16ps" in asm and "tileloadd" in asm and "tilerelease" in asm


def test_znver4_runs_attention_products_with_vdpbf16ps():
    lib, choice = _built("cpu:znver4")
    assert "vdpbf16ps" in choice.steps[0], choice
    assert "vdpbf16ps" in lib.mod.inspect_source("asm") and "tdpbf16ps" not in lib.mod.inspect_source("asm")


@NEEDS_AMX
@pytest.mark.parametrize("b_rows", [False, True])  # b as it is; b given as its transpose (K for K^T)
@pytest.mark.parametrize("shape", [(HEADS, SEQ, SEQ, DIM), (3, 16, 48, 6)])  # AMX tiles; vdpbf16ps (K=6)
def test_attention_product_rounds_both_operands_and_matches_numpy(shape, b_rows):
    heads, m, n, k = shape
    lib, _ = _built("cpu", shape, b_rows)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((1, heads, m, k)).astype("float32"), rng.standard_normal((1, heads, k, n)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, heads, m, n), "float32"))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(np.ascontiguousarray(b.swapaxes(-1, -2)) if b_rows else b), out)
    got = out.numpy()
    exact = (bf16_round(a).astype(np.float64) @ bf16_round(b).astype(np.float64)) * 0.125
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()  # bf16 products, fp32 sums
    ref = (a @ b) * 0.125
    assert np.abs(got - ref).max() <= BF16_TOLERANCE * np.abs(ref).max()


def _attention_onnx(scale: float = DIM ** -0.5, seq: int = SEQ) -> onnx.ModelProto:
    """The same attention as :func:`attention_relax`, as ONNX (what ONNX Runtime checks the bundle against)."""
    rng = np.random.default_rng(4)
    inits, nodes = [numpy_helper.from_array(np.array([1, seq, HEADS, DIM], np.int64), "split"),
                    numpy_helper.from_array(np.array(scale, np.float32), "scale")], []
    for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        inits += [numpy_helper.from_array(rng.normal(0, HIDDEN ** -0.5, (HIDDEN, HIDDEN)).astype("float32"), f"w{name}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, HIDDEN).astype("float32"), f"b{name}")]
        nodes += [helper.make_node("MatMul", ["x", f"w{name}"], [f"{name}0"]),
                  helper.make_node("Add", [f"{name}0", f"b{name}"], [f"{name}1"]),
                  helper.make_node("Reshape", [f"{name}1", "split"], [f"{name}2"]),
                  helper.make_node("Transpose", [f"{name}2"], [name], perm=perm)]
    nodes += [helper.make_node("MatMul", ["q", "k"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["s1"]),
              helper.make_node("Softmax", ["s1"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(nodes, "attention",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, HEADS, seq, DIM])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags): the bf16 "
                                         "bundle cannot run here")
@pytest.mark.parametrize("scale", [DIM ** -0.5, 0.125])  # a scale in the scores' kernel; one folded into Q's packing
def test_bf16_attention_bundle_verifies_against_onnx_runtime_fp32(tmp_path, scale):
    from export.flow import export_workload

    path = tmp_path / "attention.onnx"
    onnx.save(_attention_onnx(scale), path)
    report = export_workload(str(path), "cpu", tmp_path / "bundle", precision="bf16", layers=False)
    assert report.verified, report.verdict
    assert report.manifest["precision"]["converted_products"] == 5


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512-BF16 (avx512_bf16 not in its flags): the bf16 "
                                         "bundle cannot run here")
def test_a_197_token_attention_padded_to_whole_tiles_verifies_against_onnx_runtime_fp32(tmp_path):
    """A ViT's 197 tokens: Q K^T computed on 200 x 224 (or 208 x 208 on AMX tiles), the padded rows and
    columns sliced off in the product's kernel; P V (K = 197, odd) stays fp32."""
    from export.flow import export_workload

    path = tmp_path / "attention197.onnx"
    onnx.save(_attention_onnx(0.125, seq=197), path)
    report = export_workload(str(path), "cpu", tmp_path / "bundle", precision="bf16", layers=False)
    assert report.verified, report.verdict
    products = [t["name"] for t in report.manifest["tasks"] if "batch_dense_bf16" in t["name"]]
    assert len(products) == 1 and "strided_slice" in products[0], report.manifest["tasks"]


def test_heads_split_copies_write_packed_bf16_so_only_the_softmax_output_is_packed_per_call():
    fused = _fused(bf16_products(attention_relax())[0])
    text = fused["main"].script(show_meta=False)
    # Q, K and V: one copy each from the Q/K/V product's output straight to bf16 bits (K and V in panels)
    assert text.count("add_reshape_transpose_bf16_pack") == 3 and "R.call_tir(strided_slice" not in text
    assert text.count('dtype="uint16"') == 3
    scores = next(f for gv, f in fused.functions.items() if gv.name_hint == "fused_batch_dense_bf16_multiply")
    values = next(f for gv, f in fused.functions.items() if gv.name_hint.startswith("batch_dense_bf16"))
    assert "bf16_pack" not in scores.script() and "bf16_pack_b" not in values.script() and "bf16_pack" in values.script()


@NEEDS_AMX
def test_attention_product_of_operands_packed_ahead_matches_numpy():
    from explorer.passes.bf16_attention import bf16_panels, bf16_rows

    heads, m, n, k = HEADS, SEQ, SEQ, DIM
    a = te.placeholder((1, heads, m, k), "float32", "a")
    bt = te.placeholder((1, heads, n, k), "float32", "bt")  # K as it comes: its panels read rows
    ab, bb = bf16_rows(a), bf16_panels(bt, b_rows=True)
    pa, pb = te.placeholder(ab.shape, "uint16", "pa"), te.placeholder(bb.shape, "uint16", "pb")
    y = batch_dense_bf16(pa, pb)
    target = parse_target("cpu")
    func, choice = default_schedule(te.create_prim_func([pa, pb, y]), target.cpu_spec())
    assert "AMX" in choice.steps[0], choice
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm())
    packer = tvm.compile(te.create_prim_func([a, bt, ab, bb]), target=target.tvm())
    rng = np.random.default_rng(7)
    av, btv = rng.standard_normal((1, heads, m, k)).astype("float32"), rng.standard_normal((1, heads, n, k)).astype("float32")
    bits = [tvm.runtime.tensor(np.zeros([int(v) for v in t.shape], "uint16")) for t in (ab, bb)]
    packer["main"](tvm.runtime.tensor(av), tvm.runtime.tensor(btv), *bits)
    out = tvm.runtime.tensor(np.zeros((1, heads, m, n), "float32"))
    lib["main"](*bits, out)
    exact = bf16_round(av).astype(np.float64) @ bf16_round(btv).astype(np.float64).swapaxes(-1, -2)
    assert np.abs(out.numpy() - exact).max() <= 1e-5 * np.abs(exact).max()


@pytest.mark.parametrize("scale, folded", [(0.125, True), (DIM ** -0.5, False)])
def test_a_power_of_two_scale_multiplies_q_in_its_packing_not_the_scores(scale, folded):
    from explorer.passes.bf16_attention import bf16_rows

    mod, _, _ = bf16_products(attention_relax(scale))
    assert ("R.multiply" in mod["main"].script(show_meta=False)) != folded  # (exact only for a power of two)
    fused = _fused(mod)
    names = {gv.name_hint for gv in fused.functions}
    assert ("fused_batch_dense_bf16_multiply" not in names) == folded and ("batch_dense_bf16" in names) == folded
    q_pack = next(f for gv, f in fused.functions.items() if gv.name_hint.endswith("_bf16_pack"))
    assert ("0.125" in q_pack.script()) == folded
    # bf16(q * 2^-3) is bf16(q) * 2^-3 exactly: the folded scores are the product's scaled
    rng = np.random.default_rng(8)
    q = te.placeholder((1, HEADS, SEQ, DIM), "float32", "q")
    packed = tvm.compile(te.create_prim_func([q, bf16_rows(q, 0.125)]), target="llvm")
    qv = rng.standard_normal((1, HEADS, SEQ, DIM)).astype("float32")
    bits = tvm.runtime.tensor(np.zeros(qv.shape, "uint16"))
    packed["main"](tvm.runtime.tensor(qv), bits)
    np.testing.assert_array_equal((bits.numpy().astype(np.uint32) << 16).view(np.float32), bf16_round(qv) * np.float32(0.125))


def test_a_head_product_smaller_than_a_tile_grid_stays_fp32():
    """Heads of 16 over 16 tokens (small encoders): packing both operands per call costs more than
    the tiles save, so the product stays an fp32 matmul; 32 x 32 x 32 is taken."""
    def product(m: int, k: int, n: int) -> relax.Call:
        a = relax.Var("a", relax.TensorType((1, 2, m, k), "float32"))
        b = relax.Var("b", relax.TensorType((1, 2, k, n), "float32"))
        return relax.op.matmul(a, b)

    assert not bf16_attention.fits(product(16, 16, 16))
    assert bf16_attention.fits(product(32, 32, 32))
