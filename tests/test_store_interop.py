"""MetaSchedule JSON databases in and out (files written by hand in MetaSchedule's format), and
merging schedx databases without duplicates."""

from __future__ import annotations

import json

import pytest

from store import ImportFormatError, Record, Store, StoreError, Workload
from tests.store_cases import MS_ARGS, MS_HW, MS_TARGET, MS_TRACE, matmul_trace, write_ms


@pytest.fixture
def ms_dir(tmp_path):
    return write_ms(tmp_path / "tune_tir_work", [["9593177933350849261", "okYAAAAAAAB7CiAgInJvb3Rf"],
                                                 ["11208504982831217585", "b3RoZXJtb2R1bGU="]], [
        [0, [matmul_trace([16, 4]), [0.002, 0.0021, 0.0019], MS_TARGET, MS_ARGS]],
        [0, [matmul_trace([8, 8]), [0.001, 0.0011], MS_TARGET, MS_ARGS]],
        [0, [matmul_trace([4, 16]), [1e10], MS_TARGET, MS_ARGS]],  # failed build: MetaSchedule's marker
        [1, [matmul_trace([2, 32]), [0.004], MS_TARGET, None]],
    ])


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "schedx.db") as s:
        yield s


def test_import(store, ms_dir):
    summary = store.import_metaschedule(ms_dir, hardware=MS_HW)
    assert summary["workloads_added"] == 2 and summary["records_added"] == 4 and summary["records_skipped"] == 0
    records = store.records(order="id")
    assert [r.status for r in records] == ["ok", "ok", "run_error", "ok"]
    first = records[0]
    assert first.source == "import" and first.hardware == MS_HW
    assert first.median_s == pytest.approx(0.002) and first.latencies == [0.002, 0.0021, 0.0019]
    assert first.gflops is None  # FLOPs unknown to the store
    assert first.trace == matmul_trace([16, 4]) and first.args_info == MS_ARGS
    assert json.loads(first.target) == MS_TARGET
    assert records[2].latencies == [] and records[2].median_s is None
    w = store.workload("9593177933350849261")
    assert w.mod_b64 == "okYAAAAAAAB7CiAgInJvb3Rf" and w.source.startswith("import:") and w.flops == 0
    best = store.best(hardware=MS_HW)
    assert {r.workload_key: r.median_s for r in best} == {"9593177933350849261": pytest.approx(0.00105),
                                                          "11208504982831217585": 0.004}
    again = store.import_metaschedule(ms_dir, hardware=MS_HW)
    assert again["records_added"] == 0 and again["records_skipped"] == 4 and again["workloads_added"] == 0


def test_import_hooks_and_flops(store, ms_dir):
    calls = []

    def describe(key, mod_b64):
        calls.append(key)
        return {"name": f"matmul_{key[:4]}", "shapes": {"M": 64}, "flops": 2 * 64 ** 3}

    store.import_metaschedule(ms_dir, hardware=MS_HW, target_fn=lambda t: "canonical:" + t["kind"], describe=describe)
    assert sorted(calls) == sorted(["9593177933350849261", "11208504982831217585"])
    r = store.records(order="id")[0]
    assert r.target == "canonical:llvm"
    assert r.gflops == pytest.approx(2 * 64 ** 3 / 0.002 / 1e9)
    assert store.workload("9593177933350849261").name == "matmul_9593"


def test_export_round_trip(store, ms_dir, tmp_path):
    store.import_metaschedule(ms_dir, hardware=MS_HW)
    out = tmp_path / "exported"
    summary = store.export_metaschedule(out)
    assert summary == {"dir": str(out), "workloads": 2, "records": 4, "skipped_no_trace": 0, "skipped_no_module": 0}
    lines = [json.loads(line) for line in (out / "database_tuning_record.json").read_text().splitlines()]
    originals = [json.loads(line) for line in (ms_dir / "database_tuning_record.json").read_text().splitlines()]
    assert lines == originals  # the same records, byte-for-byte the same JSON values
    assert (out / "database_workload.json").read_text() == (ms_dir / "database_workload.json").read_text()
    with pytest.raises(StoreError, match="already holds"):
        store.export_metaschedule(out)
    assert store.export_metaschedule(out, overwrite=True)["records"] == 4
    with Store(tmp_path / "fresh.db") as fresh:
        assert fresh.import_metaschedule(out, hardware=MS_HW)["records_added"] == 4
        assert [r.trace for r in fresh.records(order="id")] == [r.trace for r in store.records(order="id")]


