"""Schedule sessions: steps applied through TVM, undo/redo, failures that change nothing,
steps files, and the round trip through MetaSchedule traces."""

from __future__ import annotations

import json

import pytest
import tvm
import tvm_ffi

from explorer.kernels import builtin_kernel
from explorer.measure import check
from explorer.schedule.index_map import parse_index_map
from explorer.schedule.session import ScheduleSession
from explorer.schedule.steps import ScheduleError, Step, StepsFileError, load_steps, steps_from_json
from explorer.schedule.trace import steps_to_trace, to_plain, trace_to_steps
from explorer.schedule.views import changed_lines, loop_nest, main_block, nest_text, tiling


def S(primitive: str, **args) -> Step:
    return Step(primitive, args)


TILED = [S("split", loop="C/i", factors=[None, 8]), S("split", loop="C/j", factors=[None, 16]),
         S("reorder", loops=["C/i_0", "C/j_0", "C/i_1", "C/k", "C/j_1"]),
         S("cache_write", block="C", buffer_index=0, scope="global"),
         S("reverse_compute_at", block="C_global", loop="C/j_0"),
         S("parallel", loop="C/i_0"), S("vectorize", loop="C/j_1"), S("unroll", loop="C/i_1"),
         S("decompose_reduction", block="C", loop="C/k")]


@pytest.fixture
def matmul():
    return builtin_kernel("matmul", M=64, N=64, K=32)


def test_steps_apply_and_the_kernel_still_verifies(matmul):
    s = ScheduleSession(matmul.func)
    s.apply_all(TILED)
    assert s.cursor == len(TILED)
    text = nest_text(loop_nest(s.mod["main"]))
    assert "for i_0 in parallel(8)" in text and "vectorized(16)" in text and "unrolled(8)" in text
    ok, why = check(matmul, s.mod)
    assert ok, why


def test_undo_redo_jump_reset(matmul):
    s = ScheduleSession(matmul.func)
    s.apply_all(TILED[:3])
    after3 = s.mod
    assert s.undo() and s.cursor == 2 and s.redo() and s.mod.same_as(after3)
    s.jump(0)
    assert tvm_ffi.structural_equal(s.mod["main"], matmul.func.with_attr("global_symbol", "main")) or s.cursor == 0
    s.jump(3)
    assert s.mod.same_as(after3)
    s.undo()
    s.apply(S("parallel", loop="C/i_0"))  # a new step drops the redoable one
    assert [st.primitive for st in s.history] == ["split", "split", "parallel"]
    assert not s.redo()
    s.reset()
    assert s.cursor == 0 and s.history == []
    with pytest.raises(ScheduleError):
        s.jump(5)


@pytest.mark.parametrize("bad, words", [
    (S("split", loop="C/nope", factors=[None, 4]), "has no loop 'nope'"),
    (S("parallel", loop="D/i"), "no block named 'D'"),
    (S("vectorize", loop="C/k"), "vectorize"),
    (S("reorder", loops=["C/i", "C_global/ax0"]), "reorder"),
    (S("compute_at", block="C_global", loop="C/k"), "compute_at"),
])
def test_invalid_step_raises_and_leaves_the_session_unchanged(matmul, bad, words):
    s = ScheduleSession(matmul.func)
    s.apply(S("cache_write", block="C", buffer_index=0, scope="global"))
    before_mod, before_hist = s.mod, s.history
    with pytest.raises(ScheduleError, match=words) as info:
        s.apply(bad)
    assert s.mod.same_as(before_mod) and s.history == before_hist and s.cursor == 1
    assert "\n" not in str(info.value)  # one readable line; TVM's IR dump is kept apart
    if info.value.tvm_message:
        assert "ScheduleError" in info.value.tvm_message or "Error" in info.value.tvm_message


