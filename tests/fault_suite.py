"""The fault-injection suite (``make test-faults``): real ``schedx`` processes killed, starved and
fuzzed, then the database and the bundles checked.

Probes: kill -9 at random moments of a search (each moment after some batches, the last ones
inside a WAL write), of ``db import`` and ``db merge`` (inside their transaction: a write held by
``strace -e inject``) and of ``export`` (between writing and publishing, held by a fault point,
and at a random moment); a full disk (a small tmpfs, when this machine lets root mount one) under
a search and an export; two searches writing one database at once; signals while a search starts
(foreground and background); a foreign page's handshake with the UI; and the CLI fuzz
(``tests/test_cli_fuzz.py``, ``tests/test_store_cli_fuzz.py``, every example). Each probe prints one line; the last line
sums them up: probes, held, lost, duplicates, tracebacks, hangs. Exit status 1 when a probe did
not hold.

    python -m tests.fault_suite [--seed N] [--kills K] [--keep DIR] [--repeats R] [--only concurrent|signals]

A record is *lost* when it was committed before a kill and is gone after; a *duplicate* is a
candidate measured twice for the same workload, target and machine; a *hang* is a process that
outlived its time limit.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from explorer.processes import process_alive
from tests import fault_bundles

ROOT = Path(__file__).resolve().parent.parent
SCHEDX = [sys.executable, "-m", "app.cli"]
KERNEL = "matmul:M=64,N=64,K=64"
SEARCH = ["--per-batch", "4", "--population", "32", "--generations", "1", "--cost-model", "random"]
LIMIT_S = 300.0  # any one command; past it, a hang


@dataclass
class Probe:
    name: str
    held: bool = True
    lost: int = 0
    duplicates: int = 0
    tracebacks: int = 0
    hangs: int = 0
    note: str = ""

    def fail(self, why: str) -> None:
        self.held = False
        self.note = (self.note + "; " if self.note else "") + why


@dataclass
class Ran:
    rc: int | None
    out: str
    err: str
    hung: bool


def schedx(args: list[str], *, env: dict | None = None, timeout: float = LIMIT_S, cwd: Path = ROOT) -> Ran:
    proc = subprocess.Popen(SCHEDX + args, cwd=cwd, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return Ran(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), False)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return Ran(None, out.decode(errors="replace"), err.decode(errors="replace"), True)


def start(args: list[str], *, env: dict | None = None, wrap: list[str] | None = None) -> subprocess.Popen:
    return subprocess.Popen((wrap or []) + SCHEDX + args, cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def note_run(probe: Probe, ran: Ran, *, ok_codes=(0,), what: str = "") -> None:
    if ran.hung:
        probe.hangs += 1
        probe.fail(f"{what} hung")
    if "Traceback" in ran.err or "Segmentation" in ran.err:
        probe.tracebacks += 1
        probe.fail(f"{what} printed a traceback")
    if not ran.hung and ran.rc not in ok_codes:
        probe.fail(f"{what} exited {ran.rc}: {ran.err.strip().splitlines()[-1:] or ''}")


# what is in a database, read without writing to it
def _rows(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # no tables yet
        return []
    finally:
        conn.close()


def record_ids(db: Path) -> set[int]:
    return {r[0] for r in _rows(db, "SELECT id FROM records")}


def duplicates(db: Path) -> int:
    """Candidates measured twice by the search (a confirmation round's timings of the bests, marked
    ``environment.confirmation``, are new measurements on purpose)."""
    return sum(n - 1 for (n,) in _rows(db, "SELECT COUNT(*) FROM records WHERE candidate IS NOT NULL AND NOT "
                                           "(json_valid(environment) AND json_extract(environment, '$.confirmation')"
                                           " IS NOT NULL) GROUP BY workload_key, target, hardware, candidate "
                                           "HAVING COUNT(*) > 1"))


def intact(db: Path) -> bool:
    return _rows(db, "PRAGMA integrity_check") == [("ok",)]


def check_db(probe: Probe, db: Path, before: set[int]) -> None:
    """After a kill: the file opens whole, nothing committed before is gone, nothing twice."""
    from store import Store

    Store(db)  # recovery (the WAL replayed) as the next command would do it
    if not intact(db):
        probe.fail("integrity check failed")
    probe.lost += len(before - record_ids(db))
    probe.duplicates += duplicates(db)
    if probe.lost or probe.duplicates:
        probe.fail(f"{probe.lost} lost, {probe.duplicates} duplicated")


def wait_until(test: Callable[[], bool], timeout: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if test():
            return True
        if proc is not None and proc.poll() is not None:
            return test()
        time.sleep(0.1)
    return False


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


# the probes
def kills_during_a_search(work: Path, rng: random.Random, kills: int) -> list[Probe]:
    """kill -9 after a few batches, at a random moment (some land inside a write), then resume."""
    db = work / "search.db"
    probes = []
    for k in range(kills):
        probe = Probe(f"kill -9 during tune ({k + 1}/{kills})")
        proc = start(["tune", KERNEL, "--trials", "400", "--db", str(db)] + SEARCH)
        have = len(record_ids(db))
        if not wait_until(lambda: len(record_ids(db)) >= have + 4, 180, proc):
            probe.fail("no batch within 180 s")
        time.sleep(rng.uniform(0.0, 2.0))
        before = record_ids(db)
        kill_group(proc)
        check_db(probe, db, before)
        probe.note = probe.note or f"killed with {len(before)} records"
        probes.append(probe)
    probe = Probe("the killed search resumes")
    before = record_ids(db)
    ran = schedx(["tune", KERNEL, "--trials", "8", "--db", str(db)] + SEARCH)
    note_run(probe, ran, what="tune")
    check_db(probe, db, before)
    probe.note = probe.note or f"{len(record_ids(db)) - len(before)} new records, none measured twice"
    return probes + [probe]


def _held_write(args: list[str], nth: int) -> tuple[subprocess.Popen, Path]:
    """``schedx ARGS`` under strace, its ``nth`` pwrite64 (a page of the WAL) held for 30 s."""
    log = Path(tempfile.mkstemp(prefix="schedx-strace-")[1])
    wrap = ["strace", "-f", "-qq", "-o", str(log), "-e", "trace=pwrite64",
            "-e", f"inject=pwrite64:delay_enter=30000000:when={nth}"]
    return start(args, wrap=wrap), log


def kill_inside_a_transaction(work: Path, rng: random.Random, name: str, args: list[str], db: Path,
                              expected: Callable[[], int]) -> Probe:
    """kill -9 while ``schedx ARGS`` is inside its one write transaction (a WAL write held by
    strace), then the same command again: all of it lands once, or none of it."""
    probe = Probe(f"kill -9 inside {name}'s transaction")
    if shutil.which("strace") is None:
        probe.note = "skipped: no strace"
        return probe
    before = record_ids(db)
    proc, log = _held_write(args, rng.randint(2, 6))
    held = wait_until(lambda: log.read_text(errors="replace").count("pwrite64(") >= 2, 120, proc)
    time.sleep(0.5)
    kill_group(proc)
    log.unlink(missing_ok=True)
    if not held:
        probe.note = "the command ended before its write was held"
    after = record_ids(db)
    if after != before and len(after - before) != expected():
        probe.fail(f"a partial write: {len(after - before)} of {expected()} records")
    check_db(probe, db, before)
    ran = schedx(args)
    note_run(probe, ran, what=name)
    got = len(record_ids(db) - before)
    probe.duplicates += duplicates(db)
    if got != expected():
        probe.lost += max(0, expected() - got)
        probe.fail(f"{got} of {expected()} records after running it again")
    probe.note = probe.note or f"{'rolled back' if after == before else 'committed whole'}, then {got} records once"
    return probe


def kills_during_an_export(work: Path, rng: random.Random) -> list[Probe]:
    from export import read_manifest

    out = work / "bundle"
    probes = []
    ran = schedx(["export", "matmul:M=16,N=16,K=16", "-o", str(out), "--no-db"])
    first = Probe("export, then kill -9 between writing and publishing")
    note_run(first, ran, what="export")
    manifest = (out / "manifest.json").read_bytes() if (out / "manifest.json").exists() else b""
    mark = work / "held"
    proc = start(["export", "matmul:M=16,N=16,K=16", "-o", str(out), "--no-db"],
                 env={"SCHEDX_FAULT_HOLD": "export.written:600", "SCHEDX_FAULT_MARK": str(mark)})
    if not wait_until(mark.exists, 180, proc):
        first.fail("the export never reached its fault point")
    kill_group(proc)
    if not manifest or (out / "manifest.json").read_bytes() != manifest:
        first.lost += 1
        first.fail("the earlier bundle changed")
    probes.append(first)
    for k in range(2):
        probe = Probe(f"kill -9 at a random moment of an export ({k + 1}/2)")
        proc = start(["export", "matmul:M=16,N=16,K=16", "-o", str(out), "--no-db"])
        time.sleep(rng.uniform(1.0, 8.0))
        kill_group(proc)
        try:
            read_manifest(out)  # every file's hash
        except Exception as err:  # noqa: BLE001 - any failure is the probe's finding
            probe.lost += 1
            probe.fail(f"the bundle at {out.name} does not read: {err}")
        probes.append(probe)
    last = Probe("an export after the kills leaves no leftovers")
    note_run(last, schedx(["export", "matmul:M=16,N=16,K=16", "-o", str(out), "--no-db"]), what="export")
    left = [p.name for p in work.iterdir() if p.name.startswith(".bundle")]
    if left:
        last.fail(f"left behind: {left}")
    probes.append(last)
    return probes


def full_disk(work: Path, source_db: Path) -> list[Probe]:
    """A search and an export on a full disk (a 4 MB tmpfs): one line that says so, nothing lost."""
    probe_tune, probe_export = Probe("a search on a full disk"), Probe("an export onto a full disk")
    tiny = work / "tiny"
    tiny.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(tiny)],
                                                   capture_output=True).returncode == 0
    if not mounted:
        for p in (probe_tune, probe_export):
            p.note = "skipped: cannot mount a tmpfs here (needs root)"
        return [probe_tune, probe_export]
    try:
        db = tiny / "schedx.db"
        ran = schedx(["tune", KERNEL, "--trials", "4", "--db", str(db)] + SEARCH)  # the database exists
        before = record_ids(db)
        filler = tiny / "filler"
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        ran = schedx(["tune", KERNEL, "--trials", "64", "--db", str(db)] + SEARCH)
        note_run(probe_tune, ran, ok_codes=(1,), what="tune")
        if "full" not in ran.err:
            probe_tune.fail(f"the error does not say the disk is full: {ran.err.strip()[-200:]}")
        said = (ran.err.strip().splitlines() or [""])[-1][:70]
        ran = schedx(["export", "matmul:M=16,N=16,K=16", "-o", str(tiny / "out"), "--no-db"])
        note_run(probe_export, ran, ok_codes=(1,), what="export")
        if "space" not in ran.err and "full" not in ran.err:
            probe_export.fail(f"the error does not say the disk is full: {ran.err.strip()[-200:]}")
        left = [p.name for p in tiny.iterdir() if p.name not in ("schedx.db", "schedx.db-wal", "schedx.db-shm",
                                                                 "filler")]
        if left:
            probe_export.fail(f"left on the full disk: {left}")
        filler.unlink()
        check_db(probe_tune, db, before)
        probe_tune.note = probe_tune.note or f"{len(before)} records kept; said: {said}"
    finally:
        subprocess.run(["umount", "-l", str(tiny)], capture_output=True)
    return [probe_tune, probe_export]


CONCURRENT_REPEATS = 20  # two searches started together, this many times (issue 49: 2 of 4 had duplicates)


def concurrent_writers(work: Path, repeats: int = CONCURRENT_REPEATS) -> Probe:
    """Two small searches started together on one new database, ``repeats`` times: the default
    schedule, its variants (the default rules' other tiles) and a search, none measured twice."""
    probe = Probe(f"two searches writing one database at once ({repeats}x)")
    records = 0
    for k in range(repeats):
        db = work / f"shared-{k}.db"
        procs = [start(["tune", KERNEL, "--trials", "8", "--confirm-rounds", "0", "--db", str(db)] + SEARCH)
                 for _ in range(2)]
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=LIMIT_S)
                note_run(probe, Ran(proc.returncode, out.decode(), err.decode(), False), what="tune")
            except subprocess.TimeoutExpired:
                kill_group(proc)
                probe.hangs += 1
                probe.fail("a search hung")
        probe.duplicates += duplicates(db)
        records += len(record_ids(db))
    if probe.duplicates:
        probe.fail(f"{probe.duplicates} candidates measured twice")
    probe.note = probe.note or f"{records} records in {repeats} databases, none twice"
    return probe


