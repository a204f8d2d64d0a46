"""Which schedules ship: one chooser (export.shipping) for every front end, and the in-model
decision taken once, kept in the database, reused until the records chosen, the machine or the
precision change (``recheck`` takes it again). The timing here is a fake that counts its calls:
nothing is built or run except where a test says so."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.cli import cli
from explorer.target import canonical_target, host_target
from explorer.workload import load_kernel, load_workload
from export import ExportError
from export.in_model import InModelCheck
from export.shipping import ALL_DROPPED, ShipSpec, shipped_schedules
from search.records import store_workload
from store import Record, Store

KERNEL = "matmul:M=32,N=32,K=32"
STEPS = [{"primitive": "split", "args": {"loop": "C/j", "factors": [None, 16]}},
         {"primitive": "vectorize", "args": {"loop": "C/j_1"}},
         {"primitive": "parallel", "args": {"loop": "C/i"}}]
MACHINE = "x86_64/the machine the records were measured on/avx2/2c"


class FakeTimer:
    """The in-model timing, faked: every record kept (or, ``whole="same"``, none: the whole model
    no faster beyond the noise); counts its calls."""

    def __init__(self, whole: str = "faster") -> None:
        self.calls = 0
        self.whole = whole

    def __call__(self, workload, target, schedules, *, threads=None):
        self.calls += 1
        kept = self.whole == "faster"
        tasks = {name: {"record_s": 1e-5, "default_s": 2e-5, "ratio": 0.5, "rounds_won": 3,
                        "verdict": "kept" if kept else "whole", "kept": kept, "error": ""} for name in schedules}
        check = InModelCheck(rounds=3, tasks=tasks, whole={"ratio": 0.9 if kept else 0.99, "low": 0.85, "high": 0.95
                                                           if kept else 1.02, "verdict": self.whole,
                                                           "records": len(schedules), "rounds": 8})
        return ({n: s for n, s in schedules.items()} if kept else {}), check


def _record(key: str, median: float, steps=STEPS) -> Record:
    return Record(workload_key=key, target=canonical_target(host_target()), hardware=MACHINE, source="manual",
                  status="ok", steps=steps, trace=None, latencies=[median] * 3, median_s=median, gflops=None,
                  environment={}, verified=True)


def _other_schedule(factor: int) -> list[dict]:
    return [{**STEPS[0], "args": {"loop": "C/j", "factors": [None, factor]}}, *STEPS[1:]]


@pytest.fixture
def db(tmp_path):
    """A database with one record of the kernel, measured on MACHINE; (path, workload key)."""
    kernel = load_kernel(KERNEL)
    path = tmp_path / "records.db"
    with Store(path) as store:
        key = store.add_workload(store_workload(kernel.func, name=kernel.name))
        store.add_record(_record(key, 1e-5))
    return path, key


@pytest.fixture
def this_machine(monkeypatch):
    """The hardware fingerprint decisions are keyed by, set by the test (``set(name)``)."""
    import explorer.target.environment as environment

    def use(name: str) -> None:
        monkeypatch.setattr(environment, "hardware_fingerprint", lambda: name)
    use("x86_64/machine one/avx2/2c")
    return use


def _ship(path, timer, **kw):
    spec = ShipSpec(load_workload(KERNEL), host_target(), db=path, hardware=MACHINE, check_in_model=True, **kw)
    return shipped_schedules(spec, timer=timer)


def test_a_decision_is_taken_once_kept_and_reused(db, this_machine):
    path, _ = db
    timer = FakeTimer()
    first = _ship(path, timer)
    assert timer.calls == 1 and not first.decision.reused and not first.decision.not_kept
    assert [s.record_id for s in first.schedules.values()] == [1]
    line = first.summary()
    assert line.startswith("in-model decision from ") and "(taken now, kept for the next commands): 1 record(s) kept, 0 dropped" in line
    assert line.endswith("0.900x the defaults' time, 95% CI 0.850-0.950: faster)")
    again = _ship(path, timer)  # another command, the same question: nothing is timed
    assert timer.calls == 1 and again.decision.reused and "(reused: a recheck takes it again)" in again.summary()
    assert again.schedules == first.schedules and again.decision.decision == first.decision.decision
    with Store(path) as store:  # kept with its interval
        kept = store.in_model_decision(workload_key=first.decision.decision.workload_key, target=host_target().key,
                              hardware="x86_64/machine one/avx2/2c", precision="fp32", candidates=[1])
    assert kept is not None and kept.kept == (1,) and (kept.ratio, kept.low, kept.high) == (0.9, 0.85, 0.95)
    rechecked = _ship(path, timer, recheck=True)  # --recheck: taken again, and replaces it
    assert timer.calls == 2 and not rechecked.decision.reused
    assert rechecked.decision.decision.created > first.decision.decision.created
    assert _ship(path, timer).decision.decision == rechecked.decision.decision and timer.calls == 2


def test_a_new_record_another_machine_or_precision_asks_again(db, this_machine):
    path, key = db
    timer = FakeTimer()
    _ship(path, timer)
    _ship(path, timer)
    assert timer.calls == 1
    with Store(path) as store:  # a slower schedule changes nothing: the records chosen are the same
        store.add_record(_record(key, 9e-5, _other_schedule(8)))
    assert _ship(path, timer).decision.reused and timer.calls == 1
    with Store(path) as store:  # a faster one is chosen instead: another question
        faster = store.add_record(_record(key, 5e-6, _other_schedule(4)))
    shipped = _ship(path, timer)
    assert timer.calls == 2 and not shipped.decision.reused
    assert [s.record_id for s in shipped.schedules.values()] == [faster]
    this_machine("x86_64/machine two/avx512/2c")  # the same records on another machine
    assert not _ship(path, timer).decision.reused and timer.calls == 3
    assert _ship(path, timer).decision.reused and timer.calls == 3
    with pytest.raises(ExportError, match="single kernel|AVX512-BF16"):  # bf16 is a model's, its tasks are other
        _ship(path, timer, precision="bf16")                            # kernels (tests/test_bf16_search.py)
    this_machine("x86_64/machine one/avx2/2c")  # back on the first machine: its decision still holds
    assert _ship(path, timer).decision.reused and timer.calls == 3


def test_a_decision_that_drops_every_record_ships_the_defaults_and_says_why(db, this_machine):
    path, _ = db
    timer = FakeTimer(whole="same")
    shipped = _ship(path, timer)
    assert shipped.schedules == {} and shipped.why_none == ALL_DROPPED
    assert "0 record(s) kept, 1 dropped" in shipped.summary() and "no difference beyond the noise" in shipped.summary()
    assert any("did not make the whole model faster" in n for n in shipped.notes)
    reused = _ship(path, timer)
    assert timer.calls == 1 and reused.schedules == {} and reused.notes == shipped.notes


def test_no_decision_where_none_is_asked_for(db, this_machine):
    path, _ = db
    timer = FakeTimer()
    workload = load_workload(KERNEL)
    as_chosen = shipped_schedules(ShipSpec(workload, host_target(), db=path, hardware=MACHINE, check_in_model=False),
                                  timer=timer)
    assert len(as_chosen.schedules) == 1 and as_chosen.decision is None and as_chosen.summary() == ""
    none = shipped_schedules(ShipSpec(workload, host_target(), db=path, use_records=False), timer=timer)
    assert none.schedules == {} and none.why_none == "no records used"
    other = shipped_schedules(ShipSpec(workload, host_target(), db=path, check_in_model=True), timer=timer)
    assert other.schedules == {} and other.why_none.startswith("no records")  # none from this machine
    assert timer.calls == 0


def test_schedules_without_record_ids_are_decided_each_time_and_it_says_so(db, this_machine):
    from export.schedules import TaskSchedule

    path, _ = db
    timer = FakeTimer()
    name = load_workload(KERNEL).tasks()[0].name
    for calls in (1, 2):
        shipped = _ship(path, timer, schedules={name: TaskSchedule(steps=tuple(STEPS))})
        assert timer.calls == calls and list(shipped.schedules) == [name]
        assert "not kept for the next command" in shipped.summary()


def test_a_read_only_database_still_decides(db, this_machine, tmp_path):
    path, _ = db
    timer = FakeTimer()
    with Store(path, read_only=True) as store:
        shipped = _ship(store, timer)
    assert timer.calls == 1 and len(shipped.schedules) == 1 and "read-only" in shipped.decision.not_kept


def test_the_export_command_reuses_the_decision_and_says_which(db, this_machine, tmp_path, monkeypatch):
    """``schedx export`` twice on one database: the second applies the kept decision (the timing
    is not called), and both say which decision they used; ``--recheck`` takes it again."""
    import export.in_model as in_model

    path, _ = db
    timer = FakeTimer()
    monkeypatch.setattr(in_model, "check_in_model", timer)
    args = ["export", KERNEL, "--db", str(path), "--hardware", MACHINE, "--no-verify", "--no-layers"]
    first = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    assert "in-model decision from " in first.output and "(taken now, kept for the next commands): 1 record(s) kept" in first.output
    second = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "b"), "--json"])
    assert second.exit_code == 0, second.output
    report = json.loads(second.output[second.output.index("{"):])
    assert timer.calls == 1 and report["in_model"]["reused"]
    assert [t["schedule"] for t in report["tasks"]] == ["record"]
    third = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "c"), "--recheck"])
    assert third.exit_code == 0 and timer.calls == 2 and "(taken now, kept" in third.output


class Called(ExportError):
    pass


def test_every_front_end_asks_the_one_chooser(monkeypatch, tmp_path):
    """export, bench, profile and sweep, on the command line and on their pages, all ship what
    export.shipping.shipped_schedules answers: with it replaced by one that refuses, each stops
    there (before building anything) and says so."""
    import export.entry
    import export.shipping

    asked = []

    def chooser(spec, progress=None, **kw):
        asked.append(spec)
        raise Called("the chooser was asked")

    monkeypatch.setattr(export.shipping, "shipped_schedules", chooser)
    monkeypatch.setattr(export.entry, "shipped_schedules", chooser)
    for args in (["export", "small_cnn", "-o", str(tmp_path / "out")], ["bench", "small_cnn"],
                 ["profile", "small_cnn"], ["sweep", "small_cnn", "--batch", "1"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1 and "the chooser was asked" in result.output, (args, result.output)
    assert len(asked) == 4 and all(s.workload.name == "small_cnn" for s in asked)

    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    pages = Path(__file__).resolve().parent.parent / "app" / "ui"
    at = AppTest.from_file(str(pages / "export_page.py"), default_timeout=120).run()
    at.button(key="ex_build").click().run()
    assert not at.exception and any("the chooser was asked" in e.value for e in at.error)
    at = AppTest.from_file(str(pages / "profile_page.py"), default_timeout=120).run()
    at.button(key="profile_run").click().run()
    at.button(key="profile_sweep").click().run()
    assert not at.exception and sum("the chooser was asked" in e.value for e in at.error) >= 1
    assert len(asked) == 7, [s.workload.name for s in asked]
