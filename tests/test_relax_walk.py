"""Walking a Relax function: how often each variable is read."""

from __future__ import annotations

from tvm import relax

from explorer.ir.relax_walk import use_counts


def test_use_counts_count_every_read_even_two_in_one_call():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.multiply(x, x))
            z = bb.emit(relax.op.add(y, x))
            out = bb.emit_output(relax.op.add(z, z))
        bb.emit_func_output(out)
    counts = use_counts(bb.get()["main"])
    assert (counts[x], counts[y], counts[z], counts[out]) == (3, 1, 2, 1)  # out: the function's result
