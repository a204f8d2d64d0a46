"""The search's warm worker pool (errors, time-outs and crashes come back as outcomes) and the
verification of search candidates against the unscheduled kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from explorer.kernels import builtin_kernel
from explorer.target import host_target
from search import worker_jobs
from search.params import SearchParams
from search.pool import WarmPool
from store.outcome import Outcome
from explorer.workload import as_task_module
from explorer.workload import kernel_task
from search.job_spec import ValidJob
from search.tune import _arg_specs, tune
from store import Store

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast

FAST = dict(population=32, generations=1, init_min_unmeasured=8)


@pytest.fixture(scope="module")
def pool():
    with WarmPool(1) as p:
        yield p


def test_pool_returns_results_errors_timeouts_and_crashes_as_outcomes(pool):
    first = pool.call(os.getpid, timeout=60)
    assert first.ok and first.value != os.getpid()
    bad = pool.call(int, "seven", timeout=30)
    assert bad.status is Outcome.RUN_ERROR and "ValueError" in bad.message and "seven" in bad.message
    assert bad.message.startswith("run failed:") and not bad.crashed
    built = pool.call(int, "seven", timeout=30, failed=Outcome.BUILD_ERROR)  # the caller says what a failure is
    assert built.status is Outcome.BUILD_ERROR and built.message.startswith("build failed:")
    slow = pool.call(time.sleep, 30, timeout=0.5)
    assert slow.status is Outcome.TIMEOUT and "timed out" in slow.message
    crash = pool.call(os.abort, timeout=30)
    assert crash.status is Outcome.RUN_ERROR and crash.crashed and "SIGABRT" in crash.message
    after = pool.call(os.getpid, timeout=60)  # a fresh worker took the dead one's place
    assert after.ok and after.value not in (first.value, os.getpid())


def test_pool_map_keeps_order():
    with WarmPool(2) as p:
        outcomes = p.map(divmod, [(7, 2), (9, 0), (10, 3)], timeout=30)
    assert [o.status for o in outcomes] == [Outcome.OK, Outcome.RUN_ERROR, Outcome.OK]
    assert outcomes[0].value == (3, 1) and outcomes[2].value == (3, 1)
    assert "ZeroDivisionError" in outcomes[1].message


def test_closing_the_pool_ends_a_call_in_flight_and_leaves_no_process():
    import threading

    pool = WarmPool(1)
    pid = pool.call(os.getpid, timeout=60).value
    results = []
    caller = threading.Thread(target=lambda: results.append(pool.call(time.sleep, 60, timeout=120)))
    caller.start()
    time.sleep(0.5)
    pool.close()
    caller.join(50)  # the call sleeps 60 s: a result before then means close() ended it
    assert results and results[0].status is Outcome.INFRA_ERROR
    assert pool.call(os.getpid, timeout=5).status is Outcome.INFRA_ERROR  # closed for good: nothing restarts
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_tvm_starts_without_torch_and_torch_still_imports_afterwards():
    pytest.importorskip("torch")
    code = ("import sys, explorer, tvm; from tvm import relax; print('torch' in sys.modules); "
            "import torch; print(torch.ones(2).sum().item())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "2.0"]


def _built_matmul(tmp_path):
    k = builtin_kernel("matmul", M=32, N=32, K=32)
    mod = as_task_module(k.func)
    target = host_target()

    artifact, _ = worker_jobs.build(mod, target.tvm())
    ref = worker_jobs.reference(mod, target.config, _arg_specs(mod), str(tmp_path / "ref.npz"))
    return mod, artifact, ref


def test_measure_checks_outputs_against_the_reference_before_timing(tmp_path):
    mod, artifact, ref = _built_matmul(tmp_path)
    specs = _arg_specs(mod)
    evaluator = {"number": 1, "repeat": 2, "min_repeat_ms": 1}
    good = worker_jobs.measure(artifact, specs, evaluator, ref)
    assert good.outcome == Outcome.OK and len(good.secs) == 2 and good.max_error == 0.0
    arrays = dict(np.load(ref))
    out = max(i for i, s in enumerate(specs) if s[2])
    arrays[f"e{out}"][3, 5] += 1.0
    wrong = str(tmp_path / "wrong.npz")
    np.savez(wrong, **arrays)
    bad = worker_jobs.measure(artifact, specs, evaluator, wrong)
    assert bad.outcome == Outcome.VERIFY_FAILED and "(3, 5)" in bad.error and not bad.secs


def test_the_confirmation_round_times_cold_with_tvms_own_cache_flush(tmp_path):
    """The confirmation's evaluator flushes every argument but the input before each single run
    (TVM's function, looked up by name: a rename would make every confirmation fail), one time per
    repeat; the runner uses it only inside ``confirming()``, without claims or early verdicts."""
    import tvm

    from search.runner import CACHE_FLUSH, COLD_EVALUATOR, EVALUATOR, PoolRunner

    assert COLD_EVALUATOR["f_preproc"] == CACHE_FLUSH and COLD_EVALUATOR["number"] == 1
    assert tvm.get_global_func(CACHE_FLUSH, allow_missing=True) is not None
    mod, artifact, ref = _built_matmul(tmp_path)
    timed = worker_jobs.measure(artifact, _arg_specs(mod), COLD_EVALUATOR, ref)
    assert len(timed.secs) == COLD_EVALUATOR["repeat"] and all(t > 0 for t in timed.secs), timed
    runner = PoolRunner.__new__(PoolRunner)  # (the attributes confirming() swaps, no pool needed)
    runner.claims, runner.evaluator, runner.reject_factor = "claims", dict(EVALUATOR), 10.0
    with runner.confirming():
        assert (runner.claims, runner.evaluator, runner.reject_factor) == (None, COLD_EVALUATOR, None)
    assert (runner.claims, runner.evaluator, runner.reject_factor) == ("claims", EVALUATOR, 10.0)


def test_a_schedule_that_drops_the_reduction_init_fails_verification(tmp_path):
    """Outputs start from random values, in the reference and in the candidate alike: a kernel
    that accumulates onto whatever its output held is caught (with zeros it would pass)."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def no_init(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"),
                C: T.Buffer((32, 32), "float32")):
        for i, j, k in T.grid(32, 32, 32):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    mod, _, ref = _built_matmul(tmp_path)
    artifact, _ = worker_jobs.build(as_task_module(no_init.with_attr("global_symbol", "main")), host_target().tvm())
    bad = worker_jobs.measure(artifact, _arg_specs(mod), {"number": 1, "repeat": 1, "min_repeat_ms": 1}, ref)
    assert bad.outcome == Outcome.VERIFY_FAILED and not bad.secs


