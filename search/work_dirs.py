"""A search's scratch folder (MetaSchedule's work_dir), named after its process so that the
folders of searches killed with -9 (which never ran their clean-up) go when the next one starts."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from explorer.processes import process_alive

PREFIX = "schedx-tune-"


def sweep_dead(root: str | os.PathLike | None = None) -> int:
    """Remove this user's ``schedx-tune-<pid>-*`` folders whose process is gone; how many."""
    removed = 0
    for folder in Path(root or tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        pid = folder.name[len(PREFIX):].split("-", 1)[0]
        try:
            mine = folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def work_dir() -> tempfile.TemporaryDirectory:
    """A fresh scratch folder for this search (dead searches' folders swept first)."""
    sweep_dead()
    return tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-")


__all__ = ["PREFIX", "sweep_dead", "work_dir"]
