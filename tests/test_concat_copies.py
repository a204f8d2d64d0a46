"""ConcatAsCopies: a concatenation (of an unrolled recurrent layer's steps, of a CNN's branches)
becomes one kernel with a copy block per input, computing the same tensor on every axis."""

import numpy as np
import pytest
import tvm
from tvm import relax

from explorer.passes.concat_copies import ConcatAsCopies


def _concat_module(shapes, axis):
    xs = [relax.Var(f"x{i}", relax.TensorType(shape, "float32")) for i, shape in enumerate(shapes)]
    bb = relax.BlockBuilder()
    with bb.function("main", xs):
        out = bb.emit(relax.op.concat(xs, axis=axis))
        bb.emit_func_output(out)
    return bb.get()


def _concats(mod) -> int:
    found = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: found.append(e) if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.concat" else None)
    return len(found)


def _run(mod, xs):
    ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*(tvm.runtime.tensor(x) for x in xs)).numpy()


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_a_concat_becomes_copies_with_the_same_values(axis):
    rng = np.random.default_rng(0)
    shapes = []
    for i in range(13):
        shape = [2, 3, 4]
        shape[axis] = 1 + i % 3  # inputs of different widths along the axis
        shapes.append(tuple(shape))
    mod = _concat_module(shapes, axis)
    out = ConcatAsCopies(mod)
    assert _concats(mod) == 1 and _concats(out) == 0
    copies = [f for _, f in out.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(copies) == 1
    xs = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_array_equal(_run(out, xs), np.concatenate(xs, axis=axis))


def test_a_single_tensor_or_symbolic_concat_is_left_alone():
    single = _concat_module([(1, 4)], 0)
    assert ConcatAsCopies(single).same_as(single)
    n = tvm.tirx.Var("n", "int64")
    symbolic = _concat_module([(n, 4)] * 3, 0)
    assert ConcatAsCopies(symbolic).same_as(symbolic)


@pytest.mark.parametrize("spec, cpu, register", [("cpu:x86-64-v3", "AVX2", "ymm"), ("cpu:skylake-avx512", "AVX512", "zmm")])
def test_the_copies_run_as_whole_vector_rows_of_each_input_with_no_gathers(spec, cpu, register):
    """Channels-last inputs of 64, 32 and 48 channels concatenated: each copy writes rows of its own
    channels into a wider row of the output, so its default schedule vectorizes along its channels
    only (fused with the pixels, a vector would straddle two output rows: a gather and a scatter)."""
    from explorer.schedule.defaults import default_schedule
    from explorer.schedule.defaults.machine import CpuSpec
    from explorer.target import parse_target

    spec_of = {"AVX2": CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64"),
               "AVX512": CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64")}[cpu]
    shapes = [(1, 28, 28, 64), (1, 28, 28, 32), (1, 28, 28, 48)] * 3
    mod = ConcatAsCopies(_concat_module(shapes, -1))
    (gv, func), = [(gv, f) for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled, choice = default_schedule(func, spec_of)
    assert choice.rule == "full", choice
    lanes = spec_of.lanes("float32")
    # 28x28 pixels of 32 channels are too few elements for a parallel region (PARALLEL_MIN_VOLUME)
    assert [s.split(" (")[0] for s in choice.steps[:3]] == [
        f"parallel rows of 64 x{lanes}", f"rows of 32 x{lanes}", f"parallel rows of 48 x{lanes}"], choice.steps
    asm = tvm.tirx.build(tvm.IRModule({"main": scheduled}), target=parse_target(spec).tvm()).inspect_source("asm")
    assert register in asm and "gather" not in asm and "scatter" not in asm
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(s).astype("float32") for s in shapes]
    out = np.empty((1, 28, 28, sum(s[-1] for s in shapes)), "float32")
    if spec_of.vector_bits <= (parse_target("cpu").vector_width or 0):
        lib = tvm.tirx.build(tvm.IRModule({"main": scheduled}), target=parse_target("cpu").tvm())
        args = [tvm.runtime.tensor(x) for x in xs] + [tvm.runtime.tensor(out)]
        lib(*args)
        np.testing.assert_array_equal(args[-1].numpy(), np.concatenate(xs, axis=-1))


def test_a_channel_slice_of_one_nchw_image_still_runs_in_parallel():
    """``x[:, 58:]`` of a 1x116x28x28 map (ShuffleNet's channel split): the slice covers part of the
    channel axis, so its rows are the 58x28x28 block under it, and with one image above that block the
    parallel loop must come from the row's own vectors, not from the batch of 1."""
    from tvm import s_tir

    from explorer.schedule.defaults import default_schedule
    from explorer.schedule.defaults.machine import CpuSpec

    x = relax.Var("x", relax.TensorType((1, 116, 28, 28), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        out = bb.emit(relax.op.strided_slice(x, axes=[1], begin=[58], end=[116]))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    cpu = CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64")
    scheduled, choice = default_schedule(func, cpu)
    assert choice.steps[0].startswith("parallel rows of 45472 x16"), choice
    sch = s_tir.Schedule(scheduled)
    loops = sch.get_loops(sch.get_sblock("T_strided_slice_with_axes"))
    assert sch.get(loops[0]).kind == tvm.tirx.ForKind.PARALLEL and int(sch.get(loops[0]).extent) > 1
    assert sch.get(loops[-1]).kind == tvm.tirx.ForKind.VECTORIZED