def wrong_reference(mod, target, specs, path, seed=0):
    """A reference whose first output element is off by one (runs in a worker process)."""
    worker_jobs.reference(mod, target, specs, path, seed)
    arrays = dict(np.load(path))
    out = max(i for i, s in enumerate(specs) if s[2])
    arrays[f"e{out}"].flat[0] += 1.0
    np.savez(path, **arrays)
    return path


def test_real_search_verifies_every_candidate_and_records_wrong_ones_as_failed(tmp_path, monkeypatch):
    k = builtin_kernel("matmul", M=64, N=64, K=64)
    params = SearchParams(trials=8, per_batch=8, cost_model="random", **FAST)
    good = Store(tmp_path / "good.db")
    summary = tune(ValidJob.of_tasks([kernel_task(k)], host_target()), good, params)
    records = [r for r in good.records() if "confirmation" not in r.environment]
    assert summary.measured == 8 and len(records) == 8
    assert all(r.status == "ok" and r.verified is True and r.max_error is not None for r in records)
    # the confirmation round timed the best ones again, through the same verifying runner
    confirmed = [r for r in good.records() if "confirmation" in r.environment]
    assert summary.confirmed and len(confirmed) == summary.confirmed[0]["timed"] >= 2
    assert all(r.status == "ok" and r.verified is True and len(r.latencies) == params.confirm_rounds
               and r.environment["confirmation"]["timing"].startswith("cold") for r in confirmed)

    monkeypatch.setattr(worker_jobs, "reference", wrong_reference)  # the runner looks it up at call time
    bad = Store(tmp_path / "bad.db")
    summary = tune(ValidJob.of_tasks([kernel_task(k)], host_target()), bad, params)
    records = bad.records()
    assert summary.trials == 8 and summary.failed == 8 and summary.best == {}
    assert all(r.status == "verify_failed" and r.verified is False and "differs from the reference" in r.error
               for r in records)
    assert bad.best() == []


def test_schedules_that_rewrite_a_weight_layout_are_measured_and_verified(tmp_path):
    """topi's NHWC convolution marks its weight layout-free: MetaSchedule's RewriteLayout then
    gives the timed kernel a weight of another shape. Such candidates are timed with that shape
    and verified through the kernel that still transforms the weight itself (before this was
    handled, 252 of 256 candidates failed to run)."""
    import json

    k = builtin_kernel("conv2d_nhwc", N=1, C=16, H=14, W=14, K=16)
    store = Store(tmp_path / "nhwc.db")
    summary = tune(ValidJob.of_tasks([kernel_task(k)], host_target()), store,
                   SearchParams(trials=16, per_batch=8, cost_model="random", **FAST))
    records = store.records()
    assert any("TransformLayout" in json.dumps(r.trace) for r in records)  # the weight layout was rewritten
    assert len(records) == 16 + summary.confirmed[0]["timed"]  # (timed again after)
    # TVM 0.27 fails to build an occasional random candidate of this space ("Buffer kernel is used
    # before its definition": 3 runs in 8 lost one, whatever the seed, before and after schedx's
    # changes); it is recorded as a build error like any other
    failed = [r for r in records if r.status != "ok"]
    assert summary.measured + summary.failed == 16 and summary.measured >= 14, summary
    # and, rarer (1 run in 13 on machine C), a random candidate that builds and computes wrong: the
    # verification catches it and the record says so (never "ok", never verified)
    assert all((r.status == "build_error" and "used before its definition" in r.error)
               or (r.status == Outcome.VERIFY_FAILED and "differs from the reference" in r.error)
               for r in failed), {r.error for r in failed}
    assert all(r.verified is True for r in records if r.status == "ok")


def test_a_worker_whose_parent_died_exits_without_a_traceback():
    """The parent dies while a job runs: the worker's reply meets a broken pipe, and it leaves
    quietly (it printed a BrokenPipeError traceback on the user's terminal before)."""
    code = ("import os, threading, time\nfrom search.pool import WarmPool\npool = WarmPool(1)\n"
            "pool.call(os.getpid, timeout=120)\n"
            "threading.Thread(target=lambda: pool.call(time.sleep, 0.5, timeout=60), daemon=True).start()\n"
            "time.sleep(0.2)\nos._exit(0)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # the worker inherits stderr: communicate() returns once it has exited too
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=180)
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr
