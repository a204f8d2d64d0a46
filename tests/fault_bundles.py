"""The fault suite's probes of a bundle's folder (issue 49): an export over a folder of the user's,
a re-export killed at random moments over a bundle holding the user's files, and `run --trust`
raced by an attacker who swaps run.py right after the check. Called by :mod:`tests.fault_suite`."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

from tests.inotify_watch import after_reads, swap_run_py

KERNEL = "matmul:M=16,N=16,K=16"
USER_FILES = {"NOTES.txt": "n", "src/main.js": "x", "results/run1.csv": "a,b\n1,2\n"}


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def _missing(folder: Path, files: dict[str, str]) -> list[str]:
    return [n for n, text in files.items() if not (folder / n).is_file() or (folder / n).read_text() != text]


def user_files(work: Path, rng: random.Random) -> list:
    from tests.fault_suite import Probe, kill_group, note_run, schedx, start

    probes = []
    foreign = Probe("export into another program's folder (its own manifest.json)")
    w = work / "webapp"
    w.mkdir()
    _write(w, {**USER_FILES, "manifest.json": '{"name":"app"}'})
    note_run(foreign, schedx(["export", KERNEL, "--no-db", "-o", str(w)]), ok_codes=(1,), what="export")
    lost = _missing(w, {**USER_FILES, "manifest.json": '{"name":"app"}'})
    if lost:
        foreign.lost += len(lost)
        foreign.fail(f"gone or changed: {lost}")
    probes.append(foreign)

    again = Probe("re-export into a bundle with the user's files, killed at random moments")
    out = work / "mine"
    note_run(again, schedx(["export", KERNEL, "--no-db", "-o", str(out)]), what="export")
    _write(out, USER_FILES)
    for _ in range(3):
        proc = start(["export", KERNEL, "--no-db", "-o", str(out)])
        time.sleep(rng.uniform(0.5, 6.0))
        kill_group(proc)
    note_run(again, schedx(["export", KERNEL, "--no-db", "-o", str(out)]), what="export")
    lost = _missing(out, USER_FILES)
    if lost:
        again.lost += len(lost)
        again.fail(f"gone or changed: {lost}")
    probes.append(again)
    return probes


def trust_race(work: Path, repeats: int = 3) -> list:
    """`run --trust` while a watcher swaps run.py (and its hash) the moment the check has read every
    file: the payload must never run."""
    from tests.fault_suite import Probe, note_run, schedx

    probe = Probe(f"run --trust raced by a run.py swap after the check ({repeats}x)")
    key = work / "team.key"
    note_run(probe, schedx(["keygen", str(key)]), what="keygen")
    signed = work / "signed"
    note_run(probe, schedx(["export", KERNEL, "--no-db", "--no-verify", "-o", str(signed), "--sign", str(key)]),
             what="export --sign")
    if not (signed / "manifest.sig").is_file():
        probe.fail("no signed bundle to race")
        return [probe]
    listed = set(json.loads((signed / "manifest.json").read_text())["files"]) | {"manifest.json", "manifest.sig"}
    pristine = {n: (signed / n).read_bytes() for n in listed}
    ran_payload = 0
    for k in range(repeats):
        for name, data in pristine.items():  # the signed bundle again
            (signed / name).write_bytes(data)
        marker = work / f"payload-{k}"
        watcher = threading.Thread(target=after_reads, daemon=True, args=(
            signed, listed, lambda m=marker: swap_run_py(signed, f"open({str(m)!r}, 'w').write('ran')\n")))
        watcher.start()
        time.sleep(0.3)
        ran = schedx(["run", str(signed), "--trust", f"{key}.pub", "--runs", "2", "--no-baselines", "--rounds", "1"])
        watcher.join(30)
        note_run(probe, ran, ok_codes=(0, 1), what="run --trust")
        ran_payload += marker.exists()
    if ran_payload:
        probe.fail(f"the swapped run.py ran {ran_payload} of {repeats} times")
    return [probe]
