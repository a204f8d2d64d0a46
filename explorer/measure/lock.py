"""One timed measurement at a time on this machine, across processes.

Two searches (or a search and ``schedx measure``) that time kernels at the same moment share the
cores and caches: both timings are wrong, and both would be stored as valid. Every timed run
(verification run included) therefore holds an exclusive ``fcntl.flock`` on one lock file in the
user's runtime folder (``$XDG_RUNTIME_DIR/schedx``, else the user's cache folder); builds may run
meanwhile, timing never overlaps. The kernel releases a flock when its holder dies, even by
``kill -9``: a crashed search never leaves the machine locked.

Who holds the lock and who waits for it is written beside it (``holder.json``, ``waiting/PID.json``)
for ``schedx jobs`` (:func:`lock_status`). ``SCHEDX_TIMING_LOG`` names a file that gets one line
per timed run (``pid start end``, monotonic seconds), an audit trail of the intervals.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from explorer.processes import process_alive

ENV_DIR = "SCHEDX_LOCK_DIR"
ENV_TIMING_LOG = "SCHEDX_TIMING_LOG"


def _candidates() -> list[Path]:
    if os.environ.get(ENV_DIR):
        return [Path(os.environ[ENV_DIR])]
    found = []
    if os.environ.get("XDG_RUNTIME_DIR") and os.path.isdir(os.environ["XDG_RUNTIME_DIR"]):
        found.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "schedx")
    found.append(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "schedx" / "run")
    found.append(Path(tempfile.gettempdir()) / f"schedx-{os.getuid()}" / "run")  # a read-only home
    return found


def lock_dir() -> Path:
    """A per-user folder: ``$SCHEDX_LOCK_DIR``, ``$XDG_RUNTIME_DIR/schedx``, the user's cache, or a
    private (0700, owned) folder in the temp dir when the home folder is read-only."""
    last: OSError | None = None
    for base in _candidates():
        try:
            (base / "waiting").mkdir(parents=True, exist_ok=True, mode=0o700)
            info = os.stat(base)
            if info.st_uid != os.getuid():  # someone else's folder (a planted /tmp path): not ours
                raise PermissionError(f"{base} belongs to another user")
            return base
        except OSError as err:
            last = err
    raise last or OSError("no folder for the measuring lock")


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


@contextlib.contextmanager
def measuring(what: str = "", **who) -> Iterator[float]:
    """Hold the machine's measuring lock for the block (waiting for it first); yields how long it
    waited. ``what`` and ``who`` (job id, database...) describe the holder to others."""
    try:
        folder = lock_dir()
    except OSError:  # nowhere to put a lock (every folder read-only): measure unlocked, as before
        yield 0.0
        return
    me = {"pid": os.getpid(), "what": what, **who}
    waiting = folder / "waiting" / f"{os.getpid()}.json"
    fd = os.open(folder / "measure.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    start = time.monotonic()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _write_json(waiting, {**me, "since": time.time()})
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            finally:
                with contextlib.suppress(OSError):
                    waiting.unlink()
        waited = time.monotonic() - start
        _write_json(folder / "holder.json", {**me, "since": time.time()})
        began = time.monotonic()
        try:
            yield waited
        finally:
            ended = time.monotonic()
            with contextlib.suppress(OSError):
                (folder / "holder.json").unlink()
            log = os.environ.get(ENV_TIMING_LOG)
            if log:
                with open(log, "a") as f:
                    f.write(f"{os.getpid()} {began:.6f} {ended:.6f}\n")
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def lock_status() -> dict:
    """``{"holder": {...} | None, "waiting": [{...}, ...]}``: who measures on this machine now and
    who waits (entries of processes that are gone are dropped)."""
    folder = lock_dir()
    holder = None
    try:
        data = json.loads((folder / "holder.json").read_text())
        holder = data if process_alive(int(data.get("pid", 0))) else None
    except (OSError, ValueError, TypeError):
        pass
    waiting = []
    for path in sorted((folder / "waiting").glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if process_alive(int(data.get("pid", 0))):
            waiting.append(data)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return {"holder": holder, "waiting": waiting}


__all__ = ["lock_dir", "lock_status", "measuring"]
