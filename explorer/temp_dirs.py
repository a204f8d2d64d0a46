"""Temporary folders that go with the process that made them.

A ``with private_temp_dir(...)`` block removes its folder when it unwinds: on return, on an
exception, on Ctrl-C, and on SIGTERM once the command line turns it into an exception (see
:mod:`explorer.interrupts`). The removal itself holds Ctrl-C and SIGTERM back until it is done (a
signal that lands inside ``rmtree`` would leave half a folder), and a command that exits on an
interrupt removes whatever folders its own process still has (:func:`sweep_own`: a signal that
lands between ``mkdtemp`` and the ``with`` leaves one no block knows of). Nothing unwinds under
kill -9 or a forced exit, so every folder made
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from explorer.interrupts import held
from explorer.processes import process_alive

_NAME = re.compile(r"schedx-[a-z][a-z0-9-]*-pid(\d+)-[a-z0-9_]+")


@contextmanager
def private_temp_dir(prefix: str, *, dir: str | os.PathLike | None = None) -> Iterator[str]:
    """A fresh 0700 folder named ``{prefix}pid{this process}-XXXXXXXX`` (``prefix`` as
    ``schedx-verify-``), removed when the ``with`` block ends, or by the next command's
    :func:`sweep_dead` when this process dies without unwinding."""
    if not _NAME.fullmatch(f"{prefix}pid1-x"):
        raise ValueError(f"a private temp folder's prefix is 'schedx-NAME-' (lower case), not {prefix!r}")
    folder = tempfile.mkdtemp(prefix=f"{prefix}pid{os.getpid()}-", dir=dir)
    try:
        yield folder
    finally:
        _remove(folder)


def _remove(folder: str) -> None:
    """``rmtree`` with Ctrl-C and SIGTERM held back until it is done
    (:func:`explorer.interrupts.held`): they arrive once the folder is gone."""
    with held():
        shutil.rmtree(folder, ignore_errors=True)


def sweep_own(root: str | os.PathLike | None = None) -> int:
    """Remove this process's own :func:`private_temp_dir` folders (in ``root``, the temp folder
    by default); how many. For a command exiting on an interrupt, when no block will use them
    again. Never fails."""
    return _sweep(root, lambda pid: pid == os.getpid())


def sweep_dead(root: str | os.PathLike | None = None) -> int:
    """Remove this user's :func:`private_temp_dir` folders (in ``root``, the temp folder by
    default) whose process is gone; how many. Never fails: a folder it cannot judge or remove
    stays."""
    return _sweep(root, lambda pid: not process_alive(pid))


def _sweep(root: str | os.PathLike | None, goes) -> int:
    """Remove this user's :func:`private_temp_dir` folders in ``root`` whose process id ``goes``."""
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
        if mine and goes(int(match.group(1))):
            _remove(str(folder))
            removed += 1
    return removed


__all__ = ["private_temp_dir", "sweep_dead", "sweep_own"]
