"""The store's contract: what goes in comes out, and the leaderboard queries mean what they say."""

from __future__ import annotations

import json
import sqlite3

import pytest

from store import Job, Record, Store, StoreError, Workload, default_db_path
from store.schema import APP, META_TABLE, SCHEMA_VERSION

LLVM = '{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}'
CUDA = '{"arch": "sm_80", "kind": "cuda"}'
HERE, THERE = "x86_64/AMD EPYC/avx512/2c", "aarch64/Neoverse/neon/64c"
SPLIT = {"primitive": "split", "args": {"loop": "i", "factors": [None, 8]}}
TRACE = [[["GetSBlock", [], ["C", "main"], ["b0"]], ["SamplePerfectTile", ["l1"], [2, 16], ["v2", "v3"]]],
         [[1, [16, 4]]]]


def workload(key="101", name="matmul_64", kind="kernel", flops=2 * 64 ** 3) -> Workload:
    return Workload(key=key, name=name, kind=kind, source="builtin:matmul", shapes={"M": 64, "N": 64, "K": 64},
                    flops=flops, mod_b64="b64module==")


def record(key="101", median=1e-3, *, target=LLVM, hardware=HERE, source="manual", status="ok", created="",
           verified=None, steps=None, trace=None, **kw) -> Record:
    lat = [median * 0.9, median, median * 1.1] if median else []
    return Record(workload_key=key, target=target, hardware=hardware, source=source, status=status,
                  steps=steps if steps is not None else [SPLIT],
                  trace=trace, latencies=lat, median_s=median, gflops=None, environment={"threads": 2},
                  verified=verified, created=created, **kw)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "schedx.db") as s:
        yield s


@pytest.fixture
def filled(store):
    store.add_workload(workload())
    store.add_workload(workload("202", "conv2d_1x64x56x56", flops=231211008))
    store.add_workload(workload("303", "resnet18/fused_dense", kind="model_task", flops=0))
    store.add_records([
        record("101", 2e-3, source="manual", created="2025-01-01T00:00:00+00:00"),
        record("101", 1e-3, source="search", created="2025-01-02T00:00:00+00:00", trace=TRACE),
        record("101", 0.5e-3, source="search", verified=False, created="2025-01-03T00:00:00+00:00"),  # wrong result
        record("101", None, status="build_error", error="boom", created="2025-01-04T00:00:00+00:00"),
        record("101", 0.7e-3, hardware=THERE, created="2025-01-05T00:00:00+00:00"),
        record("101", 0.9e-3, target=CUDA, created="2025-01-06T00:00:00+00:00"),
        record("202", 4e-3, source="manual", verified=True, created="2025-02-01T00:00:00+00:00"),
        record("303", 3e-3, source="import", created="2025-03-01T00:00:00+00:00"),
    ])
    return store


def test_workload_round_trip(store):
    w = workload()
    assert store.add_workload(w) == "101"
    assert store.workload("101") == w
    assert Workload.from_dict(json.loads(json.dumps(w.to_dict()))) == w
    assert store.workload("nope") is None
    store.add_workload(Workload(key="101", name="renamed"))  # metadata replaced, module and FLOPs kept
    again = store.workload("101")
    assert again.name == "renamed" and again.mod_b64 == w.mod_b64 and again.flops == w.flops
    store.add_workload(Workload(key="101", name="ignored"), replace=False)
    assert store.workload("101").name == "renamed"
    assert [x.key for x in store.workloads()] == ["101"]


def test_record_round_trip_and_filled_fields(store):
    store.add_workload(workload())
    r = record(median=None, trace=TRACE, args_info=[["TENSOR", "float32", [64, 64]]], max_error=1e-6, verified=True,
               predicted=0.3, job_id=None)
    r = Record.from_dict({**r.to_dict(), "latencies": [3e-3, 1e-3, 2e-3]})
    rid = store.add_record(r)
    got = store.record(rid)
    assert got.id == rid and got.created  # filled by the store
    assert got.median_s == pytest.approx(2e-3)  # from the latencies
    assert got.gflops == pytest.approx(2 * 64 ** 3 / 2e-3 / 1e9)  # from the workload's FLOPs
    assert got.trace == TRACE and got.steps == r.steps and got.args_info == r.args_info
    assert got.verified is True and got.max_error == 1e-6 and got.predicted == 0.3
    assert Record.from_dict(json.loads(json.dumps(got.to_dict()))) == got
    assert store.record(9999) is None


