"""The MetaSchedule adapter: a real ``tune_tir`` writes into the store, and compiling from a
reopened file picks the best record of this machine and target."""

from __future__ import annotations

import json

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

import tvm_ffi  # noqa: E402
from tvm import te  # noqa: E402
from tvm.s_tir import meta_schedule as ms  # noqa: E402
from tvm.target import Target  # noqa: E402

from explorer.ir.plain import to_plain  # noqa: E402
from explorer.target import canonical_target  # noqa: E402
from explorer.workload import as_task_module, workload_key  # noqa: E402
from search.ms_database import StoreDatabase  # noqa: E402
from search.records import store_workload  # noqa: E402
from store import Record, Store  # noqa: E402

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast

N = 64
HW = "test/x86_64/2c"
TARGET = {"kind": "llvm", "num-cores": 2}


def _matmul(n: int = N):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.create_prim_func([a, b, c])


def _mod(func):
    return as_task_module(func)


def _builder():
    """LocalBuilder whose workers skip ``import tvm.s_tir.tensor_intrin`` (17-21 s per worker here,
    see notes/tvm-0.27.md): a closure, so cloudpickle ships it by value."""

    def f_build(mod, target, _params):
        import tvm as _tvm
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        return _tvm.tirx.build(mod, target=target)

    return ms.builder.LocalBuilder(f_build=f_build, max_workers=2, timeout_sec=60)


def test_canonical_target_is_stable():
    text = canonical_target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    assert text == '{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}'
    assert canonical_target(Target({"num-cores": 2, "kind": "llvm", "mcpu": "znver4"})) == text
    assert canonical_target(text) == text
    assert json.loads(canonical_target("llvm")) == {"kind": "llvm"}


def test_canonical_target_is_the_measure_sides_too():
    """Records saved by the Schedule page (explorer.measure) and by the search (StoreDatabase)
    carry one text per target, or they never meet: there is one rule."""
    from explorer.target import host_target

    host = host_target()  # what explorer.measure files a manual record under: host.key
    assert host.key == canonical_target(host.config) == canonical_target(Target(host.config))
    assert host.key == canonical_target(json.dumps(host.config))


def test_to_plain_converts_tvm_values():
    value = to_plain([tvm.tirx.IntImm("int32", 3), tvm.tirx.FloatImm("float32", 0.5), {"a": (1, 2)}, True, None])
    assert value == [3, 0.5, {"a": [1, 2]}, True, None]
    json.dumps(value)


def test_store_workload_matches_metaschedule():
    mod = _mod(_matmul())
    w = store_workload(mod, name="matmul_64")
    assert w.key == workload_key(mod) == ms.database.Workload(mod).as_json()[0]
    assert store_workload(_matmul()).key == w.key  # a bare PrimFunc is keyed as tune_tir keys it
    assert w.flops == 2 * N ** 3
    assert w.shapes["args"][0] == {"shape": [N, N], "dtype": "float32"}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """Tune a 64^3 matmul for 4 trials (one batch, a small population: the records are what the tests
    read) into a fresh store; close it; return the file."""
    from explorer.tvm_fast import light_tensor_intrin

    light_tensor_intrin()  # else tune_tir imports every intrinsic TVM ships (this setup: 80 s alone, 14 s with it)
    tmp = tmp_path_factory.mktemp("adapter")
    path = tmp / "schedx.db"
    func = _matmul()
    with Store(path) as store:
        store.add_workload(store_workload(_mod(func), name="matmul_64x64x64_float32", source="builtin:matmul"))
        db = StoreDatabase(store, hardware=HW, target_filter=canonical_target(TARGET))
        strategy = ms.search_strategy.EvolutionarySearch(population_size=32, init_min_unmeasured=8,
                                                         genetic_num_iters=1)
        ms.tune_tir(func, Target(TARGET), work_dir=str(tmp / "work"), max_trials_global=4, num_trials_per_iter=4,
                    builder=_builder(), database=db, num_tuning_cores=2, seed=0, strategy=strategy)
    return path, tmp


