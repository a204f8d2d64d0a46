"""MetaSchedule's database contract, one suite over every backend (as Optuna tests its storages).

The rules are MetaSchedule's own (what its ``MemoryDatabase`` and ``JSONDatabase`` do, and what
TVM's database tests check): a committed record comes back equal; ``get_top_k`` ranks by the
MEAN of ``run_secs``, skips records without a valid run and counts the failure marker 1e10 in the
mean; ``query`` picks the best record; workloads are found by structural equality.
``StoreDatabase`` must pass exactly what MetaSchedule's databases pass; where schedx ranks
differently on purpose (the leaderboard, by median) it does so outside this interface.
"""

from __future__ import annotations

import pytest

tvm = pytest.importorskip("tvm")

import tvm_ffi  # noqa: E402
from tvm import te  # noqa: E402
from tvm.s_tir import meta_schedule as ms  # noqa: E402
from tvm.s_tir.meta_schedule.arg_info import ArgInfo  # noqa: E402
from tvm.s_tir.meta_schedule.database import TuningRecord  # noqa: E402
from tvm.target import Target  # noqa: E402

from explorer.workload import as_task_module  # noqa: E402
from search.ms_database import StoreDatabase  # noqa: E402
from store import Store  # noqa: E402

HW = "conformance/x86_64/2c"
FAILED = 1e10  # MetaSchedule's run time of a candidate that failed
BACKENDS = ("memory", "json", "store")


def _matmul(n: int, relu: bool = False):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    if relu:
        d = te.compute((n, n), lambda i, j: te.max(c[i, j], 0.0), name="D")
        return as_task_module(te.create_prim_func([a, b, d]))
    return as_task_module(te.create_prim_func([a, b, c]))


MOD = _matmul(32)
OTHER = _matmul(16, relu=True)
TARGET = Target({"kind": "llvm", "num-cores": 2})


def _trace(mod=MOD, factor: int | None = 8):
    """A trace that splits and reorders the matmul (``factor=None``: one that only looks the block
    up, leaving the loops as they are)."""
    sch = tvm.s_tir.Schedule(mod)
    block = sch.get_sblock("C")
    if factor is not None:
        i, j, k = sch.get_loops(block)
        i0, i1 = sch.split(i, [None, factor])
        k0, k1 = sch.split(k, [None, 4])
        sch.reorder(i0, k0, i1, j, k1)
    return sch


class Backend:
    """One kind of database, and how to open it again over the same storage."""

    def __init__(self, kind: str, folder) -> None:
        self.kind, self.folder = kind, folder
        self.db = self.reopen()

    def reopen(self):
        if self.kind == "memory":
            return ms.database.MemoryDatabase()
        if self.kind == "json":
            return ms.database.JSONDatabase(work_dir=str(self.folder))
        return StoreDatabase(Store(self.folder / "schedx.db"), hardware=HW)


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    return Backend(request.param, tmp_path)


def _record(db, run_secs, *, mod=MOD, sch=None) -> TuningRecord:
    sch = sch if sch is not None else _trace(mod)
    return TuningRecord(sch.trace, db.commit_workload(mod), run_secs, TARGET,
                        ArgInfo.from_prim_func(mod["main"]))


def _commit(db, run_secs, **kw) -> TuningRecord:
    record = _record(db, run_secs, **kw)
    db.commit_tuning_record(record)
    return record


def _secs(record: TuningRecord) -> list[float] | None:
    return None if record.run_secs is None else [float(v.value) for v in record.run_secs]


def assert_same_record(got: TuningRecord, want: TuningRecord) -> None:
    assert str(got.trace) == str(want.trace)
    assert _secs(got) == _secs(want)
    assert str(got.target) == str(want.target)
    assert tvm_ffi.structural_equal(got.workload.mod, want.workload.mod)
    assert [str(a.as_json()) for a in got.args_info] == [str(a.as_json()) for a in want.args_info]


