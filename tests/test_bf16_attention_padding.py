"""A bf16 build's products of two activations whose head width is no whole AMX tile (SVTR's heads
of 24): on a CPU with AMX, K padded with zeros to a tile row (32) and N to whole panels, sliced
after; on one without, rows and N only where that adds at most a quarter (vdpbf16ps takes K = 24,
an N of 24 stays fp32; a ViT's 197 tokens pad to 200 x 224). Relax- and
compile-level checks on any host; the numeric ones where /proc/cpuinfo lists AMX-BF16."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, te

from explorer.passes import bf16_attention
from explorer.passes.bf16_attention import batch_dense_bf16, padded_shape
from explorer.passes.bf16_dense import bf16_products, bf16_round
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from tests.bf16_models import attention_relax
from tests.cpu_marks import NEEDS_AMX

SEQ, HIDDEN = 64, 48  # two heads of 24


def _product(m: int, k: int, n: int) -> relax.Call:
    a = relax.Var("a", relax.TensorType((1, 2, m, k), "float32"))
    b = relax.Var("b", relax.TensorType((1, 2, k, n), "float32"))
    return relax.op.matmul(a, b)


def test_padded_shape_pads_k_to_a_tile_row_on_amx_tiles_and_rows_and_n_within_a_quarter_on_vdpbf16ps():
    assert padded_shape(256, 24, 256, isa="amx") == (256, 32, 256)  # SVTR's Q K^T
    assert padded_shape(256, 256, 24, isa="amx") == (256, 256, 32)  # its P V
    assert padded_shape(128, 64, 128, isa="amx") == (128, 64, 128)  # BERT's heads: whole tiles already
    assert padded_shape(256, 24, 24, isa="avx512bf16") == (256, 24, 24)  # vdpbf16ps: 32 columns are a third more
    assert padded_shape(40, 24, 24, isa="amx") == (48, 32, 32)  # 40 rows as three whole tiles (a fifth more)
    assert padded_shape(36, 24, 24, isa="amx") == (40, 24, 24)  # 48 is a third more: vdpbf16ps's 8-row tiles


def test_a_vits_197_tokens_pad_to_whole_tiles_on_either_instruction():
    assert padded_shape(197, 64, 197, isa="avx512bf16") == (200, 64, 224)  # Q K^T on vdpbf16ps: two panels a tile
    assert padded_shape(197, 197, 64, isa="avx512bf16") == (200, 197, 64)  # P V: an odd K stays (and so fp32)
    assert padded_shape(197, 64, 197, isa="amx") == (208, 64, 208)  # on AMX tiles
    assert padded_shape(197, 197, 64, isa="amx") == (200, 197, 64)  # an odd K stays on AMX too
    assert padded_shape(197, 64, 197, isa=None) == (197, 64, 197)  # no CPU's rule: as they are
    for isa in ("avx512bf16", "amx"):
        assert bf16_attention.fits(_product(197, 64, 197), isa) and not bf16_attention.fits(_product(197, 197, 64), isa)


def test_an_operand_packed_ahead_with_padded_rows_meets_its_other_at_the_same_k():
    """On AMX, 33 rows pad to 40 (vdpbf16ps's tiles; 48 is a third more) with K = 48 as it is; the
    kernel took 40 rows for real ones and padded b to AMX's K = 64: operands that disagree on K."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 33, 2, 48), "float32"))
    y = relax.Var("y", relax.TensorType((1, 2, 48, 64), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            q = bb.emit(relax.op.permute_dims(x, [0, 2, 1, 3]))  # a heads split: packed ahead
            out = bb.emit_output(relax.op.matmul(q, bb.emit(relax.op.add(y, y))))  # b no split
        bb.emit_func_output(out)
    for isa in ("avx512bf16", "amx"):
        mod, converted, _ = bf16_products(bb.get(), isa=isa)
        assert converted == 1 and 'R.Tensor((1, 2, 40, 48), dtype="uint16")' in mod["main"].script(), isa


def test_a_product_with_24_columns_is_taken_only_where_it_is_padded():
    assert bf16_attention.fits(_product(256, 256, 24), isa="amx")
    assert not bf16_attention.fits(_product(256, 256, 24), isa="avx512bf16")
    assert bf16_attention.fits(_product(256, 24, 256)) and bf16_attention.fits(_product(256, 24, 256), isa="amx")
    assert not bf16_attention.fits(_product(32, 24, 32), isa="amx")  # the size rule on real sizes (32 x 32 x 32 padded)


def test_operands_packed_ahead_with_different_k_are_refused():
    from explorer.passes.bf16_attention import bf16_panels, bf16_rows

    a, bt = te.placeholder((1, 2, 32, 24), "float32", "a"), te.placeholder((1, 2, 32, 24), "float32", "bt")
    ab, bb = bf16_rows(a, k_to=32), bf16_panels(bt, b_rows=True)  # K 32 against 24
    with pytest.raises(ValueError, match="disagree on K"):
        batch_dense_bf16(te.placeholder(ab.shape, "uint16", "pa"), te.placeholder(bb.shape, "uint16", "pb"))


def _rewritten(isa: str) -> str:
    return bf16_products(attention_relax(seq=SEQ, hidden=HIDDEN), isa=isa)[0]["main"].script(show_meta=False)


def test_with_amx_heads_of_24_are_packed_padded_and_p_v_sliced_back():
    text = _rewritten("amx")
    assert text.count("R.call_tir(batch_dense_bf16") == 2 and "R.matmul(lv" not in text  # Q K^T and P V
    assert f'R.Tensor((1, 2, {SEQ}, 32), dtype="uint16")' in text  # Q's rows padded to K = 32
    assert f'R.Tensor((1, 2, {SEQ // 16}, 16, 16, 2), dtype="uint16")' in text  # K's panels: 16 pairs (K = 32)
    assert f'R.Tensor((1, 2, 2, {SEQ // 2}, 16, 2), dtype="uint16")' in text  # V's: N = 32 in two panels
    assert text.count("R.strided_slice(") == 1 and f"(0,), ({HIDDEN // 2},)" in text  # P V's 24 columns of 32


def test_a_folded_power_of_two_scale_multiplies_q_in_its_padded_packing():
    text = bf16_products(attention_relax(scale=0.25, seq=SEQ, hidden=HIDDEN), isa="amx")[0]["main"].script(show_meta=False)
    assert f'R.Tensor((1, 2, {SEQ}, 32), dtype="uint16")' in text and "R.multiply" not in text


def test_without_amx_heads_of_24_are_not_padded_and_p_v_stays_fp32():
    text = _rewritten("avx512bf16")
    assert text.count("R.call_tir(batch_dense_bf16") == 1  # Q K^T (K = 24: 12 pairs)
    assert f'R.Tensor((1, 2, {SEQ // 16}, 12, 16, 2), dtype="uint16")' in text
    assert text.count("R.matmul(lv") == 1 and "R.strided_slice(" not in text  # P V: 24 columns, no whole panel


def _built(spec: str, heads: int, m: int, k: int, n: int):
    a = te.placeholder((1, heads, m, k), "float32", "a")
    b = te.placeholder((1, heads, k, n), "float32", "b")
    y = batch_dense_bf16(a, b, isa="amx")
    func, choice = default_schedule(te.create_prim_func([a, b, y]), parse_target(spec).cpu_spec())
    return tvm.compile(tvm.IRModule({"main": func}), target=parse_target(spec).tvm()), choice, y


@pytest.mark.parametrize("k, n", [(24, 64), (64, 24)])  # Q K^T's K, P V's N
def test_sapphirerapids_runs_padded_head_products_on_amx_tiles(k, n):
    lib, choice, y = _built("cpu:sapphirerapids", 2, SEQ, k, n)
    assert "AMX" in choice.steps[0], choice
    assert "tdpbf16ps" in lib.mod.inspect_source("asm")
    assert [int(v) for v in y.shape] == [1, 2, SEQ, -(-n // 16) * 16]


@pytest.mark.parametrize("spec, isa, shape, tile", [("cpu:sapphirerapids", "amx", (208, 208), "AMX"),
                                                     ("cpu:znver4", "avx512bf16", (200, 224), "8 rows x 2 panels")])
def test_a_vits_197_token_scores_build_padded_per_target(spec, isa, shape, tile):
    """Q K^T of 197 tokens (heads of 32), built for each target (compile only): whole AMX tiles, or
    8-row vdpbf16ps tiles of two panels; the rows and columns beyond 197 are the caller's to slice."""
    a = te.placeholder((1, 3, 197, 32), "float32", "a")
    b = te.placeholder((1, 3, 32, 197), "float32", "b")
    y = batch_dense_bf16(a, b, isa=isa)
    assert tuple(int(v) for v in y.shape[-2:]) == shape
    func, choice = default_schedule(te.create_prim_func([a, b, y]), parse_target(spec).cpu_spec())
    assert tile in choice.steps[0], choice
    asm = tvm.compile(tvm.IRModule({"main": func}), target=parse_target(spec).tvm()).mod.inspect_source("asm")
    assert ("tdpbf16ps" if isa == "amx" else "vdpbf16ps") in asm


def test_operands_packed_ahead_at_another_shape_than_the_product_are_refused():
    from explorer.passes.bf16_attention import bf16_rows

    a, b = te.placeholder((1, 2, 33, 48), "float32", "a"), te.placeholder((1, 2, 48, 64), "float32", "b")
    packed = bf16_rows(a, k_to=48, rows_to=40)
    with pytest.raises(ValueError, match="packed ahead at 40 x 48 x 64"):
        batch_dense_bf16(te.placeholder(packed.shape, "uint16", "pa"), b, to=(48, 48, 64))  # rows 40 vs 48


@NEEDS_AMX
@pytest.mark.parametrize("k, n", [(24, 64), (64, 24), (24, 24)])
def test_padded_head_product_equals_the_unpadded_one_in_bf16(k, n):
    lib, _, y = _built("cpu", 2, SEQ, k, n)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((1, 2, SEQ, k)).astype("float32"), rng.standard_normal((1, 2, k, n)).astype("float32")
    out = tvm.runtime.tensor(np.full([int(v) for v in y.shape], np.nan, "float32"))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
    got = out.numpy()
    exact = bf16_round(a).astype(np.float64) @ bf16_round(b).astype(np.float64)
    assert np.abs(got[..., :n] - exact).max() <= 1e-5 * np.abs(exact).max()  # bf16 products, fp32 sums
    assert not got[..., n:].any()  # the padded columns: zeros times zeros


def _vit_attention_onnx(path) -> None:
    """A ViT block's attention with heads of 24 (SVTR's), written by ``torch.onnx.export``: one
    Q/K/V product, the heads split by reshape and permute, K transposed in the scores' matmul."""
    import torch

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.proj = torch.nn.Linear(HIDDEN, 3 * HIDDEN), torch.nn.Linear(HIDDEN, HIDDEN)

        def forward(self, x):
            q, k, v = self.qkv(x).reshape(1, SEQ, 3, 2, HIDDEN // 2).permute(2, 0, 3, 1, 4).unbind(0)
            p = torch.softmax(q @ k.transpose(-2, -1) * (HIDDEN // 2) ** -0.5, dim=-1)
            return self.proj((p @ v).transpose(1, 2).reshape(1, SEQ, HIDDEN))

    torch.manual_seed(0)
    torch.onnx.export(Attention().eval(), (torch.randn(1, SEQ, HIDDEN),), str(path), dynamo=False, opset_version=17)


@NEEDS_AMX
def test_bf16_attention_with_heads_of_24_verifies_against_onnx_runtime_on_amx_tiles(tmp_path):
    from export.flow import export_workload

    path = tmp_path / "vit_attention.onnx"
    _vit_attention_onnx(path)
    report = export_workload(str(path), "cpu", tmp_path / "bundle", precision="bf16", layers=False)
    assert report.verified, report.verdict
    kernels = [t["name"].split("/")[-1] for t in report.manifest["tasks"]]
    products = [k for k in kernels if "batch_dense_bf16" in k]  # (the 48-wide projections: fp32 by the size rule)
    assert len(products) == 2 and sum("strided_slice" in k for k in products) == 1, kernels  # P V's 24 of 32