def signals_at_start(work: Path) -> list[Probe]:
    from search.stopping import HARD_EXIT_S

    probes = []
    for name, extra, sig, code in (("SIGINT twice while tune starts", [], signal.SIGINT, 130),
                                   ("SIGTERM twice while a background job starts", ["--background"], signal.SIGTERM,
                                    143)):
        probe = Probe(name)
        db, mark = work / f"start-{code}.db", work / f"start-{code}.held"
        env = {"SCHEDX_FAULT_HOLD": "tune.start:600", "SCHEDX_FAULT_MARK": str(mark)}
        proc = start(["tune", KERNEL, "--trials", "8", "--db", str(db)] + extra, env=env)
        pid = proc.pid
        if extra:
            proc.communicate(timeout=120)
            if not wait_until(lambda: bool(_rows(db, "SELECT pid FROM jobs")), 60):
                probe.fail("no job row")
                probes.append(probe)
                continue
            pid = _rows(db, "SELECT pid FROM jobs ORDER BY id DESC LIMIT 1")[0][0]
        if not wait_until(mark.exists, 120):
            probe.fail("the search never reached its start")
        os.kill(pid, sig)
        time.sleep(1.0)
        os.kill(pid, sig)
        began = time.monotonic()
        gone = wait_until(lambda: not process_alive(pid), HARD_EXIT_S + 30)
        took = time.monotonic() - began  # (its pool workers, holding its stdout, follow within a second or two)
        if not gone:
            probe.hangs += 1
            probe.fail(f"still running {HARD_EXIT_S + 30:.0f} s after the second signal")
            os.kill(pid, signal.SIGKILL)
        if not extra:
            out, err = proc.communicate(timeout=30)
            note_run(probe, Ran(proc.returncode, out.decode(), err.decode(), False), ok_codes=(code,), what="tune")
        status = _rows(db, "SELECT status FROM jobs ORDER BY id DESC LIMIT 1")
        if status and status[0][0] != "stopped":
            probe.fail(f"the job row says {status[0][0]}")
        if gone and took > HARD_EXIT_S:  # the README: within 10 s, whatever the process is doing
            probe.fail(f"ended {took:.1f} s after the second signal (over {HARD_EXIT_S:.0f} s)")
        probe.note = probe.note or f"ended {took:.1f} s after the second signal"
        probes.append(probe)
    probe = Probe("one Ctrl-C while tune starts")
    mark = work / "once.held"
    proc = start(["tune", KERNEL, "--trials", "8", "--db", str(work / "once.db")],
                 env={"SCHEDX_FAULT_HOLD": "tune.start:3", "SCHEDX_FAULT_MARK": str(mark)})
    wait_until(mark.exists, 120, proc)
    os.kill(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
        note_run(probe, Ran(proc.returncode, out.decode(), err.decode(), False), ok_codes=(130,), what="tune")
        if "before the search started" not in err.decode():
            probe.fail("it did not say the search had not started")
    except subprocess.TimeoutExpired:
        kill_group(proc)
        probe.hangs += 1
        probe.fail("hung")
    probes.append(probe)
    return probes


def ui_origin_handshake() -> Probe:
    """A real ``schedx ui`` asked as a foreign page would (a cross-site websocket, DNS rebinding):
    403 to a foreign Origin or Host, on the websocket and on HTTP; 101/200 to its own."""
    from tests.browser import schedx_ui
    from tests.ui_handshake import origin_holes

    probe = Probe("a foreign page's handshake with the UI")
    try:
        with schedx_ui() as url:
            holes = origin_holes(url)
    except (OSError, RuntimeError) as err:
        probe.fail(f"the UI did not answer: {str(err).strip()[-200:]}")
        return probe
    for hole in holes:
        probe.fail(hole)
    probe.note = probe.note or "foreign Origin/Host 403, websocket and HTTP; its own 101/200"
    return probe


def cli_fuzz() -> list[Probe]:
    """The CLI fuzz tests, every example (``-m "slow or not slow"``): one probe per test."""
    report = Path(tempfile.mkstemp(prefix="schedx-fuzz-", suffix=".txt")[1])
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "slow or not slow",
                    "-rA", "tests/test_cli_fuzz.py", "tests/test_store_cli_fuzz.py"], cwd=ROOT,
                   stdout=report.open("w"), stderr=subprocess.STDOUT, timeout=1800)
    probes = []
    for line in report.read_text(errors="replace").splitlines():
        if line.startswith(("PASSED ", "FAILED ", "ERROR ")):
            verdict, _, test = line.partition(" ")
            probe = Probe("fuzz " + test.split("::")[-1][:60])
            if verdict != "PASSED":
                probe.tracebacks += 1
                probe.fail(verdict.lower())
            probes.append(probe)
    if not probes:
        probes.append(Probe("CLI fuzz", held=False, note=f"no results: see {report}"))
    else:
        report.unlink()
    return probes