def test_add_records_is_one_batch_with_ids_in_order(store):
    store.add_workload(workload())
    ids = store.add_records([record(median=m) for m in (1e-3, 2e-3, 3e-3)])
    assert len(ids) == 3 and ids == sorted(ids)
    assert [store.record(i).median_s for i in ids] == [1e-3, 2e-3, 3e-3]
    assert store.add_records([]) == []


def test_bad_records_are_refused_whole(store):
    store.add_workload(workload())
    with pytest.raises(StoreError, match="unknown workload"):
        store.add_records([record(), record(key="999")])
    with pytest.raises(StoreError, match="status"):
        store.add_record(record(status="great"))
    with pytest.raises(StoreError, match="source"):
        store.add_record(record(source="magic"))
    with pytest.raises(StoreError, match="plain JSON"):
        store.add_record(Record.from_dict({**record().to_dict(), "environment": {"when": object()}}))
    assert store.count() == 0


def test_best_per_workload_target_hardware(filled):
    best = filled.best()
    keyed = {(r.workload_key, r.target, r.hardware): r for r in best}
    assert len(best) == len(keyed) == 5
    assert keyed[("101", LLVM, HERE)].median_s == 1e-3  # not the 0.5 ms one that failed verification
    assert keyed[("101", LLVM, THERE)].median_s == 0.7e-3
    assert keyed[("101", CUDA, HERE)].median_s == 0.9e-3
    gflops = [r.gflops for r in best if r.gflops is not None]
    assert gflops == sorted(gflops, reverse=True)
    assert best[-1].workload_key == "303"  # no FLOPs known: last


def test_best_filters(filled):
    assert {r.workload_key for r in filled.best(hardware=HERE, target=LLVM)} == {"101", "202", "303"}
    assert [r.workload_key for r in filled.best(kind="model_task")] == ["303"]
    assert {r.source for r in filled.best(source="manual")} == {"manual"}
    assert [r.workload_key for r in filled.best(verified_only=True)] == ["202"]
    assert {r.workload_key for r in filled.best(since="2025-02-01")} == {"202", "303"}
    assert len(filled.best(target="cuda")) == 1  # a bare kind matches every target of that kind
    assert len(filled.best(target="llvm")) == 4
    assert [r.workload_key for r in filled.best(workload="conv2d_1x64x56x56")] == ["202"]
    assert {r.workload_key for r in filled.best(workload="*fused*")} == {"303"}
    assert len(filled.best(top=2)) == 2
    per_source = {(r.workload_key, r.target, r.hardware, r.source): r.median_s for r in filled.best(per_source=True)}
    assert per_source[("101", LLVM, HERE, "manual")] == 2e-3 and per_source[("101", LLVM, HERE, "search")] == 1e-3
    assert len(per_source) == 6
    assert filled.best(workload="no-such-thing") == []


def test_top_k_and_history(filled):
    top = filled.top_k("101", LLVM, HERE, 5)
    assert [r.median_s for r in top] == [1e-3, 2e-3]  # failed verification and build error excluded
    assert len(filled.top_k("101", None, None, 10)) == 4
    assert filled.top_k("101", LLVM, HERE, 5, with_trace=True)[0].trace == TRACE
    hist = filled.history("101")
    assert [r.created for r in hist] == sorted(r.created for r in hist) and len(hist) == 6
    assert len(filled.history("101", hardware=THERE)) == 1
    assert len(filled.history("matmul_64", target=LLVM, hardware=HERE)) == 4


def test_records_filters_order_and_count(filled):
    assert filled.count() == 8
    assert filled.count(status="build_error") == 1
    assert filled.count(source=["manual", "import"]) == 6
    assert filled.count(rankable=True) == 6
    assert filled.count(has_trace=True) == 1
    newest = filled.records(order="newest", limit=2)
    assert [r.workload_key for r in newest] == ["303", "202"]
    fastest = filled.records(order="median", limit=1)[0]
    assert fastest.median_s == 0.5e-3
    assert len(filled.records(until="2025-01-03")) == 2
    with pytest.raises(ValueError):
        filled.records(order="random")


