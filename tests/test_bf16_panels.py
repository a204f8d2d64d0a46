"""The default schedule of a bf16 panel packing block fused into the copy that splits attention's
heads (:mod:`explorer.schedule.defaults.bf16_panels`): panels in parallel, by columns in vectors,
by rows scalar; the bits as numpy rounds them. Packing needs no bf16 instructions: any host runs it."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from explorer.passes.bf16_attention import bf16_panels
from explorer.passes.bf16_dense import bf16_bits
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target

TOKENS, HEADS, DIM = 32, 2, 32


@pytest.mark.parametrize("rows", [False, True])  # V as it comes ([K, N]: columns); K for K^T ([N, K]: rows)
def test_heads_split_into_bf16_panels_matches_numpy(rows):
    y = te.placeholder((1, TOKENS, 3 * HEADS * DIM), "float32", "y")
    bias = te.placeholder((HEADS * DIM,), "float32", "bias")
    heads = te.compute((1, HEADS, TOKENS, DIM), lambda b, h, t, d: y[b, t, HEADS * DIM + h * DIM + d] + bias[h * DIM + d],
                       name="T_transpose")
    packed = bf16_panels(heads, b_rows=rows)
    target = parse_target("cpu")
    func, choice = default_schedule(te.create_prim_func([y, bias, packed]), target.cpu_spec())
    assert f"bf16 panels by {'rows' if rows else 'columns'}" in choice.steps[-1], choice
    assert ("T.vectorized" in func.script()) != rows  # columns: 16 columns a vector; rows: scalar
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm())
    rng = np.random.default_rng(3)
    yv, bv = rng.standard_normal((1, TOKENS, 3 * HEADS * DIM)).astype("float32"), rng.standard_normal(HEADS * DIM).astype("float32")
    out = tvm.runtime.tensor(np.zeros([int(v) for v in packed.shape], "uint16"))
    lib["main"](tvm.runtime.tensor(yv), tvm.runtime.tensor(bv), out)
    hv = (yv[0, :, HEADS * DIM:2 * HEADS * DIM] + bv).reshape(TOKENS, HEADS, DIM).transpose(1, 0, 2)  # [h, t, d]
    b = hv.transpose(0, 2, 1) if rows else hv  # the product's b: [h, K, N]
    k, n = b.shape[1:]
    expected = bf16_bits(b).reshape(HEADS, k // 2, 2, n // 16, 16).transpose(0, 3, 1, 4, 2)  # [h, N/16, K/2, 16, 2]
    np.testing.assert_array_equal(out.numpy()[0], expected)
