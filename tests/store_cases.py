"""Databases written by hand for the store's tests: a small schedx leaderboard (:func:`fill_demo`), a
database of many records and the damage a failing disk does to it (:func:`filled_store`,
:func:`damage_pages`), and MetaSchedule's JSON database files (:func:`write_ms`: a 64x64 matmul's
trace and tuning records). Shared by the store, CLI and page tests."""

from __future__ import annotations

import json
import random
from pathlib import Path

from explorer.target.environment import hardware_fingerprint
from store import Record, Store, Workload

SQLITE_PAGE = 4096
# MetaSchedule's side: a 64x64 matmul tuned on a Zen 4 machine
MS_HW = "x86_64/AMD EPYC/avx512/2c"
MS_TARGET = {"kind": "llvm", "tag": "", "keys": ["cpu"], "num-cores": 2, "mcpu": "znver4"}
MS_TRACE = [[["GetSBlock", [], ["C", "main"], ["b0"]], ["GetLoops", ["b0"], [], ["l1", "l2", "l3"]],
             ["SamplePerfectTile", ["l1"], [2, 16], ["v4", "v5"]]], [[2, [16, 4]]]]
MS_ARGS = [["TENSOR", "float32", [64, 64]], ["TENSOR", "float32", [64, 64]], ["TENSOR", "float32", [64, 64]]]


def matmul_trace(decision):
    """The 64x64 matmul's trace (``MS_TRACE``) with ``decision`` for its tile."""
    return [MS_TRACE[0], [[2, decision]]]


def write_ms(folder, workloads, records):
    """Write a MetaSchedule JSON database: one JSON value per line, as JSONDatabase does."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "database_workload.json").write_text("".join(json.dumps(w) + "\n" for w in workloads))
    (folder / "database_tuning_record.json").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


# the demo leaderboard's records
DEMO_TARGET = '{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}'
DEMO_TRACE = [[["GetSBlock", [], ["C", "main"], ["b0"]], ["SamplePerfectTile", ["l1"], [2, 16], ["v2", "v3"]]],
              [[1, [16, 4]]]]
DEMO_STEPS = [{"primitive": "split", "args": {"loop": "i", "factors": [None, 4]}},
              {"primitive": "parallel", "args": {"loop": "i_0"}}]


def fill_demo(path: Path, hardware: str | None = None) -> list[int]:
    """A small leaderboard: two kernels, manual and search records, one failure, one other machine."""
    hw = hardware or hardware_fingerprint()
    env = {"hardware": hw, "peak_gflops": 200.0, "peak_gbps": 40.0, "threads": 2}
    with Store(path) as store:
        store.add_workload(Workload(key="1001", name="matmul_512x512x512_float32", source="builtin:matmul",
                                    shapes={"M": 512, "N": 512, "K": 512, "bytes": 3 * 512 * 512 * 4},
                                    flops=2 * 512 ** 3))
        store.add_workload(Workload(key="2002", name="conv2d_1x64x56x56", source="builtin:conv2d",
                                    shapes={"bytes": 2_000_000}, flops=231_211_008))

        def rec(key, median, source, day, **kw):
            base = dict(workload_key=key, target=DEMO_TARGET, hardware=hw, source=source, status="ok",
                        steps=DEMO_STEPS if source == "manual" else [],
                        trace=DEMO_TRACE if source == "search" else None,
                        latencies=[median] * 3 if median else [], median_s=median, gflops=None, environment=env,
                        created=f"2025-05-{day:02d}T10:00:00+00:00")
            return Record(**{**base, **kw})

        return store.add_records([
            rec("1001", 0.25, "manual", 1),
            rec("1001", 0.0025, "manual", 2, verified=True, max_error=1e-5),
            rec("1001", 0.0015, "search", 3, trace=[DEMO_TRACE[0], [[1, [8, 8]]]]),
            rec("1001", None, "search", 4, status="build_error", error="LocalBuilder: Timeout"),
            rec("2002", 0.004, "manual", 5),
            rec("2002", 0.003, "search", 6),
            rec("2002", 0.001, "import", 7, hardware="aarch64/elsewhere/neon/64c", environment={}),
        ])


def filled_store(path: Path, n: int) -> Path:
    """A schedx database at ``path`` of one workload and ``n`` records, checkpointed whole into the file."""
    with Store(path) as store:
        store.add_workload(Workload(key="1", name="matmul", flops=2 * 64 ** 3, mod_b64="bW9k"))
        store.add_records([Record(workload_key="1", target='{"kind": "llvm"}', hardware="hw", source="search",
                                  status="ok", steps=[{"primitive": "split", "args": {"i": i}}],
                                  trace=[[["GetSBlock", [], ["C", "main"], ["b0"]]], []],
                                  latencies=[1e-3 + i * 1e-7], median_s=None, gflops=None,
                                  environment={"note": "x" * 1000}) for i in range(n)])
    assert not Path(f"{path}-wal").exists()  # closing checkpointed everything into the file
    return path


def damage_pages(path: Path, seed: int = 0) -> None:
    """Overwrite a run of pages in the middle of the file (the header and schema stay intact)."""
    size = path.stat().st_size
    start = (size // 3) // SQLITE_PAGE * SQLITE_PAGE
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(random.Random(seed).randbytes(size // 3 // SQLITE_PAGE * SQLITE_PAGE))


__all__ = ["DEMO_STEPS", "DEMO_TARGET", "DEMO_TRACE", "MS_ARGS", "MS_HW", "MS_TARGET", "MS_TRACE", "SQLITE_PAGE",
           "damage_pages", "fill_demo", "filled_store", "matmul_trace", "write_ms"]