def test_a_committed_record_comes_back_equal(backend):
    want = _commit(backend.db, [1.5, 2.5, 1.8])
    (got,) = backend.db.get_top_k(backend.db.commit_workload(MOD), 3)
    assert_same_record(got, want)
    (got,) = backend.db.get_all_tuning_records()
    assert_same_record(got, want)


def test_has_workload_and_len(backend):
    db = backend.db
    assert not db.has_workload(MOD) and len(db) == 0
    _commit(db, [1.0])
    _commit(db, [2.0])
    assert db.has_workload(MOD) and not db.has_workload(OTHER)
    assert len(db) == 2


def test_committing_a_workload_twice_gives_one_workload(backend):
    first = backend.db.commit_workload(MOD)
    again = backend.db.commit_workload(_matmul(32))  # a structurally equal module built again
    assert tvm_ffi.structural_equal(first.mod, again.mod)
    _commit(backend.db, [1.0])
    assert len(backend.db.get_top_k(again, 5)) == 1


def test_top_k_of_another_workload_is_empty(backend):
    _commit(backend.db, [1.0, 2.0])
    assert backend.db.get_top_k(backend.db.commit_workload(OTHER), 3) == []


def test_top_k_ranks_by_the_mean_run_time(backend):
    """[1.1, 1.2, 600] has the lowest median but a mean of 200: it ranks after [1, 2, 3]."""
    for secs in ([7.0, 8.0, 9.0], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [1.1, 1.2, 600.0], [1.0, 100.0, 6.0],
                 [4.0, 9.0, 8.0]):
        _commit(backend.db, secs)
    top = backend.db.get_top_k(backend.db.commit_workload(MOD), 3)
    assert [_secs(r) for r in top] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [4.0, 9.0, 8.0]]


@pytest.mark.parametrize("k, expected", [
    (0, []),
    (1, [[0.0, 2.0]]),
    (4, [[0.0, 2.0], [2.0], [1.5, 4.5], [3.0, FAILED]]),
    (5, [[0.0, 2.0], [2.0], [1.5, 4.5], [3.0, FAILED]]),
])
def test_top_k_skips_records_without_a_valid_run(backend, k, expected):
    """No run time, an empty list or only failures: never in the top k. One failure among valid
    runs: ranked by the mean with the failure marker in it, and returned as it was committed."""
    for secs in ([1.5, 4.5], [], [0.0, 2.0], None, [2.0], [3.0, FAILED], [FAILED]):
        _commit(backend.db, secs)
    assert [_secs(r) for r in backend.db.get_top_k(backend.db.commit_workload(MOD), k)] == expected


@pytest.mark.parametrize("run_secs", [[3.0, FAILED], [FAILED], [], [0.25, 0.5, 0.125]])
def test_run_secs_round_trip_exactly(backend, run_secs):
    want = _commit(backend.db, run_secs)
    (got,) = backend.db.get_all_tuning_records()
    assert _secs(got) == run_secs
    assert_same_record(got, want)


def test_a_reopened_database_has_the_same_records(backend):
    if backend.kind == "memory":
        pytest.skip("a MemoryDatabase keeps nothing")
    for secs in ([7.0, 8.0, 9.0], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]):
        _commit(backend.db, secs)
    again = backend.reopen()
    assert len(again) == 3 and again.has_workload(MOD)
    top = again.get_top_k(again.commit_workload(MOD), 2)
    assert [_secs(r) for r in top] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def test_query_returns_the_best_record_schedule_and_module(backend):
    db = backend.db
    scheduled = _trace()
    _commit(db, [1.0], sch=scheduled)
    record = db.query(MOD, TARGET, workload_name="main", kind="record")
    assert record is not None and _secs(record) == [1.0]
    assert tvm_ffi.structural_equal(db.query(MOD, TARGET, workload_name="main", kind="schedule").mod, scheduled.mod)
    assert tvm_ffi.structural_equal(db.query(MOD, TARGET, workload_name="main", kind="ir_module"), scheduled.mod)
    _commit(db, [0.2], sch=_trace(factor=None))  # loops left as they were, faster: now the best
    assert _secs(db.query(MOD, TARGET, workload_name="main", kind="record")) == [0.2]
    assert tvm_ffi.structural_equal(db.query(MOD, TARGET, workload_name="main", kind="ir_module"), MOD)
    assert db.query(OTHER, TARGET, workload_name="main", kind="record") is None


