"""An attacker's view of a folder: inotify tells when a checker has read a set of files, so a test
can swap files at the worst moment (issue 49: `run --trust` checked a bundle, then read it again)."""

from __future__ import annotations

import ctypes
import os
import select
import struct
import time
from collections.abc import Callable
from pathlib import Path

IN_CLOSE_NOWRITE = 0x10


def after_reads(folder: Path, wanted: set[str], then: Callable[[], None], timeout: float = 120.0) -> bool:
    """Watch ``folder`` and call ``then()`` right after every file in ``wanted`` has been opened for
    reading and closed at least once (the moment a checker has finished with them). False when that
    did not happen within ``timeout`` seconds (``then`` not called)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    if fd < 0 or libc.inotify_add_watch(fd, str(folder).encode(), IN_CLOSE_NOWRITE) < 0:
        raise OSError(ctypes.get_errno(), "inotify is not available")
    seen: set[str] = set()
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and not wanted <= seen:
            if not select.select([fd], [], [], 0.2)[0]:
                continue
            data, pos = os.read(fd, 65536), 0
            while pos < len(data):
                _, _, _, size = struct.unpack_from("iIII", data, pos)
                seen.add(data[pos + 16:pos + 16 + size].rstrip(b"\0").decode())
                pos += 16 + size
    finally:
        os.close(fd)
    if wanted <= seen:
        then()
        return True
    return False


def swap_run_py(folder: Path, payload: str) -> None:
    """What an attacker who can write the bundle (but has no signing key) does: another run.py, and
    the manifest's hash rewritten to agree with it."""
    import hashlib
    import json

    (folder / "run.py").write_text(payload)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["run.py"]["sha256"] = hashlib.sha256((folder / "run.py").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
