"""The store's exceptions: one base class, messages a user can act on."""

from __future__ import annotations


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


__all__ = ["CorruptDatabaseError", "ForeignDatabaseError", "ImportFormatError", "ReadOnlyDatabaseError", "SchemaTooNewError",
           "StoreError"]