def test_a_trace_without_instructions(backend):
    """A record whose trace is empty is the unscheduled function, timed. MetaSchedule's C++
    databases never rank it; a Python database (``PyDatabase``, which ``StoreDatabase`` is) ranks it
    like any other, as TVM's own test of one expects: the fastest record, even with no schedule,
    is what ``query`` gives, and compiling with it leaves the function as it was. Either way it is
    a record (len, get_all_tuning_records)."""
    _commit(backend.db, [1.0])
    _commit(backend.db, [0.2], sch=tvm.s_tir.Schedule(MOD))
    top = [_secs(r) for r in backend.db.get_top_k(backend.db.commit_workload(MOD), 5)]
    if backend.kind == "store":
        assert top == [[0.2], [1.0]]
        assert _secs(backend.db.query(MOD, TARGET, workload_name="main", kind="record")) == [0.2]
        assert tvm_ffi.structural_equal(backend.db.query(MOD, TARGET, workload_name="main", kind="ir_module"), MOD)
        assert tvm_ffi.structural_equal(backend.db.query(MOD, TARGET, workload_name="main", kind="schedule").mod, MOD)
    else:
        assert top == [[1.0]]
        assert _secs(backend.db.query_tuning_record(MOD, TARGET, "main")) == [1.0]
    assert len(backend.db) == 2 and len(backend.db.get_all_tuning_records()) == 2
    if backend.kind != "memory":  # the same after reopening the file
        reopened = backend.reopen()
        assert len(reopened) == 2 and len(reopened.get_top_k(reopened.commit_workload(MOD), 5)) == len(top)


def test_query_follows_the_mean_too(backend):
    _commit(backend.db, [1.1, 1.2, 600.0])
    _commit(backend.db, [1.0, 2.0, 3.0])
    assert _secs(backend.db.query_tuning_record(MOD, TARGET, "main")) == [1.0, 2.0, 3.0]


def test_union_with_metaschedules_own_database(backend):
    """UnionDatabase takes the best of all; OrderedUnionDatabase the first that has one."""
    other = ms.database.MemoryDatabase()
    _commit(backend.db, [1.0])
    _commit(other, [0.5])

    def best(db) -> list[float]:
        return _secs(db.query_tuning_record(MOD, TARGET, "main"))

    assert best(ms.database.UnionDatabase(backend.db, other)) == [0.5]
    assert best(ms.database.OrderedUnionDatabase(backend.db, other)) == [1.0]
    assert best(ms.database.OrderedUnionDatabase(other, backend.db)) == [0.5]


def test_dump_pruned_keeps_the_best_record_per_workload(backend):
    for secs in ([3.0], [1.1, 1.2, 600.0], [2.0, 2.0]):
        _commit(backend.db, secs)
    _commit(backend.db, [5.0], mod=OTHER, sch=_trace(OTHER))
    pruned = ms.database.MemoryDatabase()
    backend.db.dump_pruned(pruned)
    assert len(pruned) == 2
    assert _secs(pruned.get_top_k(pruned.commit_workload(MOD), 5)[0]) == [2.0, 2.0]


def test_the_database_is_current_inside_with(backend):
    """What ``compile_relax``/``tune_relax`` pick up when given no database."""
    with backend.db:
        assert ms.database.Database.current().same_as(backend.db)
    assert ms.database.Database.current() is None
