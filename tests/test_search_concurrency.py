"""Searches side by side: candidates claimed in the database (two searches on one workload never
measure the same candidate) and one timed run at a time on the machine (a lock every timed run
holds; ``schedx jobs`` shows who measures and who waits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import cli
from search.claims import ClaimBook
from explorer.workload import Task
from store import Record, Store, Workload

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def lock_env(tmp_path, monkeypatch):
    """A lock folder and a timing log of this test's own (children inherit both)."""
    monkeypatch.setenv("SCHEDX_LOCK_DIR", str(tmp_path / "lock"))
    monkeypatch.setenv("SCHEDX_TIMING_LOG", str(tmp_path / "timing.log"))
    return tmp_path


def _intervals(log: Path) -> list[tuple[float, float, int]]:
    rows = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return sorted((float(a), float(b), int(pid)) for pid, a, b in rows)


def _overlaps(intervals) -> list:
    return [(x, y) for x, y in zip(intervals, intervals[1:]) if y[0] < x[1]]


def test_claims_grant_each_candidate_to_one_search(tmp_path):
    store = Store(tmp_path / "claims.db")
    store.add_workload(Workload(key="w1", name="k", source="test"))
    one = ClaimBook(store, target_key="llvm", hardware="hw", task_keys=["w1"], job_id=1)
    two = ClaimBook(Store(tmp_path / "claims.db"), target_key="llvm", hardware="hw", task_keys=["w1"], job_id=2)
    assert one.claim(0, ["a", "b", "c"]) == {"a", "b", "c"}
    assert two.claim(0, ["b", "c", "d"]) == {"d"} and two.skipped == {"b", "c"}
    assert one.claim(0, ["a"]) == {"a"}  # its own claim, renewed
    assert store.live_claims() == {one.owner: 3, two.owner: 1}
    # one measured a and b, failed c for a reason outside the candidate; then released
    store.add_records([Record(workload_key="w1", target="llvm", hardware="hw", source="search", status=s, steps=[],
                              trace=None, latencies=[1e-3] if s == "ok" else [], median_s=None, gflops=None,
                              environment={}, candidate=c)
                       for c, s in (("a", "ok"), ("b", "run_error"), ("c", "infra_error"))])
    one.release()
    assert two.claim(0, ["a", "b", "c"]) == {"c"}  # measured ones stay measured; c is tried again
    # a claim outlives its search only for its time to live (kill -9 never releases it)
    assert store.claim_candidates("w1", "llvm", "hw", ["e"], owner="dead", ttl_s=-1) == ["e"]
    assert two.claim(0, ["e"]) == {"e"}


