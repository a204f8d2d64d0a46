"""Records into exports: the best record per task for the export's target and machine is applied
by default, a pick per task overrides it, records of other targets or machines are not used, and
a record that does not apply falls back to the default with a warning."""

from __future__ import annotations

import json

import pytest

from explorer.target.environment import hardware_fingerprint
from explorer.schedule.steps import Step
from explorer.schedule.trace import steps_to_trace
from explorer.target import canonical_target, host_target, parse_target
from explorer.workload import load_workload
from export import ExportError, export_workload, workload_tasks
from export.choose import best_schedules, schedules_for, task_choices
from search.records import store_workload
from store import Record, Store

CONV_STEPS = [
    {"primitive": "reorder", "args": {"loops": ["conv2d_nhwc/nn", "conv2d_nhwc/yy", "conv2d_nhwc/xx",
                                                "conv2d_nhwc/ry", "conv2d_nhwc/rx", "conv2d_nhwc/rc",
                                                "conv2d_nhwc/ff"]}},
    {"primitive": "parallel", "args": {"loop": "conv2d_nhwc/yy"}},
    {"primitive": "vectorize", "args": {"loop": "conv2d_nhwc/ff"}},
]
# the task pipeline folds batch-norm into the convolutions: conv + bias + relu is one kernel
CONV_TASKS = ("small_cnn/fused_conv2d2_add2_relu2", "small_cnn/fused_conv2d1_add1_relu1",
              "small_cnn/fused_transpose_conv2d_add_relu")


def _record(key: str, *, median: float, steps=(), trace=None, target=None, hardware=None, source="manual") -> Record:
    return Record(workload_key=key, target=target or canonical_target(host_target()),
                  hardware=hardware or hardware_fingerprint(), source=source, status="ok", steps=list(steps),
                  trace=trace, latencies=[median] * 3, median_s=median, gflops=None, environment={}, verified=True)


@pytest.fixture(scope="module")
def cnn():
    workload = load_workload("small_cnn")
    return workload, workload_tasks(workload), workload.fused_module()


@pytest.fixture
def store(tmp_path, cnn):
    """A database with records for the three convolutions of small_cnn, and distractors."""
    _, tasks, mod = cnn
    db = Store(tmp_path / "records.db")
    ids = {}
    for name in CONV_TASKS:
        task = next(t for t in tasks if t.name == name)
        func = mod[task.funcs[0]]
        db.add_workload(store_workload(func, name=name, kind="model_task"))
        trace = steps_to_trace(func, [Step(s["primitive"], s["args"]) for s in CONV_STEPS])
        fast = db.add_record(_record(task.key, median=1e-4, trace=trace, source="search"))
        slow = db.add_record(_record(task.key, median=2e-4, steps=CONV_STEPS))
        ids[name] = (fast, slow)
        db.add_record(_record(task.key, median=1e-6, steps=CONV_STEPS, hardware="elsewhere/other cpu/avx2/64c"))
        db.add_record(_record(task.key, median=1e-6, steps=CONV_STEPS,
                              target=json.dumps({"kind": "llvm", "mcpu": "icelake-server", "num-cores": 2})))
    yield db, ids
    db.close()


def test_best_record_per_task_for_this_target_and_machine(cnn, store):
    workload, tasks, _ = cnn
    db, ids = store
    schedules, choices = best_schedules(db, tasks, parse_target("cpu"))
    assert {name: s.record_id for name, s in schedules.items()} == {n: ids[n][0] for n in CONV_TASKS}
    assert all(s.trace is not None for s in schedules.values())  # the search record replays its trace
    by_name = {c.task.name: c for c in choices}
    first = "small_cnn/fused_transpose_conv2d_add_relu"
    assert [r.id for r in by_name[first].candidates] == list(ids[first])  # other machine/target left out
    assert by_name["small_cnn/mean"].candidates == ()


def test_export_applies_the_records_and_names_the_rest(cnn, store, tmp_path):
    workload, tasks, _ = cnn
    db, ids = store
    schedules, _ = best_schedules(db, tasks, parse_target("cpu"))
    report = export_workload(workload, "cpu", tmp_path / "b", schedules=schedules, layers=False)
    assert report.ok and report.verification.ok
    m = report.manifest
    assert m["records"] == {n: ids[n][0] for n in CONV_TASKS}
    applied = [t for t in m["tasks"] if t["schedule"] == "record"]
    assert sorted(t["name"] for t in applied) == sorted(CONV_TASKS)
    warning = next(w for w in m["warnings"] if "have no record" in w)
    assert warning.startswith("5 of 8 kernels (0.5% of the FLOPs)") and "small_cnn/max_pool2d (0.3%)" in warning
    assert "default CPU schedules" in warning


def test_a_pick_overrides_the_best_and_none_means_default(cnn, store):
    _, tasks, _ = cnn
    db, ids = store
    choices = task_choices(db, tasks, parse_target("cpu"))
    c0, c1, fused = "small_cnn/fused_transpose_conv2d_add_relu", "small_cnn/fused_conv2d1_add1_relu1", \
        "small_cnn/fused_conv2d2_add2_relu2"
    schedules = schedules_for(choices, {c0: ids[c0][1], c1: None})
    assert schedules[c0].record_id == ids[c0][1] and schedules[c0].steps  # the manual one: steps
    assert c1 not in schedules
    assert schedules[fused].record_id == ids[fused][0]
    with pytest.raises(ExportError, match="record 999999 is not a record of task small_cnn/fused_transpose_conv2d_add_relu"):
        schedules_for(choices, {c0: 999999})


