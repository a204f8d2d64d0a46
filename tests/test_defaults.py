"""Default CPU schedules: every zoo model's tasks verified against their unscheduled kernels, far
faster than the loop nest on the hottest ones, sized from the target's vector unit, never an
error (a rule that does not fit falls back), fast to apply, and records still win in an export.

Kernels are built and run in a child process (tests/defaults_check.py): a native crash fails
one test. The speed check (defaults against the loop nest, medians of alternated runs) is marked
slow: no test in the default suite asserts a time.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm

from explorer.schedule.defaults import (
    CpuSpec,
    apply_default_schedules,
    default_schedule,
)
from explorer.schedule.defaults import apply as defaults_apply
from explorer.schedule.defaults.apply import RULE_ATTR, SCHEDULED_ATTR
from explorer.schedule.defaults.variant import DefaultVariant
from explorer.target import host_target, parse_target
from explorer.ir.tir_walk import blocks
from explorer.workload import load_workload

ROOT = Path(__file__).resolve().parent.parent
SLOW_MODELS = [pytest.param(m, marks=pytest.mark.slow) for m in ("resnet18", "mobilenet_v2", "bert_encoder")]
AVX512 = CpuSpec(vector_bits=512, registers=32, cores=2, arch="x86_64")
AVX2 = CpuSpec(vector_bits=256, registers=16, cores=2, arch="x86_64")


def _child(*args: str, timeout: float = 600) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "tests.defaults_check", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _cpu(target) -> CpuSpec:
    return target.cpu_spec()


@pytest.mark.parametrize("spec, bits, registers", [("cpu:skylake-avx512", 512, 32), ("cpu:x86-64-v3", 256, 16),
                                                   ("aarch64:cortex-a76", 128, 32)])
def test_the_cpu_spec_comes_from_the_targets_features(spec, bits, registers):
    target = parse_target(spec)
    cpu = _cpu(target)
    assert (cpu.vector_bits, cpu.registers) == (bits, registers)
    assert cpu.lanes("float32") == bits // 32 and cpu.lanes("float16") == bits // 16


@pytest.mark.parametrize("model", ["small_cnn", "conv2d_nchw", "depthwise_conv2d", *SLOW_MODELS])
def test_every_task_matches_its_unscheduled_kernel(model):
    rows = _child("verify", model)
    assert rows and all(r["verified"] for r in rows), [r for r in rows if not r["verified"]]
    assert all(r["rule"] == "full" for r in rows), [(r["task"], r["rule"]) for r in rows if r["rule"] != "full"]
    assert any("register tile" in s for r in rows for s in r["steps"])  # the convs / matmuls are tiled


def test_defaults_for_a_narrower_vector_unit_compute_right():
    """Built for this machine without AVX-512 (AVX2 vectors, 16 registers): other tiles, same results."""
    target = parse_target("cpu:-avx512f")
    if not target.runs_here or target.vector_width != 256:
        pytest.skip("this machine has no AVX2 target to play")
    rows = _child("verify", "small_cnn", "cpu:-avx512f")
    assert rows and all(r["verified"] for r in rows)
    func = load_workload("small_cnn").tasks()[0].mod["main"]
    wide, narrow = default_schedule(func, AVX512)[1], default_schedule(func, AVX2)[1]
    assert wide.steps[0] != narrow.steps[0]  # the register tile follows the vector unit


@pytest.mark.slow  # a speed bound (timed runs on a shared machine): make test-slow; bench_models measures it
@pytest.mark.parametrize("model", ["small_cnn", "conv2d_nchw", *SLOW_MODELS])
def test_defaults_are_far_faster_than_the_loop_nest_on_the_hottest_tasks(model):
    """The three hottest tasks together (a kernel: itself): measured 20-100x (a 1x1 conv with 24
    input channels alone only 1.3-2x, and small_cnn's 3-channel first conv about even on AVX2:
    LLVM vectorizes those loop nests by itself; the NCHW conv kernel 38x); 4x together and none
    clearly slower leave room for a busy machine."""
    rows = _child("speed", model, "3")
    assert len(rows) == min(3, len(load_workload(model).tasks()))
    assert sum(r["naive_s"] for r in rows) >= 4 * sum(r["default_s"] for r in rows), rows
    # none clearly slower, among kernels long enough to time on a shared machine (a 60 us one is noise)
    assert all(r["naive_s"] >= 0.8 * r["default_s"] for r in rows if r["naive_s"] >= 2e-4), rows


def test_any_kernel_gets_a_schedule_that_computes_right():
    """Kernels the rules were not written for (scalar reduction, gather, fp16, int8, cumsum):
    a rule that does not fit falls back; whatever each gets matches the unscheduled kernel."""
    rows = _child("odd")
    assert len(rows) == 10
    assert all(r["verified"] and r["rule"] in ("full", "safe", "none") for r in rows), rows


def test_a_rule_that_fails_falls_back_to_a_simpler_one(monkeypatch):
    func = load_workload("small_cnn").tasks()[0].mod["main"]

    def broken(func, cpu, variant=None):
        raise tvm.s_tir.ScheduleError("a rule that does not fit")

    monkeypatch.setattr(defaults_apply, "tiled", broken)  # every row of the full rule
    scheduled, choice = default_schedule(func, AVX512)
    assert choice.rule == "safe" and "a rule that does not fit" in choice.fallback_reason
    assert "parallel" in scheduled.script()
    monkeypatch.setattr(defaults_apply, "RULES", (("full", DefaultVariant()),))
    scheduled, choice = default_schedule(func, AVX512)
    assert choice.rule == "none" and scheduled.same_as(func)


def test_a_whole_model_is_scheduled_and_equal_kernels_once():
    """(Scheduling ResNet-18 takes about 0.5 s on two cores; bench_models prints each export's time.)"""
    mod = load_workload("resnet18").fused_module()
    out, choices = apply_default_schedules(mod, _cpu(host_target()))
    funcs = [gv.name_hint for gv, f in out.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert set(choices) == set(funcs)
    assert all(SCHEDULED_ATTR in out[f].attrs and RULE_ATTR in out[f].attrs for f in funcs)
    assert all(SCHEDULED_ATTR not in (f.attrs or {}) for f in mod.functions.values()
               if isinstance(f, tvm.tirx.PrimFunc))  # the caller's module is left as it was


def test_records_win_and_defaults_fill_the_rest():
    from export import TaskSchedule
    from export.build import build

    workload = load_workload("small_cnn")
    task = workload.tasks()[0]
    steps = ({"primitive": "parallel", "args": {"loop": "conv2d_nhwc/yy"}},)
    built = build(workload, parse_target("cpu"), {task.name: TaskSchedule(steps=steps, record_id=1, source="manual")})
    by_name = {o.task.name: o.schedule for o in built.outcomes}
    assert by_name[task.name] == "record" and list(by_name.values()).count("default") == len(by_name) - 1
    warning = next(w for w in built.warnings if "have no record" in w)
    assert "default CPU schedules" in warning and task.name not in warning


def test_the_default_is_a_metaschedule_trace_that_replays():
    """A search can start from the default, and a store can keep it as a record."""
    import tvm_ffi
    from tvm import s_tir

    from explorer.workload import owned_task_module

    func = load_workload("small_cnn").tasks()[0].mod["main"]
    scheduled, choice = default_schedule(func, AVX512)
    assert choice.trace is not None and json.loads(json.dumps(choice.trace)) == choice.trace
    sch = s_tir.Schedule(owned_task_module(func))
    s_tir.Trace.apply_json_to_schedule(choice.trace, sch)
    assert tvm_ffi.structural_equal(sch.mod["main"], scheduled)


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_weights_whose_rows_share_cache_sets_are_packed_in_panels_and_compute_right(cpu):
    """Rows 4 KB apart (N=1024 fp32) map to the same cache sets: packed into panels one register
    tile wide; rows 4160 B apart (N=1040) are left alone. Both still compute the matmul."""
    from explorer.measure import measure
    from explorer.workload import load_kernel

    for n, packs in ((1024, True), (1040, False)):
        kernel = load_kernel(f"matmul:M=16,N={n},K=256")
        func, choice = default_schedule(kernel.func, cpu)
        assert choice.rule == "full", choice.fallback_reason
        assert ("weights packed in panels" in choice.steps[0]) is packs, choice.steps
        if cpu.vector_bits <= host_target().vector_width:
            result = measure(kernel, tvm.IRModule({"main": func}), repeat=1, min_repeat_s=0.0)
            assert result.status == "ok", result.error



@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_a_convolutions_padding_is_computed_once_per_call_not_once_per_tile(cpu):
    """The padded input is its own parallel, vectorized loop nest before the register tiles (each
    tile padding the window it read redid it for every tile column: ResNet-18 46.6 -> 37.5 ms on
    an AVX2 Zen 3 when it moved out); the kernel still computes the convolution."""
    from tvm import s_tir

    from explorer.measure import measure
    from explorer.workload import load_kernel

    kernel = load_kernel("conv2d_nhwc:N=1,C=64,H=28,W=28,K=64,R=3,S=3,stride=1,pad=1")
    func, choice = default_schedule(kernel.func, cpu)
    assert choice.rule == "full" and "register tile" in choice.steps[0], choice
    sch = s_tir.Schedule(func)
    pad = sch.get_sblock("pad_temp")
    pad_loops = sch.get_loops(pad)
    updates = [b.name_hint for b in blocks(func) if b.name_hint.endswith("_update")]
    assert len(updates) == (2 if "the last" in choice.steps[0] else 1), (updates, choice.steps)  # a tail: 2
    for name in updates:
        assert not sch.get(pad_loops[0]).same_as(sch.get(sch.get_loops(sch.get_sblock(name))[0]))
    assert math.prod(int(sch.get(loop).extent) for loop in pad_loops) == 30 * 30 * 64
    assert sch.get(pad_loops[0]).kind == tvm.tirx.ForKind.PARALLEL
    assert sch.get(pad_loops[-1]).kind == tvm.tirx.ForKind.VECTORIZED
    if cpu.vector_bits <= host_target().vector_width:
        result = measure(kernel, tvm.IRModule({"main": func}), repeat=1, min_repeat_s=0.0)
        assert result.status == "ok", result.error


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_an_images_padding_runs_by_rows_not_in_vectors_across_pixels(cpu):
    """A 3-channel image's padding (a CNN's stem) in vectors across pixels tested the border and
    computed indices lane by lane: MobileNetV2's stem 0.48 -> 0.14 ms as rows (AVX-512, 2 cores).
    Rows of pixels x channels run as one loop each, in parallel; the conv still computes right.
    Channels that are whole vectors keep the vectorized padding (the test above)."""
    from tvm import s_tir

    from explorer.measure import measure
    from explorer.workload import load_kernel

    kernel = load_kernel("conv2d_nhwc:N=1,C=3,H=112,W=112,K=16,R=3,S=3,stride=2,pad=1")
    func, choice = default_schedule(kernel.func, cpu)
    assert choice.rule == "full" and "register tile" in choice.steps[0], choice
    assert any(step.startswith("parallel rows of 114x3") for step in choice.steps), choice.steps
    sch = s_tir.Schedule(func)
    kinds = [sch.get(loop).kind for loop in sch.get_loops(sch.get_sblock("pad_temp"))]
    assert kinds[0] == tvm.tirx.ForKind.PARALLEL and tvm.tirx.ForKind.VECTORIZED not in kinds
    assert int(sch.get(sch.get_loops(sch.get_sblock("pad_temp"))[-1]).extent) == 114 * 3
    if cpu.vector_bits <= host_target().vector_width:
        result = measure(kernel, tvm.IRModule({"main": func}), repeat=1, min_repeat_s=0.0)
        assert result.status == "ok" and result.verified, result.error


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_a_register_tile_accumulates_on_the_stack_not_in_the_runtime_workspace(cpu):
    """TVM allocates a "local" buffer inside a parallel loop from the workspace pool, once per tile
    (an allocate and a free call: MobileNetV2's 112x112 1x1 conv over 16 channels ran 2.7x slower).
    The tile's accumulator is a "global" buffer small enough for the stack, so LLVM keeps it in
    registers and the built kernel calls no allocator; a short reduction never gets a tile too big
    for the stack."""
    from explorer.workload import load_kernel

    from explorer.schedule.defaults.tile_cost import STACK_BYTES

    kernel = load_kernel("conv2d_nhwc:N=1,C=16,H=112,W=112,K=96,R=1,S=1,stride=1,pad=0")
    func, choice = default_schedule(kernel.func, cpu)
    rows, vec = (int(n) for n in choice.steps[0].split("register tile ")[1].split()[0].split("x"))
    assert rows * vec * 4 < STACK_BYTES, choice.steps
    target = parse_target("cpu:skylake-avx512" if cpu is AVX512 else "cpu:x86-64-v3")
    llvm_ir = tvm.tirx.build(tvm.IRModule({"main": func}), target=target.tvm()).inspect_source("ll")
    assert "TVMBackendAllocWorkspace" not in llvm_ir


def test_long_reductions_keep_their_widest_tiles_whatever_the_allocation_costs():
    """An AVX-512 tile of 16 vectors or more is allocated per tile (over 1 KB) but spreads that over
    thousands of multiply-adds: ResNet's 3x3 conv and matmul 1024 keep the tiles they had."""
    from explorer.workload import load_kernel

    for spec, tile in (("conv2d_nhwc:N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1", "4x64"),
                       ("matmul:M=1024,N=1024,K=1024", "4x64"), ("matmul:M=128,N=768,K=768", "4x64")):
        _, choice = default_schedule(load_kernel(spec).func, AVX512)
        assert f"register tile {tile} " in choice.steps[0], (spec, choice.steps)


def _computes_the_reference_on_avx2(kernel, func) -> None:
    """Build ``func`` for AVX2 and compare it with the kernel's reference (on hosts that run AVX2)."""
    if host_target().vector_width < 256:
        return
    lib = tvm.compile(tvm.IRModule({"main": func}), target=parse_target("cpu:x86-64-v3").tvm())
    inputs = kernel.random_inputs()
    expected = kernel.reference(*inputs)
    expected = expected[0] if isinstance(expected, (list, tuple)) else expected
    args = [tvm.runtime.tensor(x) for x in inputs] + [tvm.runtime.tensor(np.zeros_like(expected))]
    lib["main"](*args)
    np.testing.assert_allclose(args[-1].numpy(), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("spec, tile, tail", [
    ("conv2d_nhwc:N=1,C=64,H=14,W=14,K=64,R=3,S=3,stride=1,pad=1", "5x16", 4),  # 14 columns: 10 + 4
    ("conv2d_nhwc:N=2,C=64,H=7,W=7,K=64,R=3,S=3,stride=1,pad=1", "5x16", 2),  # a batch of 2
    ("conv2d_nhwc:N=1,C=512,H=7,W=7,K=512,R=3,S=3,stride=1,pad=1", "5x16", 2),  # tile columns first (9.4 MB)
    ("matmul:M=98,N=64,K=512", "6x16", 2),  # 98 rows: 96 + 2
    ("matmul:M=1024,N=1024,K=1024", "6x16", 4),
])
def test_rows_without_a_factor_of_six_get_twelve_accumulators_and_a_tail(spec, tile, tail, monkeypatch):
    """On AVX2, 8 accumulators (2x32, 4x16) leave the FMA units waiting on their latency; 12 (6x16)
    ran 1.29x faster on a 48-wide conv. ResNet's widths (56, 28, 14, 7) and most row counts have no
    factor of 3: whole tiles cover what they can and the last rows get a tile of their own
    (loop_partition). The schedule is well formed (a Schedule opens it again), its trace replays
    to the same kernel, and the built kernel computes the reference. (Rows of a row, here: short
    rows of outputs run as one axis in the next test.)"""
    from tvm import s_tir

    from explorer.schedule.defaults import tiling
    from explorer.schedule.trace import replay
    from explorer.workload import load_kernel

    monkeypatch.setattr(tiling, "pixel_rows", lambda *args: None)
    kernel = load_kernel(spec)
    func, choice = default_schedule(kernel.func, AVX2)
    assert choice.rule == "full", choice
    assert f"register tile {tile} " in choice.steps[0] and f"the last {tail} in {tail}x16" in choice.steps[0], choice
    s_tir.Schedule(func)  # raises on a block that uses a loop variable of an outer scope
    replayed = replay(kernel.func, choice.trace)
    assert replayed.mod["main"].script() == tvm.IRModule({"main": func})["main"].script()
    _computes_the_reference_on_avx2(kernel, func)


def test_short_reductions_keep_whole_tiles():
    """A tail of rows costs a pass of its own over the output: a 1x1 conv over 16 channels
    (MobileNetV2's at 112x112 ran 2x slower with one) and a 3x3 conv over 3 channels (a stem) keep
    tiles that divide the rows."""
    from explorer.workload import load_kernel

    for spec in ("conv2d_nhwc:N=1,C=16,H=112,W=112,K=96,R=1,S=1,stride=1,pad=0",
                 "conv2d_nhwc:N=1,C=3,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1"):
        _, choice = default_schedule(load_kernel(spec).func, AVX2)
        assert "register tile" in choice.steps[0] and "the last" not in choice.steps[0], (spec, choice.steps)


def test_a_kernel_whose_tail_of_rows_fails_keeps_whole_register_tiles(monkeypatch):
    """Should the tail of rows fail on some kernel, the kernel still gets a register tile (rows
    that whole tiles divide), not the safe rule's plain loops."""
    from explorer.schedule.defaults import tiling
    from explorer.workload import load_kernel

    def broken(*args, **kwargs):
        raise RuntimeError("a TVM refusal")

    monkeypatch.setattr(tiling, "tile_with_tail", broken)
    kernel = load_kernel("conv2d_nhwc:N=1,C=64,H=14,W=14,K=64,R=3,S=3,stride=1,pad=1")
    _, choice = default_schedule(kernel.func, AVX2)
    assert choice.rule == "full" and "register tile" in choice.steps[0], choice
    assert "the last" not in choice.steps[0] and "a TVM refusal" in choice.fallback_reason, choice


@pytest.mark.parametrize("spec, tile, tail", [
    ("conv2d_nhwc:N=1,C=512,H=7,W=7,K=512,R=3,S=3,stride=1,pad=1", "5x16", 4),  # 49 = 45 + 4, not 7 x (5 + 2)
    ("conv2d_nhwc:N=1,C=256,H=14,W=14,K=256,R=3,S=3,stride=1,pad=1", "6x16", 4),  # 196 = 192 + 4
    ("conv2d_nhwc:N=2,C=64,H=7,W=7,K=64,R=3,S=3,stride=1,pad=1", "5x16", 4),  # a batch of 2: per image
])
def test_short_rows_run_over_the_outputs_of_several_rows_as_one_axis(spec, tile, tail):
    """ResNet's last convs have 7 output columns: 5x16 tiles and a 2x16 tail whose 4 accumulators
    wait on the FMA latency. Over the 7x7 outputs as one axis of 49 (transform_block_layout), the
    tiles are 5x16 and one 4x16 tail. The schedule is well formed, replays from its trace, and
    computes the reference."""
    from tvm import s_tir

    from explorer.schedule.trace import replay
    from explorer.workload import load_kernel

    kernel = load_kernel(spec)
    func, choice = default_schedule(kernel.func, AVX2)
    assert choice.rule == "full", choice
    height, width = spec.split("H=")[1].split(",")[0], spec.split("W=")[1].split(",")[0]
    assert f"register tile {tile} " in choice.steps[0] and f"the last {tail} in {tail}x16" in choice.steps[0], choice
    assert f"rows over {height}x{width} outputs as one axis" in choice.steps[0], choice
    s_tir.Schedule(func)
    assert replay(kernel.func, choice.trace).mod["main"].script() == \
        tvm.IRModule({"main": func})["main"].script()
    _computes_the_reference_on_avx2(kernel, func)


@pytest.mark.parametrize("spec", [
    "batch_matmul:Bt=4,M=14,N=64,K=512",  # the weights change with the batch: a tile may not cross it
    # 56 = 54 + 2 is near the best already: the model's gain (5%) is under PIXEL_GAIN (7%), and
    # measured fused, ResNet's 56x56 and 28x28 convs ran 1-4% slower (each tile column streams the input)
    "conv2d_nhwc:N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1",
    # 2 columns of 16: fused, 7x8 tiles for enough tasks, which the model costs more than 5x16 by rows
    "conv2d_nhwc:N=1,C=64,H=7,W=7,K=32,R=3,S=3,stride=1,pad=1",
    # 42 = 7 x 6 outputs in whole tiles: each tile's write-back would cross output rows, which TVM
    # 0.27 computes wrongly (fused, this kernel gave wrong values); only a tail's own pass is safe
    "conv2d_nhwc:N=1,C=512,H=6,W=7,K=512,R=3,S=3,stride=1,pad=1",
])
def test_rows_stay_one_axis_where_fusing_them_would_not_pay(spec):
    from explorer.workload import load_kernel

    _, choice = default_schedule(load_kernel(spec).func, AVX2)
    assert choice.rule == "full" and "outputs as one axis" not in choice.steps[0], choice


def test_a_kernel_whose_fused_rows_fail_keeps_its_tail_of_rows(monkeypatch):
    """Should running two output axes as one fail on some kernel, the kernel gets the tiles of
    one output row with their tail (the next rule), not whole tiles."""
    from explorer.schedule.defaults import tiling
    from explorer.workload import load_kernel

    def broken(*args, **kwargs):
        raise RuntimeError("a TVM refusal")

    monkeypatch.setattr(tiling, "fuse_rows", broken)
    _, choice = default_schedule(load_kernel("conv2d_nhwc:N=1,C=512,H=7,W=7,K=512,R=3,S=3,stride=1,pad=1").func, AVX2)
    assert choice.rule == "full" and "register tile 5x16 " in choice.steps[0], choice
    assert "the last 2 in 2x16" in choice.steps[0] and "a TVM refusal" in choice.fallback_reason, choice


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_a_global_average_pool_reads_its_input_once_without_copying_it_first(cpu):
    """The mean of MobileNetV2's last 7x7x1280 activations: its rows are 5 KB apart (a multiple of
    1 KB), which made the rules copy the input into panels on every call, though each element is
    read once (0.063 ms; a search found 0.005). An operand only output rows share is copied."""
    from explorer.measure import measure
    from explorer.workload import load_kernel

    kernel = load_kernel("mobilenet_v2/mean")
    func, choice = default_schedule(kernel.func, cpu)
    assert choice.rule == "full" and not any("packed" in s for s in choice.steps), choice.steps
    if cpu.vector_bits <= host_target().vector_width:
        result = measure(kernel, tvm.IRModule({"main": func}), repeat=1, min_repeat_s=0.0)
        assert result.status == "ok" and result.verified, result.error


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_a_small_matrix_vector_product_stays_serial_and_a_larger_one_runs_in_parallel(cpu):
    """An unrolled LSTM's step (1x96 by 96x384, 37k multiply-adds) costs less than the parallel
    region that would share it (1.3 us serial, 1.6 us parallel timed alone, worse on a busy machine);
    eight rows of it (295k) are worth both cores."""
    from tvm import s_tir

    from explorer.workload import load_kernel

    def kinds(spec):
        func, choice = default_schedule(load_kernel(spec).func, cpu)
        assert choice.rule == "full" and "register tile" in choice.steps[0], choice
        sch = s_tir.Schedule(func)
        return {sch.get(loop).kind for block in blocks(func) for loop in sch.get_loops(sch.get_sblock(block.name_hint))}

    assert tvm.tirx.ForKind.PARALLEL not in kinds("matmul:M=1,N=384,K=96")
    assert tvm.tirx.ForKind.PARALLEL in kinds("matmul:M=8,N=384,K=96")


def _squeeze_excite_gate(channels: int = 144, wide: int = 576, side: int = 7):
    """An SE block's gate as MobileNetV3 has it after fusion: a 1x1 conv on the pooled 1x1xC map,
    hard-sigmoid, times the 7x7xC feature map (a consumer that broadcasts its producer)."""
    from tvm import te, topi

    pooled = te.placeholder((1, 1, 1, channels), "float32", name="pooled")
    weight = te.placeholder((1, 1, channels, wide), "float32", name="weight")
    fmap = te.placeholder((1, side, side, wide), "float32", name="fmap")
    conv = topi.nn.conv2d_nhwc(pooled, weight, 1, 0, 1)
    gate = topi.minimum(topi.maximum(conv * 0.1666667 + 0.5, 0.0), 1.0)
    return te.create_prim_func([pooled, weight, fmap, topi.multiply(gate, fmap)])


@pytest.mark.parametrize("cpu", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_a_gate_that_broadcasts_over_a_feature_map_keeps_the_register_tile(cpu):
    """TVM 0.27 fails a check (InternalError, not a ScheduleError) when the epilogue's last
    consumer broadcasts the gate over the feature map: the whole tiled rule fell back to a serial
    reduction (MobileNetV3's SE gates at 4 GFLOPS, 12x slower). The consumer now stays apart."""
    func = _squeeze_excite_gate()
    scheduled, choice = default_schedule(func, cpu)
    assert choice.rule == "full" and "register tile" in choice.steps[0], (choice.fallback_reason, choice.steps)
    target = parse_target("cpu:x86-64-v4" if cpu is AVX512 else "cpu:x86-64-v3")
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled}), target=target.tvm())
    register = "zmm" if cpu is AVX512 else "ymm"
    assert f"%{register}" in lib.inspect_source("asm")  # compiled for the width, whatever the host
    if cpu.vector_bits <= host_target().vector_width:  # values where the host runs it
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(s).astype("float32") for s in ((1, 1, 1, 144), (1, 1, 144, 576), (1, 7, 7, 576))]
        out = tvm.runtime.tensor(np.zeros((1, 7, 7, 576), "float32"))
        lib(*[tvm.runtime.tensor(a) for a in args], out)
        conv = args[0].reshape(1, 144) @ args[1].reshape(144, 576)
        gate = np.clip(conv * 0.1666667 + 0.5, 0.0, 1.0).reshape(1, 1, 1, 576)
        np.testing.assert_allclose(out.numpy(), gate * args[2], rtol=1e-4, atol=1e-4)