def test_compare_steps_and_decisions(store):
    store.add_workload(workload())
    steps_a = [{"primitive": "split", "args": {"loop": "i", "factors": [None, 8]}},
               {"primitive": "parallel", "args": {"loop": "i0"}}]
    steps_b = [{"primitive": "split", "args": {"loop": "i", "factors": [None, 16]}},
               {"primitive": "vectorize", "args": {"loop": "j1"}},
               {"primitive": "parallel", "args": {"loop": "i0"}}]
    trace_b = [TRACE[0], [[1, [8, 8]]]]
    a, b = store.add_records([record(median=2e-3, steps=steps_a, trace=TRACE),
                              record(median=1e-3, steps=steps_b, trace=trace_b)])
    diff = store.compare(a, b)
    assert diff["a"]["id"] == a and diff["b"]["id"] == b and diff["same_workload"]
    assert diff["b_speedup_over_a"] == pytest.approx(2.0)
    statuses = [row["status"] for row in diff["steps"]]
    assert statuses == ["args", "only_b", "same"]
    assert diff["steps"][0]["differing_args"] == ["factors"]
    assert diff["steps_differ"] == 2
    assert diff["decisions"] == [{"a_index": 1, "b_index": 1, "instruction": "SamplePerfectTile", "inputs": ["l1"],
                                  "a": [16, 4], "b": [8, 8]}]
    assert diff["instructions_differ"] == 0
    json.dumps(diff)
    with pytest.raises(StoreError, match="no record"):
        store.compare(a, 12345)


def test_jobs(store):
    job = store.create_job("search", {"workload": "matmul", "trials": 64})
    assert isinstance(job, Job) and job.status == "queued" and job.params["trials"] == 64
    job2 = store.update_job(job.id, status="running", pid=1234, progress={"trials": 8})
    assert job2.status == "running" and job2.pid == 1234 and job2.progress == {"trials": 8}
    assert job2.updated >= job.updated
    store.update_job(job.id, status="done")
    assert [j.id for j in store.jobs(status="done")] == [job.id]
    assert store.jobs(status="running") == []
    assert store.job(999) is None
    with pytest.raises(StoreError):
        store.update_job(job.id, status="exploded")
    with pytest.raises(StoreError):
        store.update_job(job.id, created="yesterday")
    with pytest.raises(StoreError, match="no job"):
        store.update_job(999, status="done")
    assert Job.from_dict(json.loads(json.dumps(job2.to_dict()))) == job2


def test_info_and_schema_table(filled):
    info = filled.info()
    assert info["schema_version"] == SCHEMA_VERSION
    assert info["records"] == 8 and info["workloads"] == 3 and info["jobs"] == 0
    assert info["by_source"] == {"manual": 5, "search": 2, "import": 1}
    assert info["by_status"] == {"ok": 7, "build_error": 1}
    assert info["journal_mode"] == "wal" and info["size_bytes"] > 0
    assert info["hardware"] == {HERE: 7, THERE: 1}
    conn = sqlite3.connect(filled.path)
    meta = dict(conn.execute(f"SELECT key, value FROM {META_TABLE}").fetchall())
    conn.close()
    assert meta["app"] == APP and meta["schema_version"] == str(SCHEMA_VERSION)


def test_reopen_keeps_everything(filled):
    path = filled.path
    n = filled.count()
    filled.close()
    with Store(path) as again:
        assert again.count() == n and len(again.workloads()) == 3


def test_default_path_honours_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDX_DB", str(tmp_path / "env.db"))
    assert default_db_path() == tmp_path / "env.db"
    with Store() as s:
        assert s.path == tmp_path / "env.db"
    assert (tmp_path / "env.db").exists()
    monkeypatch.delenv("SCHEDX_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "schedx" / "schedx.db"


def test_missing_file_without_create(tmp_path):
    with pytest.raises(StoreError, match="no schedx database"):
        Store(tmp_path / "absent.db", create=False)
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(StoreError, match="directory"):
        Store(tmp_path)