def test_other_targets_get_their_own_records(cnn, store):
    _, tasks, _ = cnn
    db, _ = store
    schedules, _ = best_schedules(db, tasks, parse_target("cpu:icelake-server"))  # any machine for a named CPU
    assert len(schedules) == 3
    assert best_schedules(db, tasks, parse_target("cuda:sm_90"))[0] == {}


def test_cuda_records_match_by_arch(cnn, tmp_path):
    _, tasks, mod = cnn
    task = tasks[0]
    with Store(tmp_path / "gpu.db") as db:
        db.add_workload(store_workload(mod[task.funcs[0]]))
        gpu = {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024, "host": {"kind": "llvm"}}
        rid = db.add_record(_record(task.key, median=1e-5, steps=CONV_STEPS, target=json.dumps(gpu),
                                    hardware="gpu-box/H100"))
        assert best_schedules(db, tasks, parse_target("cuda:sm_90"))[0][task.name].record_id == rid
        assert best_schedules(db, tasks, parse_target("cuda:sm_80"))[0] == {}


def test_a_record_that_does_not_apply_falls_back_with_a_warning(cnn, tmp_path):
    from export import TaskSchedule
    from export.build import build

    workload, _, _ = cnn
    bad = {"small_cnn/mean": TaskSchedule(steps=tuple(CONV_STEPS), record_id=7, source="manual")}  # no conv2d_nhwc block
    built = build(workload, parse_target("cpu"), bad)
    outcome = next(o for o in built.outcomes if o.task.name == "small_cnn/mean")
    assert outcome.schedule == "failed" and outcome.record_id == 7 and outcome.error
    assert any(w.startswith("record 7 for small_cnn/mean did not apply") for w in built.warnings)


def test_kernel_export_with_a_manual_record(tmp_path):
    from explorer.workload import load_kernel

    kernel = load_kernel("matmul:M=64,N=64,K=64")
    steps = [{"primitive": "split", "args": {"loop": "C/j", "factors": [None, 16]}},
             {"primitive": "vectorize", "args": {"loop": "C/j_1"}},
             {"primitive": "parallel", "args": {"loop": "C/i"}}]
    with Store(tmp_path / "k.db") as db:
        key = db.add_workload(store_workload(kernel.func, name=kernel.name))
        rid = db.add_record(_record(key, median=1e-5, steps=steps))
        workload = load_workload("matmul:M=64,N=64,K=64")
        schedules, _ = best_schedules(db, workload_tasks(workload), parse_target("cpu"))
    report = export_workload(workload, "cpu", tmp_path / "b", schedules=schedules)
    assert report.manifest["records"] == {"matmul_M64_N64_K64_float32": rid}
    assert report.verification.ok and not any("have no record" in w for w in report.warnings)


def test_task_keys_agree_with_metaschedule_and_the_schedule_page(cnn):
    """Records meet tasks only if schedx keys a task exactly as MetaSchedule's own task extraction
    and the Schedule page do; equal PrimFuncs are one task with their calls summed."""
    from tvm.s_tir import meta_schedule as ms

    from explorer.workload import load_kernel
    from explorer.workload import model_kernels
    from explorer.models import load_model
    from explorer.workload import as_task_module, workload_key

    workload, tasks, mod = cnn
    extracted = ms.relax_integration.extract_tasks(mod, host_target().tvm())
    assert {workload_key(as_task_module(t.dispatched[0])) for t in extracted} == {t.key for t in tasks}
    assert {t.task_name: int(t.weight) for t in extracted} == {t.funcs[0]: t.calls for t in tasks}
    assert {workload_key(k.func) for k in model_kernels(load_model("small_cnn"))} == {t.key for t in tasks}
    kernel_task = workload_tasks(load_workload("matmul:M=64,N=64,K=64"))[0]
    assert kernel_task.key == workload_key(load_kernel("matmul:M=64,N=64,K=64").func)


def test_missing_database_is_an_error_only_when_named(tmp_path, cnn):
    _, tasks, _ = cnn
    with pytest.raises(ExportError, match="no database at"):
        best_schedules(tmp_path / "nope.db", tasks, parse_target("cpu"))


def test_when_every_record_lost_to_the_default_the_reason_says_so(cnn, tmp_path):
    """Issue 29: `schedx bench` said "no records for this workload" where 62 records existed that
    all lost to the default schedule (its own record, measured first, was the best of each task)."""
    from export.choose import why_no_schedules

    _, tasks, mod = cnn
    target = host_target()
    with Store(tmp_path / "lost.db") as db:
        assert why_no_schedules(task_choices(db, tasks, target)).startswith("no records")
        task = next(t for t in tasks if t.name == CONV_TASKS[0])
        func = mod[task.funcs[0]]
        db.add_workload(store_workload(func, name=task.name, kind="model_task"))
        trace = steps_to_trace(func, [Step(s["primitive"], s["args"]) for s in CONV_STEPS[:1]])
        db.add_record(_record(task.key, median=1e-4, trace=trace, source="default"))
        db.add_record(_record(task.key, median=2e-4, steps=CONV_STEPS, source="search"))
        choices = task_choices(db, tasks, target)
        assert schedules_for(choices) == {}
        assert why_no_schedules(choices).startswith(f"2 records for 1 of {len(tasks)} tasks, and none beat the default")