def test_the_claims_of_a_search_killed_on_this_machine_go_at_once(tmp_path):
    """Issue 30, probe 8: after kill -9 the dead process's claims stayed for their 15 minutes; the
    next search on this machine releases them (a search elsewhere keeps its own)."""
    import socket

    store = Store(tmp_path / "claims.db")
    store.add_workload(Workload(key="w1", name="k", source="test"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    store.claim_candidates("w1", "llvm", "hw", ["a", "b"], owner=f"{host}:{dead.pid}:3", ttl_s=900)
    store.claim_candidates("w1", "llvm", "hw", ["c"], owner="another-host:1:4", ttl_s=900)
    book = ClaimBook(store, target_key="llvm", hardware="hw", task_keys=["w1"], job_id=5)
    assert book.claim(0, ["a", "b", "c"]) == {"a", "b"}
    assert set(store.live_claims()) == {book.owner, "another-host:1:4"}


def test_a_claim_whose_pid_a_later_process_has_is_free_at_once(tmp_path):
    """Issue 49: a claim names its process by pid and start time; on a busy machine a killed
    search's pid soon belongs to another process, and its claims held for their 15 minutes."""
    import socket

    from explorer.processes import process_started

    store = Store(tmp_path / "claims.db")
    store.add_workload(Workload(key="w1", name="k", source="test"))
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        host, started = socket.gethostname(), process_started(live.pid)
        assert started is not None
        store.claim_candidates("w1", "llvm", "hw", ["a"], owner=f"{host}:{live.pid}.{started}:3", ttl_s=900)
        store.claim_candidates("w1", "llvm", "hw", ["b"], owner=f"{host}:{live.pid}.{started + 1}:4", ttl_s=900)
        book = ClaimBook(store, target_key="llvm", hardware="hw", task_keys=["w1"], job_id=5)
        assert book.claim(0, ["a", "b"]) == {"b"}  # a: its process runs; b: that pid is another process now
        assert book.owner.split(":")[-2] == f"{os.getpid()}.{process_started()}"
    finally:
        live.kill()
        live.wait()


def test_the_default_rules_variants_stay_claimed_until_each_has_its_record(tmp_path):
    """Issue 49: two searches on one database measured the same "default rules, tile ranked N"
    variant: the variants, written one record at a time, gave up all their claims with the first
    record, while the others were measured and not yet written. Another search claims at every
    write here: it must be granted none of them."""
    from explorer.kernels import builtin_kernel
    from explorer.target import host_target
    from explorer.workload import kernel_task
    from search.callbacks import SearchState
    from search.defaults_round import measure_variants
    from search.ledger import CandidateLedger, LedgerBuilder, LedgerRunner, RunOutcome
    from store.outcome import Outcome
    from search.records import task_workload
    from search.runner import PoolRunner
    from search.tune import TuneSummary
    from tests.fake_measure import FakeBuilder

    class ClaimingRunner(PoolRunner):  # PoolRunner's own claims; every candidate 'runs' in 0.1 ms
        def __init__(self, claims) -> None:
            self.claims, self.rpc, self.timeout_sec, self.measured = claims, None, 30, []

        def _measure(self, inp, candidate):
            self.measured.append(candidate.hash)
            return RunOutcome(Outcome.OK, (1e-4,), verified=True)

    task = kernel_task(builtin_kernel("matmul", M=128, N=128, K=128))
    db = tmp_path / "variants.db"
    store = Store(db)
    store.add_workload(task_workload(task, source="search"))
    target = host_target()
    book = ClaimBook(store, target_key=target.key, hardware="hw", task_keys=[task.key], job_id=1)
    rival = ClaimBook(Store(db), target_key=target.key, hardware="hw", task_keys=[task.key], job_id=2)
    state = SearchState(store=store, tasks=[task], target_key=target.key, hardware="hw", job_id=None, total_trials=8,
                        environment={}, summary=TuneSummary(), claims=book)
    ledger = CandidateLedger({task.key: 0})
    inner = ClaimingRunner(book)
    taken: list[str] = []
    add_records = store.add_records

    def add_while_another_search_claims(records):
        taken.extend(rival.claim(0, list(inner.measured)))  # what it may measure now
        return add_records(records)

    store.add_records = add_while_another_search_claims
    measured = measure_variants([task], target, target.tvm(), state, ledger,
                                LedgerBuilder(FakeBuilder(), ledger, str(tmp_path)),
                                LedgerRunner(inner, ledger, str(tmp_path)), per_task=3, budget=3, default_s={})
    assert measured == len(inner.measured) >= 2
    assert taken == []  # before: the second and third variants, measured here, granted to the other search too
    assert store.live_claims() == {}  # all released once every record is written


def test_one_timed_run_at_a_time_across_processes_and_jobs_shows_who_waits(lock_env):
    db = lock_env / "jobs.db"
    store = Store(db)
    go = lock_env / "go"  # the first holds the lock until the test has looked
    code = ("import os, sys, time\nfrom explorer.measure.lock import measuring\n"
            "with measuring(what='test kernel', job=int(sys.argv[1])):\n"
            "    print('in', flush=True)\n    start = time.time()\n"
            "    while sys.argv[2] == 'hold' and not os.path.exists(sys.argv[3]) and time.time() < start + 60:\n"
            "        time.sleep(0.05)\n    time.sleep(0.5)\n")
    jobs = [store.create_job("tune", {"workload": "matmul"}) for _ in range(2)]
    first = subprocess.Popen([sys.executable, "-c", code, str(jobs[0].id), "hold", str(go)], cwd=ROOT,
                             stdout=subprocess.PIPE)
    assert first.stdout.readline().strip() == b"in"
    second = subprocess.Popen([sys.executable, "-c", code, str(jobs[1].id), "go", str(go)], cwd=ROOT,
                              stdout=subprocess.PIPE)
    store.update_job(jobs[0].id, status="running", pid=first.pid)
    store.update_job(jobs[1].id, status="running", pid=second.pid)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not list((lock_env / "lock" / "waiting").glob("*.json")):
            time.sleep(0.1)
        shown = CliRunner().invoke(cli, ["jobs", "--db", str(db)], obj={}).output
        assert f"waiting to measure: pid {second.pid} (job {jobs[1].id}" in shown, shown
        assert f"measuring on this machine: pid {first.pid} (job {jobs[0].id}, test kernel)" in shown, shown
        rows = {int(line.split()[0]): line for line in shown.splitlines() if line.strip()[:1].isdigit()}
        assert "[measuring]" in rows[jobs[0].id] and f"to measure for pid {first.pid}" in rows[jobs[1].id], shown
        listed = json.loads(CliRunner().invoke(cli, ["jobs", "--db", str(db), "--json"], obj={}).output)
        assert listed[1]["measuring"].startswith("waiting")
    finally:
        go.touch()
        first.wait(timeout=30)
        second.wait(timeout=30)
    (a0, a1, _), (b0, b1, _) = _intervals(lock_env / "timing.log")
    assert b0 >= a1  # the second ran only once the first had finished


def test_two_concurrent_searches_measure_nothing_twice_and_never_time_together(lock_env):
    db = lock_env / "two.db"
    # a random cost model: the claims and the lock are tested, not the model (each search's XGBoost
    # training competed with the other's for the cores)
    args = [sys.executable, "-m", "app.cli", "tune", "matmul:M=64,N=64,K=64", "--trials", "4", "--per-batch", "4",
            "--population", "32", "--generations", "1", "--default-variants", "0", "--cost-model", "random",
            "--db", str(db), "--json"]
    procs = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err.decode()[-2000:]
    summaries = [json.loads(out[out.index(b"{"):]) for out, _ in outs]
    every = Store(db).records()
    records = [r for r in every if "confirmation" not in r.environment]  # what the searches measured
    measured = Counter(r.candidate for r in records if r.status != "infra_error")
    assert [h for h, n in measured.items() if n > 1] == []  # 0 candidates measured twice
    # both draw the same seeded candidates: what one has claimed the other skips and replaces in
    # top-up rounds (CI once saw a search skip its whole batch and stop there: 4 of 8)
    assert sum(s["trials"] for s in summaries) == len(records) and 8 - 4 < len(records) <= 8
    assert all(s["trials"] > 0 for s in summaries)
    timed = _intervals(lock_env / "timing.log")
    assert len({pid for _, _, pid in timed}) == 2 and len(timed) >= len(every)
    assert _overlaps(timed) == []  # no two timed runs at the same moment, confirmation rounds included


@pytest.mark.slow  # two real searches (about 16 s); claims are also tested by the test above
def test_a_search_whose_whole_batch_another_search_claimed_measures_others(lock_env):
    """CI, once: two searches drew the same seeded batch, one claimed all of it, and the other
    took that for a used-up search space and ended with nothing measured. Here another search
    (another machine's, so its claims stay) holds every candidate of this search's first batch."""
    tune = [sys.executable, "-m", "app.cli", "tune", "matmul:M=64,N=64,K=64", "--trials", "4", "--per-batch", "4",
            "--population", "32", "--generations", "1", "--default-variants", "0", "--json", "--db"]
    first = lock_env / "first.db"
    subprocess.run(tune + [str(first)], cwd=ROOT, check=True, capture_output=True, timeout=600)
    drawn = [x for x in Store(first).records() if "confirmation" not in x.environment]
    assert len(drawn) == 4
    db = lock_env / "claimed.db"
    store = Store(db)
    for key in {r.workload_key for r in drawn}:
        store.add_workload(Store(first).workload(key))
    r = drawn[0]
    held = store.claim_candidates(r.workload_key, r.target, r.hardware, [x.candidate for x in drawn],
                                  owner="another-host:1:7", ttl_s=900)
    assert len(held) == 4
    out = subprocess.run(tune + [str(db)], cwd=ROOT, check=True, capture_output=True, timeout=600).stdout
    summary = json.loads(out[out.index(b"{"):])
    mine = [x for x in Store(db).records() if "confirmation" not in x.environment]
    assert summary["trials"] == len(mine) == 4  # four others, drawn by a top-up round
    assert not {x.candidate for x in mine} & set(held)


def test_a_batch_claimed_elsewhere_is_not_a_used_up_search_space(tmp_path):
    """What decides the top-up rounds: a batch the store answered whole ends a task's search (its
    space is used up); one another search claimed does not."""
    from search.callbacks import SearchState, _Batch, account
    from search.tune import TuneSummary

    state = SearchState(store=Store(tmp_path / "s.db"), tasks=[Task(name="k", key="w1", mod=None)], target_key="llvm",
                        hardware="hw", job_id=None, total_trials=8, environment={}, summary=TuneSummary())
    account(state, _Batch(0, [], cached=4, size=4, elsewhere=4))
    assert state.saturated == set() and state.summary.trials == 0
    account(state, _Batch(0, [], cached=4, size=4))
    assert state.saturated == {0}


def test_the_scratch_folders_of_dead_searches_go_when_the_next_starts(tmp_path, monkeypatch):
    """Issue 30, probe 8: `schedx-tune-*` folders of searches killed with -9 stayed in TMPDIR."""
    from search import work_dirs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"schedx-tune-pid{dead.pid}-abc").mkdir()
    (tmp_path / f"schedx-tune-pid{dead.pid}-abc" / "logs").mkdir()
    (tmp_path / "schedx-tune-pid1-keep").mkdir()  # pid 1 lives
    (tmp_path / "schedx-tune-old").mkdir()  # a name without a pid: not ours to judge
    (tmp_path / f"schedx-uploads-{dead.pid}-abc").mkdir()  # a number that is no pid of ours (a user id)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with work_dirs.work_dir() as mine:
        assert Path(mine).name.startswith(f"schedx-tune-pid{__import__('os').getpid()}-")
        assert sorted(p.name for p in tmp_path.iterdir() if p.name != Path(mine).name) == \
            ["schedx-tune-old", "schedx-tune-pid1-keep", f"schedx-uploads-{dead.pid}-abc"]
