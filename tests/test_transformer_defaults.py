"""Default schedules of a transformer's memory-bound kernels: attention heads split off and merged
back (reshape + transpose, slices of a ``[3, heads, tokens, dim]`` tensor) run as rows the reads
take contiguously, never as vectors that cross them; layer norm runs row by row in one loop.
Each kernel is built and compared with numpy on small shapes."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import s_tir, te, topi

from explorer.schedule.defaults import CpuSpec, default_schedule
from explorer.schedule.defaults.analysis import block_facts
from explorer.schedule.defaults.row_chain import row_chain
from explorer.schedule.defaults.strides import access_strides, contiguous_run, read_strides
from explorer.ir.tir_walk import walk
from explorer.target import host_target

AVX512 = CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64")
AVX2 = CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64")


def _runnable(cpu: CpuSpec) -> CpuSpec:
    """``cpu`` where this machine runs its vectors, else this machine's own spec."""
    return cpu if cpu.vector_bits <= (host_target().vector_width or 128) else host_target().cpu_spec()


def _run(func, *inputs: np.ndarray, out_shape) -> np.ndarray:
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                      target=host_target().tvm())
    args = [tvm.runtime.tensor(a) for a in inputs]
    out = tvm.runtime.tensor(np.full(out_shape, np.nan, dtype="float32"))
    lib["main"](*args, out)
    return out.numpy()