def test_steps_file_validation_names_the_bad_step(tmp_path):
    good = [{"primitive": "split", "args": {"loop": "C/i", "factors": [None, 8]}}]
    assert steps_from_json(good) == [S("split", loop="C/i", factors=[None, 8])]
    cases = [
        (good + [{"primitive": "teleport", "args": {}}], 1, "unknown primitive 'teleport'"),
        (good + [{"primitive": "split", "args": {"loop": "C/i", "factors": "8"}}], 1, "factors"),
        ([{"primitive": "parallel", "args": {"loop": 3}}], 0, "loop reference"),
        ([{"primitive": "unroll", "args": {}}], 0, "needs argument 'loop'"),
        ([{"primitive": "fuse", "args": {"loops": ["C/i"], "extra": 1}}], 0, "no argument extra"),
        ([{"primitive": "bind", "args": {"loop": "C/i", "thread": "warp.x"}}], 0, "one of the allowed"),
        (["split"], 0, "object"),
    ]
    for data, index, words in cases:
        with pytest.raises(StepsFileError, match=words) as info:
            steps_from_json(data)
        assert info.value.index == index
    bad_json = tmp_path / "s.json"
    bad_json.write_text("[{")
    with pytest.raises(StepsFileError, match="not valid JSON"):
        load_steps(bad_json)


def test_steps_trace_steps_round_trip_is_structurally_equal(matmul):
    trace = steps_to_trace(matmul.func, TILED)
    json.dumps(trace)  # plain JSON
    back = trace_to_steps(matmul.func, trace)
    a, b = ScheduleSession(matmul.func), ScheduleSession(matmul.func)
    a.apply_all(TILED)
    b.apply_all(back)
    assert tvm_ffi.structural_equal(a.mod, b.mod)
    assert [s.primitive for s in back] == [s.primitive for s in TILED]


def test_a_metaschedule_sketch_opens_as_steps():
    from tvm.s_tir import meta_schedule as ms

    from explorer.tvm_fast import light_tensor_intrin

    light_tensor_intrin()  # else TuneContext imports every intrinsic TVM ships (20-130 s)
    k = builtin_kernel("matmul", M=64, N=64, K=64)
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    ctx = ms.TuneContext(mod=tvm.IRModule({"main": k.func}), target=target, space_generator="post-order-apply",
                         search_strategy="evolutionary", num_threads=1)
    space = ctx.generate_design_space()[0]
    trace_json = to_plain(space.trace.as_json())
    steps = trace_to_steps(k.func, trace_json)
    assert any(s.primitive == "split" for s in steps)
    s = ScheduleSession(k.func)
    s.apply_all(steps)
    assert tvm_ffi.structural_equal(s.mod, space.mod)


def test_views(matmul):
    s = ScheduleSession(matmul.func)
    s.apply_all(TILED[:2])
    axes = {a.axis: a for a in tiling(s.mod["main"], "C")}
    assert axes["v_i"].loops == (("i_0", 8, "serial"), ("i_1", 8, "serial"))
    assert axes["v_k"].iter_type == "R"
    assert main_block(s.mod["main"]) == "C"
    before, after = s.schedule_at(1).mod.script(), s.mod.script()
    marks = changed_lines(before, after)
    assert marks and any("j_1" in after.splitlines()[m - 1] for m in marks)


def test_transform_layout_with_a_parsed_index_map():
    k = builtin_kernel("matmul", M=32, N=32, K=32)
    s = ScheduleSession(k.func)
    s.apply(S("cache_read", block="C", buffer_index=1, scope="global"))
    s.apply(S("transform_layout", block="B_global", buffer="write:0", index_map="lambda k, j: (j // 16, k, j % 16)"))
    assert "B_global" in s.mod.script()
    ok, why = check(k, s.mod)
    assert ok, why


@pytest.mark.parametrize("text", ["lambda i: __import__('os')", "lambda i: (i.real,)", "import os", "lambda i: i ** 2"])
def test_index_maps_are_parsed_never_evaluated(text):
    with pytest.raises(ScheduleError):
        parse_index_map(text)