def test_an_expression_is_walked_once_a_node_and_a_blocks_value_once_a_rule(monkeypatch):
    """A convolution with fused activations stores a value whose nodes are shared many times over (``fast_exp``
    reads its clamped input eight times): :func:`sub_exprs` yields each node once, and the facts of a value a
    rule asks for again (after a step that left the block alone) are not walked again. Walked as a tree, with
    no memory, a conv with SiLU, GELU and a sigmoid took seconds to schedule."""
    from tvm import te, tirx, topi

    from explorer.schedule.defaults import analysis

    x = tirx.Var("x", "float32")
    shared = x * x
    twice = shared + shared  # the graph: twice -> shared -> x; the tree: 7 nodes
    assert len(list(analysis.sub_exprs(twice))) == 3
    deep = x
    for _ in range(30):  # 2^31 - 1 nodes as a tree
        deep = deep + deep
    assert len(list(analysis.sub_exprs(deep))) == 31

    a = te.placeholder((64, 64), name="a")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, topi.math.fast_exp(a)]))
    block = sch.get_sblock("T_fast_exp")
    walks = []
    original = analysis.sub_exprs
    monkeypatch.setattr(analysis, "sub_exprs", lambda expr: walks.append(expr) or original(expr))
    value = sch.get(block).body.value
    of_value = lambda: sum(w.same_as(value) for w in walks)  # noqa: E731 - (its indices are walked each time)
    first = analysis.block_facts(sch, block)
    assert of_value() > 0
    walked = of_value()
    assert analysis.block_facts(sch, block) == first and of_value() == walked  # remembered, not walked again