def _every_probe(work: Path, rng: random.Random, args, report: Callable[[list[Probe]], None]) -> None:
    report(kills_during_a_search(work, rng, args.kills))
    db = work / "search.db"
    export_dir = work / "ms-json"
    schedx(["db", "export", str(export_dir), "--db", str(db)])
    in_file = sum(1 for _ in (export_dir / "database_tuning_record.json").open()) if export_dir.exists() else 0
    imported = work / "imported.db"
    report([kill_inside_a_transaction(work, rng, "db import", ["db", "import", str(export_dir), "--db",
                                                              str(imported)], imported, lambda: in_file)])
    merged = work / "merged.db"
    report([kill_inside_a_transaction(work, rng, "db merge", ["db", "merge", str(db), "--db", str(merged)], merged,
                                      lambda: len(record_ids(db)))])
    report(kills_during_an_export(work, rng))
    report(fault_bundles.user_files(work, rng))
    report(fault_bundles.trust_race(work))
    report(full_disk(work, db))
    report([concurrent_writers(work, args.repeats)])
    report(signals_at_start(work))
    report([ui_origin_handshake()])
    if not args.no_fuzz:
        report(cli_fuzz())


# probes that run alone (``--only NAME``): each a function of the work folder and the arguments
ALONE: dict[str, Callable] = {
    "concurrent": lambda work, args: [concurrent_writers(work, args.repeats)],
    "signals": lambda work, args: signals_at_start(work),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="the random moments' seed (default: a new one)")
    ap.add_argument("--kills", type=int, default=3, help="kill -9 moments during a search")
    ap.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it")
    ap.add_argument("--no-fuzz", action="store_true", help="leave the CLI fuzz out")
    ap.add_argument("--repeats", type=int, default=CONCURRENT_REPEATS, help="two concurrent searches, this many times")
    ap.add_argument("--only", choices=sorted(ALONE), default=None, help="run this probe alone")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    rng = random.Random(seed)
    work = Path(args.keep or tempfile.mkdtemp(prefix="schedx-faults-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ["SCHEDX_DB"] = str(work / "default.db")  # never the user's own database
    print(f"fault suite, seed {seed}, in {work} ({os.cpu_count()} CPUs)", flush=True)
    results: list[Probe] = []

    def report(probes: list[Probe]) -> None:
        for p in probes:
            mark = "held" if p.held else "FAILED"
            print(f"  {mark:<6} {p.name:<58} lost {p.lost} dup {p.duplicates} tb {p.tracebacks} hang {p.hangs}"
                  f"  {p.note}", flush=True)
        results.extend(probes)

    started = time.monotonic()
    if args.only:
        report(ALONE[args.only](work, args))
    else:
        _every_probe(work, rng, args, report)
    held = sum(p.held for p in results)
    print(f"probes {len(results)}, held {held}, lost {sum(p.lost for p in results)}, "
          f"duplicates {sum(p.duplicates for p in results)}, tracebacks {sum(p.tracebacks for p in results)}, "
          f"hangs {sum(p.hangs for p in results)} ({time.monotonic() - started:.0f} s, seed {seed})", flush=True)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if held == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
