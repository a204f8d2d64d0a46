"""SplitWideConcat: a concatenation of many tensors (an unrolled recurrent layer's 100 steps)
becomes a tree of concatenations of at most FAN_IN, computing the same tensor."""

import numpy as np
import tvm
from tvm import relax

from explorer.passes.wide_concat import FAN_IN, SplitWideConcat


def _concat_module(n):
    xs = [relax.Var(f"x{i}", relax.TensorType((1, 4), "float32")) for i in range(n)]
    bb = relax.BlockBuilder()
    with bb.function("main", xs):
        out = bb.emit(relax.op.concat(xs, axis=0))
        bb.emit_func_output(out)
    return bb.get()


def _widest(mod) -> int:
    widths = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.concat":
            widths.append(len(expr.args[0].fields))
    relax.analysis.post_order_visit(mod["main"], visit)
    return max(widths)


def test_a_wide_concat_becomes_a_tree_of_narrow_ones_with_the_same_values():
    mod = _concat_module(100)
    out = SplitWideConcat(mod)
    assert _widest(mod) == 100 and _widest(out) <= FAN_IN
    xs = [np.full((1, 4), i, "float32") for i in range(100)]
    results = []
    for m in (mod, out):
        ex = tvm.compile(m, target="llvm")
        vm = relax.VirtualMachine(ex, tvm.cpu())
        results.append(vm["main"](*(tvm.runtime.tensor(x) for x in xs)).numpy())
    np.testing.assert_array_equal(results[0], results[1])
    assert results[1][:, 0].tolist() == list(range(100))


def test_a_narrow_concat_is_left_alone():
    mod = _concat_module(FAN_IN)
    assert SplitWideConcat(mod).same_as(mod)
