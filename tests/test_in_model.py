"""Records checked inside the model: both builds (records, defaults only) timed kernel by kernel
in place, alternated; a record whose kernel is slower there than the default schedule's is
dropped, the others kept; ``schedx export --check-in-model`` says which and why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import pytest
from click.testing import CliRunner

from app.cli import cli
from explorer.target.environment import hardware_fingerprint
from explorer.schedule.steps import Step
from explorer.schedule.trace import steps_to_trace
from explorer.target import canonical_target, host_target
from explorer.workload import load_workload
from export import workload_tasks
from export.in_model import MARGIN, _compare, check_in_model
from export.schedules import TaskSchedule
from search.records import store_workload
from store import Record, Store
from tests.cpu_marks import NEEDS_BF16

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast

TASK = "small_cnn/fused_transpose_conv2d_add_relu"  # conv + folded batch-norm + relu
# a plain parallel loop nest: far slower than the default's register tile, whatever the machine
SLOW = ({"primitive": "parallel", "args": {"loop": "conv2d_nhwc/yy"}},)


def test_a_record_slower_than_the_default_inside_the_model_is_dropped():
    workload = load_workload("small_cnn")
    # one thread, ten runs a round: a stalled second thread on a busy machine cannot decide it
    kept, check = check_in_model(workload, host_target(), {TASK: TaskSchedule(steps=SLOW, record_id=7, source="x")},
                                 rounds=3, runs=10, threads=1)
    assert kept == {} and check.dropped == [TASK] and check.rounds == 3
    assert check.tasks[TASK]["verdict"] == "dropped"
    t = check.tasks[TASK]
    assert t["record_s"] > t["default_s"] > 0 and not t["kept"] and t["rounds_won"] == 0 and t["ratio"] > 1
    assert json.loads(json.dumps(check.to_dict()))["dropped"] == [TASK]
    assert TASK in check.notes()[0] and "inside the model" in check.notes()[0]
    assert check_in_model(workload, host_target(), {})[0] == {}  # nothing to check: nothing built


def test_records_keyed_by_workload_key_are_checked_and_one_that_does_not_apply_is_dropped():
    """An export takes schedules by task name or workload key: both are checked. A record whose
    steps name a loop the kernel does not have fails to apply: dropped (the export would build the
    default), with the reason."""
    workload = load_workload("small_cnn")
    tasks = {t.name: t for t in workload_tasks(workload)}
    other = next(n for n in tasks if n != TASK and "conv2d" in n)
    broken = ({"primitive": "parallel", "args": {"loop": "no_such_block/yy"}},)
    kept, check = check_in_model(workload, host_target(), {tasks[TASK].key: TaskSchedule(steps=SLOW, record_id=1),
                                                            other: TaskSchedule(steps=broken, record_id=2)},
                                 rounds=1, runs=3, threads=1)
    assert set(check.tasks) == {TASK, other} and other not in kept
    assert check.tasks[other]["verdict"] == "failed" and check.tasks[other]["error"]
    assert check.tasks[TASK]["verdict"] in ("kept", "dropped") and check.tasks[TASK]["record_s"]


@pytest.mark.parametrize("flag, applied", [((), "default"),
                                           pytest.param(("--check-in-model",), "default", marks=pytest.mark.slow),
                                           (("--no-check-in-model",), "record")])
def test_export_check_in_model_uses_the_default_where_the_record_loses(tmp_path, one_round_in_model_check, flag,
                                                                      applied):
    """The check is on by default (a plain export never ships a record slower than the default in
    the model); ``--no-check-in-model`` applies the record as chosen. No verification run: the
    schedule applied is what is asserted."""
    workload = load_workload("small_cnn")
    task = next(t for t in workload_tasks(workload) if t.name == TASK)
    func = workload.fused_module()[task.funcs[0]]
    db = Store(tmp_path / "r.db")
    db.add_workload(store_workload(func, name=TASK, kind="model_task"))
    trace = steps_to_trace(func, [Step(s["primitive"], s["args"]) for s in SLOW])
    db.add_record(Record(workload_key=task.key, target=canonical_target(host_target()),
                         hardware=hardware_fingerprint(), source="manual", status="ok", steps=list(SLOW), trace=trace,
                         latencies=[1e-6] * 3, median_s=1e-6, gflops=None, environment={}, verified=True))
    db.close()
    out = tmp_path / "bundle"
    result = CliRunner().invoke(cli, ["export", "small_cnn", "--db", str(tmp_path / "r.db"), "-o", str(out),
                                      *flag, "--no-layers", "--no-verify", "--threads", "1", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    row = next(t for t in report["tasks"] if t["name"] == TASK)
    assert row["schedule"] == applied  # checked: the record lost in the model, the default was built
    assert any(TASK in w and "inside the model" in w for w in report["warnings"]) == (applied == "default"), \
        report["warnings"]


def test_a_record_is_kept_when_it_wins_by_the_margin_in_the_median_round():
    """Each round times both builds one after the other: the record's time over the default's is
    taken round by round, and the median round decides (by the margin). One lucky round does not
    keep a record (the best of the rounds alone did), nor does one bad round drop a clear winner
    (a win in every round, required before, did)."""
    def verdict(record, default, rounds=3):
        return _compare(record, default, rounds)[2]

    assert verdict([1.0, 1.0, 1.0], [1.1, 1.2, 1.1]) == "kept"
    assert _compare([0.8, 1.3, 1.0], [1.1, 1.2, 1.1], 3) == (pytest.approx(1.0 / 1.1), 2, "kept")  # lost one round
    assert verdict([0.176, 0.30, 0.18], [0.273, 0.28, 0.27]) == "kept"
    assert _compare([0.9, 1.0, 1.0], [1.0, 1.0, 1.0], 3) == (1.0, 1, "dropped")  # one lucky round
    assert verdict([1.0, 1.0, 1.0], [1.01, 1.01, 1.01]) == "dropped"  # every round, inside the margin
    assert 1.0 > MARGIN * 1.01
    assert _compare([1.0, None, 1.0], [1.1, 1.1, 1.1], 3) == (None, 2, "dropped")  # the kernel was missed in a round
    assert verdict([], [1.0]) == verdict([1.0], [None], 1) == "unchecked"


# "slower" in make test; "same" and "faster" (about 45 s each) in make test-slow
@pytest.mark.parametrize("verdict", [pytest.param("same", marks=pytest.mark.slow), "slower",
                                     pytest.param("faster", marks=pytest.mark.slow)])
def test_records_that_win_kernel_by_kernel_ship_only_if_the_whole_model_is_faster(monkeypatch, verdict):
    """After a 10-minute ResNet-18 search 10 records won kernel by kernel and the model ran 1.01x its
    defaults: the kept records are timed together, the whole model against the defaults (plain
    runs, alternated rounds), and none ships unless the model is faster beyond the noise. Here the
    kernel check is made to keep the record; the whole-model comparison runs for real (two builds
    of small_cnn, timed: two short rounds, enough for a ratio and its interval) and its verdict is
    replaced to decide."""
    import export.in_model as in_model

    for name, value in (("WHOLE_ROUNDS", 2), ("WHOLE_MORE_ROUNDS", 2), ("WHOLE_BUDGET_S", 1.0)):
        monkeypatch.setattr(in_model, name, value)

    real = in_model._whole_model
    seen = {}

    def whole(records, defaults, threads, count):
        seen.update(real(records, defaults, threads, count))  # really timed: its figures are sound
        return {**seen, "verdict": verdict}

    def keep_all(chosen, seconds, outcomes, rounds):
        tasks = {t: {"record_s": 1e-3, "default_s": 2e-3, "ratio": 0.5, "rounds_won": rounds, "verdict": "kept",
                     "kept": True, "error": ""} for t in chosen}
        return tasks, dict(chosen)

    monkeypatch.setattr(in_model, "_whole_model", whole)
    monkeypatch.setattr(in_model, "_per_kernel", keep_all)
    kept, check = check_in_model(load_workload("small_cnn"), host_target(),
                                 {TASK: TaskSchedule(steps=SLOW, record_id=7, source="x")}, rounds=1, runs=3, threads=1)
    assert seen["ratio"] > 0 and seen["low"] <= seen["ratio"] <= seen["high"] and seen["records"] == 1
    assert check.whole["verdict"] == verdict
    if verdict == "faster":
        assert list(kept) == [TASK] and check.kept == [TASK] and check.notes() == []
    else:
        assert kept == {} and check.tasks[TASK]["verdict"] == "whole" and check.dropped == [TASK]
        assert len(check.notes()) == 1 and "whole model" in check.notes()[0] and "default schedules" in check.notes()[0]


def _fake_rounds(monkeypatch, batches):
    """``_whole_model`` fed ``batches`` (per call of alternate_rounds: records' and defaults' round
    speeds) instead of timed bundles; returns the calls made."""
    import export.bench as bench

    calls = []

    def rounds(contenders, *, rounds, runs, budget_s, say=None):
        records, defaults = batches[len(calls)]
        calls.append(rounds)
        assert len(records) == len(defaults) == rounds
        rng = np.random.default_rng(len(calls))
        runs_of = lambda speeds: [list(s * (1 + 0.002 * rng.standard_normal(20))) for s in speeds]
        return {}, {"records": runs_of(records), "defaults": runs_of(defaults)}

    monkeypatch.setattr(bench, "alternate_rounds", rounds)
    monkeypatch.setattr(bench, "bundle_contender", lambda folder, name, threads=None: name)
    return calls


def test_an_undecided_whole_model_step_with_the_records_ahead_looks_once_more(monkeypatch):
    """MobileNetV2 after a one-hour search on a noisy VM: the records' kernels won in place every
    round, the model read 0.931x with a 95% interval up to 1.003, and nothing shipped. A second set
    of rounds then decides, on all the rounds together."""
    import export.in_model as in_model

    noisy = ([0.80, 1.05, 0.85, 0.99, 0.82, 1.04, 0.86, 0.98], [0.95, 0.97, 1.00, 0.96, 0.98, 0.95, 1.00, 0.97])
    steady = ([0.90] * 8, [1.00] * 8)
    calls = _fake_rounds(monkeypatch, [noisy, steady])
    whole = in_model._whole_model(Path("r"), Path("d"), None, 3)
    assert calls == [in_model.WHOLE_ROUNDS, in_model.WHOLE_MORE_ROUNDS]
    assert whole["verdict"] == "faster" and whole["rounds"] == 16 and whole["high"] < 1.0

    # decided at once, or undecided with the defaults ahead: no second look
    for first in (steady, ([1.00] * 8, [0.90] * 8), (noisy[1], noisy[0])):
        calls = _fake_rounds(monkeypatch, [first, steady])
        whole = in_model._whole_model(Path("r"), Path("d"), None, 3)
        assert calls == [in_model.WHOLE_ROUNDS] and whole["rounds"] == 8, whole


def test_a_second_look_that_stays_undecided_ships_nothing(monkeypatch):
    import export.in_model as in_model

    noisy = ([0.80, 1.05, 0.85, 0.99, 0.82, 1.04, 0.86, 0.98], [0.95, 0.97, 1.00, 0.96, 0.98, 0.95, 1.00, 0.97])
    _fake_rounds(monkeypatch, [noisy, noisy])
    whole = in_model._whole_model(Path("r"), Path("d"), None, 3)
    assert whole["verdict"] == "same" and whole["rounds"] == 16


@NEEDS_BF16
def test_a_workload_built_at_bf16_is_checked_at_bf16():
    """``schedx export --precision bf16`` hands the check a workload already built at bf16: its two
    builds are bf16 builds too (they were refused as fp32 ones: "already built at bf16")."""
    from export.build import as_built

    target = host_target()
    workload = as_built(load_workload("small_cnn"), target, "bf16")[0]
    task = next(t.name for t in workload_tasks(workload) if "conv2d" in t.name)
    broken = ({"primitive": "parallel", "args": {"loop": "no_such_block/yy"}},)
    kept, check = check_in_model(workload, target, {task: TaskSchedule(steps=broken, record_id=3)},
                                 rounds=1, runs=3, threads=1)
    assert kept == {} and check.tasks[task]["verdict"] == "failed" and check.tasks[task]["error"]
