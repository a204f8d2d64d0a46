"""Benchmark: the leaderboard store at 100 000 records.

Prints figures measured in this run (median of repeats; the machines here are shared and noisy):
  1. best record per workload (target and hardware), whole table and one machine (target <= 100 ms);
  2. one workload's history, all of it and one target and machine (target <= 50 ms);
  3. importing a generated 10 000-record MetaSchedule JSON database (target <= 10 s);
  4. for scale: writing the 100k records (one transaction) and the file size.

Records carry realistic payloads: a MetaSchedule-like trace of ~30 instructions, a few steps and
an environment dict. Run: ``python -m benchmarks.bench_store [--records N] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from store import Record, Store, Workload

TARGETS = ['{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}', '{"kind": "llvm", "num-cores": 2}']
MACHINES = ["x86_64/AMD EPYC 9B14/avx512/2c", "aarch64/Neoverse-V2/neon/64c"]
SOURCES = ["search"] * 8 + ["manual", "import"]
ENV = {"cpu_model": "AMD EPYC 9B14", "cpu_flags": ["avx512f", "avx2", "fma"], "cores": 2, "threads": 2,
       "os": "Linux 6.1", "python": "3.11.9", "tvm_version": "0.27.0", "peak_gflops": 200.0, "peak_gbps": 40.0}


def fake_trace(rng: random.Random) -> list:
    insts = [["GetSBlock", [], ["C", "main"], ["b0"]], ["GetLoops", ["b0"], [], ["l1", "l2", "l3"]]]
    decisions = []
    for i in range(28):
        if i % 4 == 0:
            decisions.append([len(insts), [rng.choice([1, 2, 4, 8]), rng.choice([4, 8, 16]), rng.choice([1, 2, 4]),
                                           rng.choice([8, 16])]])
            insts.append(["SamplePerfectTile", [f"l{i % 3 + 1}"], [4, 64], [f"v{i}a", f"v{i}b", f"v{i}c", f"v{i}d"]])
        else:
            insts.append(["Split", [f"l{i}", "None", f"v{i}"], [True, False], [f"l{i}x", f"l{i}y"]])
    return [insts, decisions]


def make_records(n: int, workloads: list[str], rng: random.Random) -> list[Record]:
    records = []
    start = time.time() - 90 * 86400
    for i in range(n):
        median = rng.uniform(1e-4, 1e-2)
        created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start + i * 60)) + f".{i % 1000000:06d}+00:00"
        records.append(Record(
            workload_key=workloads[i % len(workloads)], target=TARGETS[(i // 3) % 2], hardware=MACHINES[(i // 7) % 2],
            source=rng.choice(SOURCES), status="ok" if rng.random() > 0.05 else "run_error",
            steps=[{"primitive": "split", "args": {"loop": "i", "factors": [None, 8]}}],
            trace=fake_trace(rng), latencies=[median * rng.uniform(0.98, 1.02) for _ in range(3)], median_s=median,
            gflops=None, environment=ENV, created=created,
            args_info=[["TENSOR", "float32", [512, 512]]] * 3))
    return records


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def bench_queries(folder: Path, n: int, repeats: int) -> None:
    rng = random.Random(0)
    keys = [str(10 ** 18 + 7919 * i) for i in range(200)]
    path = folder / "bench.db"
    with Store(path) as store:
        for k in keys:
            store.add_workload(Workload(key=k, name=f"kernel_{k[-6:]}", flops=2 * 512 ** 3, mod_b64="x" * 2000))
        records = make_records(n, keys, rng)
        t = time.perf_counter()
        store.add_records(records)
        write_s = time.perf_counter() - t
    size = path.stat().st_size + (Path(f"{path}-wal").stat().st_size if Path(f"{path}-wal").exists() else 0)
    print(f"{n} records, {len(keys)} workloads x {len(TARGETS)} targets x {len(MACHINES)} machines:")
    print(f"  write all (one transaction)   {write_s:8.2f} s   file {size / 2 ** 20:.0f} MiB")
    with Store(path) as store:
        store.best()  # warm the page cache like a running UI would
        best_all, rows = timed(lambda: store.best(), repeats)
        best_one, rows_one = timed(lambda: store.best(hardware=MACHINES[0], target=TARGETS[0]), repeats)
        hist_all, hist = timed(lambda: store.history(keys[17]), repeats)
        hist_one, hist1 = timed(lambda: store.history(keys[17], target=TARGETS[0], hardware=MACHINES[0]), repeats)
    print(f"  best per workload, all        {best_all * 1e3:8.1f} ms   ({len(rows)} rows)   target <= 100 ms")
    print(f"  best per workload, 1 machine  {best_one * 1e3:8.1f} ms   ({len(rows_one)} rows)   target <= 100 ms")
    print(f"  history of one workload, all  {hist_all * 1e3:8.1f} ms   ({len(hist)} records)   target <= 50 ms")
    print(f"  history, 1 target and machine {hist_one * 1e3:8.1f} ms   ({len(hist1)} records)   target <= 50 ms")


def write_metaschedule(folder: Path, n: int, rng: random.Random) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = {"kind": "llvm", "tag": "", "keys": ["cpu"], "num-cores": 2, "mcpu": "znver4"}
    keys = [str(10 ** 19 + 104729 * i) for i in range(10)]
    (folder / "database_workload.json").write_text("".join(json.dumps([k, "Zm9v" * 3000]) + "\n" for k in keys))
    with open(folder / "database_tuning_record.json", "w") as f:
        for i in range(n):
            run_secs = [rng.uniform(1e-4, 1e-2) for _ in range(3)] if rng.random() > 0.05 else [1e10]
            f.write(json.dumps([i % len(keys), [fake_trace(rng), run_secs, target,
                                                [["TENSOR", "float32", [512, 512]]] * 3]]) + "\n")
    return folder


def bench_import(folder: Path, n: int) -> None:
    ms_dir = write_metaschedule(folder / "ms", n, random.Random(1))
    with Store(folder / "import.db") as store:
        t = time.perf_counter()
        summary = store.import_metaschedule(ms_dir, hardware=MACHINES[0])
        plain = time.perf_counter() - t
    print(f"import of a {n}-record MetaSchedule JSON database:")
    print(f"  store only                    {plain:8.2f} s   ({summary['records_added']} added)   target <= 10 s")
    try:
        from explorer.target import canonical_target
        from search.records import describe_b64
    except ImportError:
        return
    with Store(folder / "import_cli.db") as store:
        t = time.perf_counter()
        store.import_metaschedule(ms_dir, hardware=MACHINES[0], target_fn=canonical_target, describe=describe_b64)
        full = time.perf_counter() - t
    print(f"  as `schedx db import` does    {full:8.2f} s   (TVM target canonicalisation, module reading)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--import-records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="schedx-bench-") as tmp:
        bench_queries(Path(tmp), args.records, args.repeats)
        bench_import(Path(tmp), args.import_records)


if __name__ == "__main__":
    main()