def test_export_filters_and_skips(store, tmp_path):
    store.add_workload(Workload(key="1", name="with_module", mod_b64="bW9k"))
    store.add_workload(Workload(key="2", name="no_module"))
    base = dict(source="manual", status="ok", steps=[], latencies=[1e-3], median_s=1e-3, gflops=None, environment={})
    store.add_records([
        Record(workload_key="1", target='{"kind": "llvm"}', hardware=MS_HW, trace=MS_TRACE, **base),
        Record(workload_key="1", target='{"kind": "llvm"}', hardware="elsewhere", trace=MS_TRACE, **base),
        Record(workload_key="1", target='{"kind": "llvm"}', hardware=MS_HW, trace=None, **base),
        Record(workload_key="2", target='{"kind": "llvm"}', hardware=MS_HW, trace=MS_TRACE, **base),
    ])
    summary = store.export_metaschedule(tmp_path / "out", hardware=MS_HW)
    assert (summary["records"], summary["skipped_no_trace"], summary["skipped_no_module"]) == (1, 1, 1)


@pytest.mark.parametrize("which, line, bad", [
    ("database_workload.json", 2, "not json at all"),
    ("database_workload.json", 1, '["not-digits", "abc"]'),
    ("database_tuning_record.json", 3, '[7, [[[], []], [0.1], {"kind": "llvm"}, null]]'),  # no workload 7
    ("database_tuning_record.json", 2, '[0, [[[], []], ["fast"], {"kind": "llvm"}, null]]'),
    ("database_tuning_record.json", 4, '[0, [[[], []], [0.1], {"no": "kind"}, null]]'),
    ("database_tuning_record.json", 1, '[0, [[[], []], [0.1]]]'),
])
def test_malformed_line_names_file_and_line_and_imports_nothing(store, ms_dir, which, line, bad):
    path = ms_dir / which
    lines = path.read_text().splitlines()
    lines[line - 1] = bad
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ImportFormatError) as err:
        store.import_metaschedule(ms_dir, hardware=MS_HW)
    assert str(path) in str(err.value) and f"line {line}" in str(err.value)
    assert store.count() == 0 and store.workloads() == []


def test_import_of_a_folder_without_files(store, tmp_path):
    with pytest.raises(ImportFormatError, match="database_workload.json"):
        store.import_metaschedule(tmp_path, hardware=MS_HW)


def _fill(store, key, hardware, medians, created_day):
    store.add_workload(Workload(key=key, name=f"w{key}", flops=10 ** 9, mod_b64="bW9k"))
    return store.add_records([Record(workload_key=key, target='{"kind": "llvm"}', hardware=hardware, source="search",
                                     status="ok", steps=[], trace=matmul_trace([int(m * 1e4), 1]), latencies=[m],
                                     median_s=m, gflops=None, environment={},
                                     created=f"2025-01-{created_day:02d}T00:00:00+00:00")
                              for m in medians])


def test_merge_without_duplicates(tmp_path):
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b:
        _fill(a, "1", "host-a", [1e-3, 2e-3], 1)
        _fill(b, "1", "host-b", [0.5e-3], 2)
        _fill(b, "2", "host-b", [3e-3], 3)
        job = b.create_job("search", {})
        b.add_record(Record(workload_key="2", target='{"kind": "llvm"}', hardware="host-b", source="search",
                            status="ok", steps=[], trace=None, latencies=[4e-3], median_s=4e-3, gflops=None,
                            environment={}, job_id=job.id))
        summary = a.merge(b.path)
        assert summary["workloads_added"] == 1 and summary["workloads_present"] == 1
        assert summary["records_added"] == 3 and summary["records_skipped"] == 0
        assert a.count() == 5
        assert a.count(job_id=job.id) == 0  # job ids are local to their database
        best = {(r.workload_key, r.hardware): r.median_s for r in a.best()}
        assert best == {("1", "host-a"): 1e-3, ("1", "host-b"): 0.5e-3, ("2", "host-b"): 3e-3}
        again = a.merge(b.path)
        assert again["records_added"] == 0 and again["records_skipped"] == 3
        back = b.merge(a.path)  # b gets a's two records, and nothing of its own twice
        assert back["records_added"] == 2 and b.count() == 5
        with pytest.raises(StoreError, match="itself"):
            a.merge(a.path)


def test_merge_refuses_a_bad_other(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"nope" * 100)
    with Store(tmp_path / "a.db") as a:
        with pytest.raises(StoreError, match="not a SQLite database"):
            a.merge(bad)
        with pytest.raises(StoreError, match="no schedx database"):
            a.merge(tmp_path / "missing.db")
