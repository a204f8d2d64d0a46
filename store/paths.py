"""Where a database may be: the one check every way into one passes before SQLite sees the path.

SQLite opens whatever path it is given and writes its rollback journal, write-ahead log and
shared-memory file beside it: given ``/dev/full`` it creates ``/dev/full-journal`` and then fails
with "disk I/O error" (which reads like a full disk); given a FIFO or ``/dev/zero`` it fails the
same way. :func:`check_db_path` refuses, in one line that names the path and what it is, a path
that is not a regular file (a folder, a FIFO, a device, a socket, or a link to one), or one
whose SQLite companion files are not regular files, before anything is opened or created.
A path that does not exist yet is left to the caller (a new database).

``Store`` and :func:`store.schema.open_readonly` call it for every file they open, and every
command's ``--db`` option calls it while parsing (``app.cli_types.DbPath``), so ``schedx tune``
refuses before it loads a model. Light on purpose: no SQLite, no sqlite-utils.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from store.errors import StoreError, io_reason

# the files SQLite may create beside a database (rollback journal, write-ahead log, its index)
COMPANIONS = ("-journal", "-wal", "-shm")


def user_path(path: str | os.PathLike) -> Path:
    """``path`` with ``~`` and ``~user`` expanded; a user that does not exist is a StoreError."""
    try:
        return Path(path).expanduser()
    except RuntimeError as err:  # "~nobody-here/x": Python cannot find that home directory
        raise StoreError(f"cannot open {path}: {err}") from err


def special_kind(mode: int) -> str | None:
    """What a file that is neither a regular file nor a folder is, in words (None otherwise)."""
    for test, words in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return None


def _refuse(path: Path, what: str) -> StoreError:
    return StoreError(f"{path} is {what}, not a database file; SQLite would write its journal beside it. Give a "
                      "regular file (or a new name in a writable folder) with --db / SCHEDX_DB, e.g. ~/schedx.db")


def _mode(path: str | os.PathLike) -> int | None:
    """The file's type and mode, following links (a link to /dev/full is /dev/full); None if nothing
    is there (a link to nothing too: SQLite creates its target)."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None


def check_db_path(path: str | os.PathLike, *, typed: bool = False) -> Path:
    """``path`` (``~`` expanded) as a :class:`Path` if a database may be opened or created there; raises
    :class:`StoreError` naming what it is otherwise. Only looks (``stat``): never opens, creates
    or blocks (a FIFO is not opened). ``typed``: a path the user typed, whose folder must exist
    (a missing folder is a typing slip; the default database's folder is made by its first write)."""
    if not str(path).strip():  # (Path("") is ".", the current folder)
        raise StoreError("an empty database path: give a file (--db ~/schedx.db), or leave --db out for the "
                         "default database")
    path = user_path(path)
    try:
        mode = _mode(path)
        companions = [(Path(f"{path}{end}"), _mode(f"{path}{end}")) for end in COMPANIONS]
    except (OSError, ValueError) as err:  # a name too long, a NUL byte, a folder we may not enter
        raise StoreError(f"cannot open {path}: {getattr(err, 'strerror', None) or io_reason(path, err)}") from err
    if mode is not None and stat.S_ISDIR(mode):
        raise StoreError(f"{path} is a directory, not a database file; give a file path (e.g. {path}/schedx.db)")
    if mode is not None and not stat.S_ISREG(mode):
        raise _refuse(path, special_kind(mode) or "not a regular file")
    if mode is None and typed:
        folder = path.parent
        try:
            there = folder.is_dir()
        except OSError as err:
            raise StoreError(f"cannot open {path}: {err.strerror or err}") from err
        if not there:
            raise StoreError(f"no database at {path}: the folder {folder} does not exist; create it first, or give "
                             "another file with --db")
    for companion, companion_mode in companions:
        if companion_mode is not None and not stat.S_ISREG(companion_mode):
            raise StoreError(f"{companion}, where SQLite keeps {path}'s journal, is "
                             f"{special_kind(companion_mode) or 'not a regular file'}; move it away, or give "
                             "another database file with --db / SCHEDX_DB")
    return path


__all__ = ["COMPANIONS", "check_db_path", "special_kind", "user_path"]
