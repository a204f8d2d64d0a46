"""The store's exceptions: one base class, messages a user can act on."""

from __future__ import annotations

import errno
import os
import shutil

# Below this much free space, an I/O error writing a database is the disk being full (SQLite says
# only "disk I/O error" when its WAL cannot grow)
FULL_DISK_BYTES = 64 << 20


class StoreError(Exception):
    """Anything the store refuses to do, with a message that says why and what to do."""


class CorruptDatabaseError(StoreError):
    """The file is not a readable SQLite database; it is left exactly as it was."""


class ForeignDatabaseError(CorruptDatabaseError):
    """The file is SQLite but belongs to another application; it is left exactly as it was."""


class ReadOnlyDatabaseError(StoreError):
    """The database was opened read-only (a read-only file or folder, or ``read_only=True``) and
    something tried to write to it; nothing was written."""


class SchemaTooNewError(StoreError):
    """The database was written by a newer schedx, whose schema this one cannot read."""


class ImportFormatError(StoreError):
    """A file to import is malformed; the message names the file and line. Nothing was imported."""


def io_reason(path: str | os.PathLike, err: BaseException) -> str:
    """What went wrong reading or writing the database at ``path``, in words: ``err``'s own text,
    or that the disk holding it is full (with how much is free) when that is why."""
    text = str(err)
    full = getattr(err, "errno", None) == errno.ENOSPC or "disk is full" in text
    if full or "disk I/O error" in text:
        try:
            free = shutil.disk_usage(os.path.dirname(os.path.abspath(path)) or ".").free
        except OSError:
            free = None
        if full or (free is not None and free < FULL_DISK_BYTES):
            left = f" ({free / 2**20:.1f} MB free)" if free is not None else ""
            return (f"the disk holding it is full{left}; free some space there, or use a database on another "
                    f"disk (--db / SCHEDX_DB). Nothing was lost: what was written before is still there")
    return text


__all__ = ["CorruptDatabaseError", "ForeignDatabaseError", "ImportFormatError", "ReadOnlyDatabaseError", "SchemaTooNewError",
           "StoreError", "io_reason"]
