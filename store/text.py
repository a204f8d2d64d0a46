"""Text that is not UTF-8 inside a database: read, not fatal, and found row by row when asked.

SQLite keeps whatever bytes a program stores as TEXT. Another tool (a ``sqlite3`` shell script,
a program with the wrong encoding) can leave bytes that are not UTF-8; ``PRAGMA quick_check``
does not look at text, and Python's sqlite3 then fails the whole query ("Could not decode to
UTF-8 column 'name' ..."), so one damaged cell hid the whole leaderboard.

Every connection of the store reads text through :func:`lenient_text`: valid UTF-8 as it is (the
common case costs a ``bytes.decode``), damaged text with U+FFFD in place of the bad bytes, and
counted. A reader that saw damage (:func:`read_damaged_text`) names the damaged rows with
:func:`damaged_rows` (one pass over the tables) and carries on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

_FUNCTION = "schedx_not_utf8"


def lenient_text() -> Callable[[bytes], str]:
    """A ``text_factory`` for one connection: strict UTF-8, else U+FFFD for the bad bytes; its
    ``damaged`` list holds one entry per damaged value read (at most 1000 kept)."""
    damaged: list[int] = []

    def text(data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            if len(damaged) < 1000:
                damaged.append(len(data))
            return data.decode("utf-8", "replace")

    text.damaged = damaged  # type: ignore[attr-defined]
    return text


def read_damaged_text(conn: sqlite3.Connection) -> bool:
    """Whether this connection has read text that is not UTF-8 (since it was opened)."""
    return bool(getattr(conn.text_factory, "damaged", None))


def _not_utf8(*values) -> int:
    """1 if one of the row's text values (as bytes) is not UTF-8 (one call per row, not per value)."""
    try:
        b"\n".join(v for v in values if isinstance(v, bytes)).decode("utf-8")  # (a newline ends any sequence)
    except UnicodeDecodeError:
        return 1
    return 0


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def damaged_rows(conn: sqlite3.Connection, limit: int = 10) -> tuple[list[str], int]:
    """The rows holding text that is not UTF-8, as ``records 2 (error)`` (table, rowid, columns),
    at most ``limit`` of them, and how many there are in all. Reads every table once (O(size))."""
    conn.create_function(_FUNCTION, -1, _not_utf8, deterministic=True)
    named, total = [], 0
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                             "name NOT LIKE 'sqlite_%' ORDER BY name")]
    for table in tables:
        columns = [row[1] for row in conn.execute(f"PRAGMA table_info({_quoted(table)})")]
        if not columns:
            continue
        blobs = ", ".join(f"CAST({_quoted(c)} AS BLOB)" for c in columns)
        try:
            rows = conn.execute(f"SELECT rowid, {blobs} FROM {_quoted(table)} WHERE {_FUNCTION}({blobs})")
            for rowid, *values in rows:
                total += 1
                if len(named) < limit:
                    bad = [c for c, v in zip(columns, values) if isinstance(v, bytes) and _not_utf8(v)]
                    named.append(f"{table} {rowid} ({', '.join(bad)})")
        except sqlite3.OperationalError:  # a table without rowid (none of ours): not named
            continue
    return named, total


def describe(path, named: list[str], total: int) -> str:
    """One line for a user: which rows hold damaged text and what to do about it."""
    more = f", and {total - len(named)} more" if total > len(named) else ""
    return (f"{path}: {total} row(s) hold text that is not UTF-8 (written outside schedx), shown with the "
            f"replacement character U+FFFD: {'; '.join(named)}{more}. Rewrite those values with the sqlite3 shell "
            f"(UPDATE <table> SET <column> = '...' WHERE rowid = N), or delete the rows")


__all__ = ["damaged_rows", "describe", "lenient_text", "read_damaged_text"]