def test_nested_parallel_is_refused_before_it_breaks_the_build(matmul):
    s = ScheduleSession(matmul.func)
    s.apply(S("parallel", loop="C/i"))
    with pytest.raises(ScheduleError, match="fuse the loops"):
        s.apply(S("parallel", loop="C/j"))
    assert s.cursor == 1


def _host_has(*features: str) -> bool:
    from explorer.target import host_target

    return all(f in host_target().features for f in features)


@pytest.mark.skipif(not _host_has("avx512bw"), reason="the dot_16x4_avx512 intrinsic needs AVX-512 (BW)")
def test_int8_matmul_tensorized_with_the_x86_intrinsic_verifies():
    from explorer.schedule.steps import load_steps

    k = builtin_kernel("matmul_int8", M=32, N=32, K=32)
    s = ScheduleSession(k.func)
    s.apply_all(load_steps("assets/steps/matmul_int8_avx512.json"))
    assert "dot_16x4" in s.mod.script() or "vpmadd" in s.mod.script() or "T.call_llvm_pure_intrin" in s.mod.script()
    ok, why = check(k, s.mod)
    assert ok, why


def test_nested_vectorize_is_refused():
    k = builtin_kernel("conv2d_nchw", C=4, H=6, W=6, K=8)
    s = ScheduleSession(k.func)
    s.apply(S("vectorize", loop="pad_temp/i1"))
    with pytest.raises(ScheduleError, match="vectorize only the innermost"):
        s.apply(S("vectorize", loop="pad_temp/i2"))


def test_sketches_with_sampled_compute_locations_convert_to_equal_steps():
    """RandomComputeLocation samples 'root' or 'inline' as sentinel loops that TVM crashes on if
    looked up; the conversion must read them from the decision instead (found tuning small_cnn)."""
    from tvm.s_tir import meta_schedule as ms

    from explorer.target import parse_target
    from explorer.tvm_fast import light_tensor_intrin
    from explorer.workload import load_workload, tag_task

    light_tensor_intrin()
    target = parse_target('{"kind": "llvm", "num-cores": 2}')
    task = next(t for t in load_workload("small_cnn").tasks() if t.name.endswith("/mean"))
    ctx = ms.TuneContext(mod=tag_task(task.mod, task.key), target=target.tvm(), space_generator="post-order-apply",
                         search_strategy="evolutionary", num_threads=1)
    for space in ctx.generate_design_space():
        steps = trace_to_steps(task.mod["main"], to_plain(space.trace.as_json()))
        s = ScheduleSession(task.mod["main"])
        s.apply_all(steps)
        assert tvm_ffi.structural_equal(s.mod["main"].body, space.mod["main"].body)


def test_vectorizing_around_two_blocks_is_refused():
    """Found by the slow random-step run: TVM builds this and computes wrong numbers."""
    k = builtin_kernel("conv2d_nchw", C=4, H=6, W=6, K=8)
    s = ScheduleSession(k.func)
    s.apply(S("compute_at", block="pad_temp", loop="conv2d_nchw/xx", preserve_unit_loops=False))
    with pytest.raises(ScheduleError, match="wrong results"):
        s.apply(S("vectorize", loop="conv2d_nchw/yy"))


def test_errors_name_the_loops_and_blocks_the_user_picked():
    k = builtin_kernel("matmul", M=64, N=64, K=64)
    s = ScheduleSession(k.func)
    s.apply(S("reorder", loops=["C/k", "C/i"]))
    with pytest.raises(ScheduleError) as info:
        s.apply(S("fuse", loops=["C/i", "C/k"]))
    assert "outer loop C/i is not the parent of the inner loop C/k" in str(info.value)
    with pytest.raises(ScheduleError) as info:
        s.apply(S("parallel", loop="C/k"))
    assert "tirx.For#" not in str(info.value) and "SBlock#" not in str(info.value) and "'C'" in str(info.value)


