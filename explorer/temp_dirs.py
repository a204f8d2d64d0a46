"""Temporary folders that go with the process that made them.

A ``with TemporaryDirectory()`` block removes its folder when it unwinds: on return, on an
exception, on Ctrl-C, and on SIGTERM once the command line turns it into an exception (see
:mod:`explorer.interrupts`). Nothing unwinds under kill -9 or a forced exit, so every folder made
by :func:`private_temp_dir` carries its process's id in its name (``schedx-verify-pid4242-xxxxxxxx``)
and :func:`sweep_dead` (the command line calls it at start-up: one glob of the temp folder)
removes this user's folders whose process is gone. A folder is private: ``mkdtemp`` makes it 0700.

The ``pid`` marker keeps other ``schedx-*`` folders out of the sweep (an upload folder named after
a user id, the fault suite's own work folder): only names this module made match.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from explorer.processes import process_alive

_NAME = re.compile(r"schedx-[a-z][a-z0-9-]*-pid(\d+)-[a-z0-9_]+")


def private_temp_dir(prefix: str, *, dir: str | os.PathLike | None = None) -> tempfile.TemporaryDirectory:
    """A fresh 0700 folder named ``{prefix}pid{this process}-XXXXXXXX`` (``prefix`` as
    ``schedx-verify-``), removed when the ``with`` block ends, or by the next command's
    :func:`sweep_dead` when this process dies without unwinding."""
    if not _NAME.fullmatch(f"{prefix}pid1-x"):
        raise ValueError(f"a private temp folder's prefix is 'schedx-NAME-' (lower case), not {prefix!r}")
    return tempfile.TemporaryDirectory(prefix=f"{prefix}pid{os.getpid()}-", dir=dir)


def sweep_dead(root: str | os.PathLike | None = None) -> int:
    """Remove this user's :func:`private_temp_dir` folders (in ``root``, the temp folder by
    default) whose process is gone; how many. Never fails: a folder it cannot judge or remove
    stays."""
    removed = 0
    try:
        found = list(Path(root or tempfile.gettempdir()).glob("schedx-*-pid*-*"))
    except OSError:
        return 0
    for folder in found:
        match = _NAME.fullmatch(folder.name)
        try:
            mine = match is not None and folder.is_dir() and not folder.is_symlink() and \
                folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and not process_alive(int(match.group(1))):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


__all__ = ["private_temp_dir", "sweep_dead"]