def test_tune_tir_writes_records(tuned):
    path, _ = tuned
    with Store(path) as store:
        records = store.records(source="search")
        assert len(records) >= 4
        ok = [r for r in records if r.status == "ok"]
        assert ok, [r.error for r in records]
        r = ok[0]
        assert r.hardware == HW and r.target == canonical_target(TARGET)
        assert r.latencies and r.median_s > 0 and r.gflops > 0
        assert r.trace and r.args_info
        assert store.workload(r.workload_key).name == "matmul_64x64x64_float32"  # our name kept


def test_compile_from_reopened_file_picks_the_best(tuned):
    path, _ = tuned
    func = _matmul()
    mod = _mod(func)
    with Store(path) as store:
        # compiling through MetaSchedule's interface picks by MetaSchedule's rule (the mean)
        best = store.top_k(workload_key(mod), canonical_target(TARGET), HW, 1, rank="mean")[0]
        db = StoreDatabase(store, hardware=HW)
        record = db.query_tuning_record(mod, Target(TARGET), "main")
        assert record is not None
        assert to_plain(record.trace.as_json())[1] == best.trace[1]  # the best record's decisions
        sch = ms.tir_integration.compile_tir(db, func, Target(TARGET))
        assert sch is not None
        expected = tvm.s_tir.Schedule(mod)
        tvm.s_tir.Trace.apply_json_to_schedule(best.trace, expected)
        assert tvm_ffi.structural_equal(sch.mod, expected.mod)
        lib = tvm.compile(sch.mod, target=Target(TARGET))
        rng = np.random.default_rng(0)
        a, b = rng.random((N, N), dtype="float32"), rng.random((N, N), dtype="float32")
        c = tvm.runtime.tensor(np.zeros((N, N), "float32"))
        lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
        np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
        # another target: nothing to pick
        assert db.query_tuning_record(mod, Target({"kind": "llvm", "num-cores": 1}), "main") is None


def test_other_hardware_is_ignored_unless_asked(tuned):
    path, _ = tuned
    mod = _mod(_matmul())
    key = workload_key(mod)
    with Store(path) as store:
        ours = store.top_k(key, None, HW, 1)[0]
        fake = Record.from_dict({**ours.to_dict(), "id": None, "created": "", "hardware": "elsewhere/64c",
                                 "latencies": [1e-9], "median_s": 1e-9, "gflops": None, "source": "import"})
        store.add_record(fake)
        here = StoreDatabase(store, hardware=HW)
        top = here.get_top_k(here.commit_workload(mod), 3)
        assert top and all(float(t.run_secs[0]) > 1e-9 for t in top)
        anywhere = StoreDatabase(store, hardware=HW, any_hardware=True)
        top = anywhere.get_top_k(anywhere.commit_workload(mod), 3)
        assert float(top[0].run_secs[0]) == pytest.approx(1e-9)
        stranger = StoreDatabase(store, hardware="nobody/1c")
        assert stranger.get_top_k(stranger.commit_workload(mod), 3) == []
        assert stranger.query_tuning_record(mod, Target(TARGET), "main") is None
        assert len(here) == store.count(hardware=HW, has_trace=True)
        assert len(here.get_all_tuning_records()) == len(here)


def test_export_loads_in_metaschedule_and_imports_back(tuned):
    path, tmp = tuned
    mod = _mod(_matmul())
    with Store(path) as store:
        summary = store.export_metaschedule(tmp / "ms_json", hardware=HW, overwrite=True)
        assert summary["records"] == store.count(hardware=HW, has_trace=True)
        jdb = ms.database.JSONDatabase(work_dir=str(tmp / "ms_json"), allow_missing=False)
        assert len(jdb) == summary["records"]
        assert jdb.has_workload(mod)
        best = jdb.query_tuning_record(mod, Target(TARGET), "main")
        ours = store.top_k(workload_key(mod), canonical_target(TARGET), HW, 1, rank="mean")[0]
        assert to_plain(best.trace.as_json())[1] == ours.trace[1]
        again = store.import_metaschedule(tmp / "ms_json", hardware=HW, target_fn=canonical_target)
        assert again["records_added"] == 0 and again["records_skipped"] == summary["records"]