def test_a_block_tvm_names_by_its_handle_is_named_as_steps_name_it_when_its_name_is_shared():
    from explorer.schedule.session import _named

    dump = "\n".join(['with T.sblock("B"):', "    B[i] = A[i]", "# s_tir.SBlock#0", 'with T.sblock("B"):',
                      "^^^^^^^^^^^^^^^^^^", "    B[i] = B[i] * 2", "# s_tir.SBlock#1", 'with T.sblock("C"):'])
    said = _named("The block s_tir.SBlock#0 is not a complete block; see s_tir.SBlock#1", dump, None)
    assert said == "The block 'B#1' is not a complete block; see 'C'"


def test_a_split_that_adds_a_predicate_says_so():
    k = builtin_kernel("matmul", M=64, N=64, K=64)
    s = ScheduleSession(k.func)
    s.apply(S("split", loop="C/j", factors=[None, 7]))
    assert "do not divide" in s.last_note and "T.where" in s.last_note
    s.apply(S("split", loop="C/i", factors=[None, 8]))
    assert s.last_note == ""


def test_a_local_buffer_allocated_inside_a_loop_says_it_costs_a_workspace_call_per_iteration():
    """On a CPU TVM allocates a "local" buffer from the runtime's workspace pool every time the loop
    around it runs (MobileNetV2's 1x1 conv: 2.7x slower than the same tile in "global" scope): the
    step that moves it into a loop says so, and the kernel still verifies; "global" gets no note."""
    k = builtin_kernel("matmul", M=64, N=64, K=32)
    for scope, noted in (("local", True), ("global", False)):
        s = ScheduleSession(k.func)
        steps = [Step(st.primitive, {**st.args, "scope": scope}) if st.primitive == "cache_write" else st
                 for st in TILED]
        steps = [Step(st.primitive, {**st.args, "block": f"C_{scope}"}) if st.primitive == "reverse_compute_at"
                 else st for st in steps]
        notes = []
        for step in steps:
            s.apply(step)
            notes.append(s.last_note)
        at = [i for i, n in enumerate(notes) if "workspace" in n]
        if noted:
            assert at == [4], notes
            assert "C_local (\"local\") is allocated inside a loop" in notes[4] and "\"global\"" in notes[4]
        else:
            assert at == [], notes
        verified, why = check(k, s.mod)
        assert verified, why


def test_a_note_that_cannot_be_worked_out_never_fails_a_step(monkeypatch):
    from explorer.schedule import step_notes

    def refuse(func):
        raise RuntimeError("TVM refused the analysis")

    monkeypatch.setattr(step_notes, "buffers_allocated_in_loops", refuse)
    s = ScheduleSession(builtin_kernel("matmul", M=64, N=64, K=32).func)
    s.apply(S("split", loop="C/j", factors=[None, 7]))
    assert s.cursor == 1 and "do not divide" in s.last_note


def test_code_views_show_the_vector_instructions_a_step_makes():
    from explorer.schedule.codegen import asm_stats, code_views
    from explorer.target import host_target, parse_target

    k = builtin_kernel("matmul", M=64, N=64, K=64)
    s = ScheduleSession(k.func)
    s.apply(S("reorder", loops=["C/i", "C/k", "C/j"]))
    s.apply(S("split", loop="C/j", factors=[None, 16]))
    s.apply(S("vectorize", loop="C/j_1"))
    views = code_views(s.mod, host_target())
    assert "main_compute_" in views.asm and "define" in views.llvm_ir and "for" in views.lowered_tir
    assert sum(views.stats.fma.values()) > 0
    width = host_target().vector_width
    assert max(views.stats.vector) == width  # the widest registers the target has, no wider
    arm = code_views(s.mod, parse_target("aarch64:cortex-a76"))  # built, never run: any target works
    assert max(arm.stats.vector) == 128 and sum(arm.stats.fma.values()) > 0
    stats = asm_stats("\tvfmadd231ps\t%zmm1, %zmm2, %zmm3\n\tvaddps\t%ymm1, %ymm2, %ymm3\n.L1:\n\tret\n")
    assert stats.instructions == 3 and stats.vector == {512: 1, 256: 1} and stats.fma == {512: 1}