def _split_heads(tokens: int = 16, heads: int = 2, dim: int = 20):
    """``[tokens, 3 * heads * dim] -> [3, heads, tokens, dim]`` as the ONNX importer writes it
    (an inlined reshape: the row index carries ``// (3 * heads * dim)``)."""
    width = 3 * heads * dim
    x = te.placeholder((1, tokens, width), name="x")
    y = te.compute((3, 1, heads, tokens, dim),
                   lambda q, b, h, t, d: x[0, ((q * heads * dim + h * dim + d) // width + t) % tokens,
                                            (q * heads * dim + h * dim + d) % width], name="T_transpose")
    return te.create_prim_func([x, y])


def _slice_of_heads(heads: int = 2, tokens: int = 16, dim: int = 20):
    """The third of ``[3, 1, heads, tokens, dim]`` (values of attention), times a scalar."""
    x = te.placeholder((3, 1, heads, tokens, dim), name="x")
    y = te.compute((1, heads, tokens, dim), lambda b, h, t, d: x[2, b, h, t, d] * 0.5, name="T_slice")
    return te.create_prim_func([x, y])


def _layer_norm(rows: int, width: int):
    x = te.placeholder((1, rows, width), name="x")
    gamma = te.placeholder((width,), name="gamma")
    beta = te.placeholder((width,), name="beta")
    y = topi.nn.layer_norm(x, gamma, beta, axis=[2], epsilon=1e-5)
    return te.create_prim_func([x, gamma, beta, y])


def test_strides_read_through_an_inlined_reshape():
    """The row index ``(q * 40 + h * 20 + d) // 120 + t`` is ``t`` within the iterators' domains:
    the strides show rows of 20 read 120 apart, so the contiguous run is one row."""
    sch = s_tir.Schedule(_split_heads())
    block = sch.get_sblock("T_transpose")
    written, read = access_strides(sch, block)
    assert written == (2 * 16 * 20, 0, 16 * 20, 20, 1)
    assert read == (40, 0, 20, 120, 1)
    assert contiguous_run(sch, block, block_facts(sch, block)) == 20


def _sine_into_rows(rows: int = 64):
    """A NeRF's encoding: sine of ``[rows, 3, 10]`` reshaped to ``[rows, 30]``, the reshape reading at
    ``(i, j // 10, j % 10)``: no dimension's index is linear, the flat offset ``30 i + j`` is."""
    x = te.placeholder((rows, 3, 10), name="x")
    s = te.compute(x.shape, lambda *i: te.sin(x(*i)), name="sin")
    y = topi.reshape(s, (rows, 30))
    return te.create_prim_func([x, y])


def test_a_reshape_into_rows_reads_contiguously_and_vectorizes_over_its_fused_loops():
    """Read per dimension, the reshape looked like a channel shuffle's ``c // d``: rows of 30 in steps
    of 10, not vectorized (NeRF's sine kernel: 546 us against 24-32 over the fused loops)."""
    sch = s_tir.Schedule(_sine_into_rows())
    sch.compute_inline(sch.get_sblock("sin"))
    block = sch.get_sblock("T_reshape")
    assert read_strides(sch, block) == [(30, 1)]
    for cpu in (AVX2, AVX512):
        _, choice = default_schedule(_sine_into_rows(), cpu)
        assert choice.steps == (f"parallel x{cpu.vector_bits // 32} (T_reshape)",), choice
    func, _ = default_schedule(_sine_into_rows(), _runnable(AVX512))
    x = np.random.default_rng(0).standard_normal((64, 3, 10)).astype("float32")
    np.testing.assert_allclose(_run(func, x, out_shape=(64, 30)), np.sin(x).reshape(64, 30), rtol=1e-6, atol=1e-6)


def test_a_plain_slice_is_contiguous_over_all_its_loops():
    sch = s_tir.Schedule(_slice_of_heads())
    block = sch.get_sblock("T_slice")
    assert contiguous_run(sch, block, block_facts(sch, block)) is None


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_heads_split_off_a_matrix_run_as_rows_and_compute_right(cpu):
    """Vectors over the fused loops crossed the rows of 24 and gathered lane by lane (SVTR's
    ``[256, 288] -> [3, 4, 256, 24]``: 94 us, as rows 7.6 us)."""
    cpu = _runnable(cpu)
    func, choice = default_schedule(_split_heads(), cpu)
    assert choice.rule == "full" and choice.steps == ("rows of 20 (T_transpose)",), choice
    x = np.random.default_rng(0).standard_normal((1, 16, 120)).astype("float32")
    want = x[0].reshape(16, 3, 2, 20).transpose(1, 2, 0, 3)[:, None]
    np.testing.assert_array_equal(_run(func, x, out_shape=want.shape), want)


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_a_slice_whose_rows_no_vector_divides_vectorizes_two_axes_and_computes_right(cpu):
    """Over three or more axes with rows no vector divides (24 of 16 lanes), the fused loop's indices were taken apart lane by
    lane (TVM folds one level of ``x // 24 * 24 + x % 24``, not two: 28 us against 1.7 for
    ``[4, 256, 24]``); the two innermost axes are the vectorized loop (rows of 20 here: a
    multiple of neither 8 nor 16 lanes)."""
    cpu = _runnable(cpu)
    func, choice = default_schedule(_slice_of_heads(), cpu)
    lanes = cpu.lanes("float32")
    assert choice.steps == (f"rows of {16 * 20} x{lanes} (T_slice)",), choice
    sch = s_tir.Schedule(func)
    loops = sch.get_loops(sch.get_sblock("T_slice"))
    innermost = sch.get(loops[-1])
    assert int(innermost.extent) == lanes and innermost.kind == tvm.tirx.ForKind.VECTORIZED
    x = np.random.default_rng(1).standard_normal((3, 1, 2, 16, 20)).astype("float32")
    np.testing.assert_array_equal(_run(func, x, out_shape=(1, 2, 16, 20)), x[2] * np.float32(0.5))


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_layer_norm_runs_row_by_row_in_one_loop_and_computes_right(cpu):
    cpu = _runnable(cpu)
    func, choice = default_schedule(_layer_norm(128, 256), cpu)
    assert choice.rule == "full", choice
    assert choice.steps[-1].startswith("parallel rows of 256, one loop"), choice.steps
    assert all(step.startswith("row by row") for step in choice.steps[:-1]), choice.steps
    sch = s_tir.Schedule(func)
    outer = sch.get(sch.get_loops(sch.get_sblock("T_layer_norm"))[0])
    assert outer.kind == tvm.tirx.ForKind.PARALLEL and int(outer.extent) == 128
    rng = np.random.default_rng(2)
    x, gamma, beta = (rng.standard_normal(s).astype("float32") for s in ((1, 128, 256), (256,), (256,)))
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    want = (x - mean) / np.sqrt(var + 1e-5) * gamma + beta
    np.testing.assert_allclose(_run(func, x, gamma, beta, out_shape=want.shape), want, rtol=1e-4, atol=1e-4)


def test_short_rows_stay_block_by_block():
    """Rows of fewer than MIN_VECTORS vectors (one, here) have no vectors to reduce: no row chain."""
    assert row_chain(s_tir.Schedule(_layer_norm(16, 16)), AVX512) is None
    assert row_chain(s_tir.Schedule(_layer_norm(16, 32)), AVX512) is not None


def _fast_softmax(shape):
    """Softmax as the pipeline writes it (FastMathTransform: ``topi.nn.fast_softmax``)."""
    x = te.placeholder(shape, name="x")
    return te.create_prim_func([x, topi.nn.fast_softmax(x, axis=-1)])


def _exported_softmax(shape):
    """Softmax as exporters that spell it out write it: exp of the difference from the row's max,
    its sum kept as a dimension of 1, a broadcast divide."""
    x = te.placeholder(shape, name="x")
    e = topi.fast_exp(x - topi.max(x, axis=-1, keepdims=True))
    return te.create_prim_func([x, topi.divide(e, topi.sum(e, axis=-1, keepdims=True))])


def _scopes(func) -> set[str]:
    return {buf.scope() for node in walk(func.body) if isinstance(node, s_tir.SBlock) for buf in node.alloc_buffers}


@pytest.mark.parametrize("make", [_fast_softmax, _exported_softmax], ids=["softmax", "exp-sum-divide"])
@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_softmax_runs_row_by_row_in_one_loop_and_computes_right(cpu, make):
    """Softmax over the last axis: max, exponentials, sum and quotients of a row in one parallel
    loop, the row's exponentials vectorized where the sum and the quotients read them (BERT's
    12 x 128 x 128 block by block 197 us, row by row 180; 4 x 256 x 256 166 -> 138; rows of 4096
    0.64x; busy machine, alternated)."""
    cpu = _runnable(cpu)
    shape = (2, 24, 128)
    func, choice = default_schedule(make(shape), cpu)
    assert choice.rule == "full" and "rows of 128, one loop" in choice.steps[-1], choice
    assert any("vectorized" in step for step in choice.steps), choice.steps
    x = np.random.default_rng(3).standard_normal(shape).astype("float32") * 4
    e = np.exp(x - x.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(_run(func, x, out_shape=shape), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [_layer_norm, lambda rows, width: _fast_softmax((rows, width))],
                         ids=["layer-norm", "softmax"])
def test_row_partial_results_stay_off_the_workspace(make):
    """A vector of partial results under the row loop in "local" scope was taken from the
    runtime's workspace pool (an allocate and a free call) every row: BERT's softmax block by
    block 1.6-1.8x slower than with the vector on the stack, where LLVM keeps it in a register."""
    for rows, width in ((64, 128), (64, 40)):  # a row chain, and rows block by block (40: too short)
        func, choice = default_schedule(make(rows, width), AVX512)
        assert choice.rule == "full", choice
        assert "local" not in _scopes(func), (choice.steps, func.script())
