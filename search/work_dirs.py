"""A search's scratch folder (MetaSchedule's work_dir): a :func:`explorer.temp_dirs.private_temp_dir`,
so that the folders of searches killed with -9 (which never ran their clean-up) go when the next
command starts."""

from __future__ import annotations

from contextlib import AbstractContextManager

from explorer.temp_dirs import private_temp_dir, sweep_dead

PREFIX = "schedx-tune-"


def work_dir() -> AbstractContextManager[str]:
    """A fresh scratch folder for this search (dead processes' folders swept first)."""
    sweep_dead()
    return private_temp_dir(PREFIX)


__all__ = ["PREFIX", "sweep_dead", "work_dir"]
