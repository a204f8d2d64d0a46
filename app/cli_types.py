"""Option types that check what a user typed before a library sees it.

A bad value is one line (``Error: Invalid value for '--top': ...``) and exit status 1, like every
other error a user can cause, instead of click's usage block and status 2, or a traceback from
deep inside (an ``OverflowError`` from SQLite for ``--top 99999999999999999999``, a date such as
``2020-13-45`` silently compared as text).
"""

from __future__ import annotations

import os
from datetime import date, datetime

import click

from store import StoreError
from store.paths import check_db_path, special_kind
from store.records import parse_date

MAX_DIGITS = 19  # more digits than any count a command takes: refused before int() sees them


class InputError(click.BadParameter):
    """A bad option or argument value: ``Error: ...`` on one line, exit status 1."""

    exit_code = 1

    def show(self, file=None) -> None:
        click.ClickException.show(self, file)  # the message alone, without the usage block


class Count(click.ParamType):
    """A whole number written with ASCII digits, between ``low`` and ``high`` (inclusive)."""

    name = "integer"

    def __init__(self, low: int = 1, high: int = 1_000_000) -> None:
        self.low, self.high = low, high

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            digits = text[1:] if text[:1] in "+-" else text
            if not (digits.isascii() and digits.isdigit()):
                raise InputError(f"{text[:40]!r} is not a whole number", ctx=ctx, param=param)
            if len(digits) > MAX_DIGITS:
                raise InputError(f"{text[:24]}... is far outside {self.low}..{self.high}", ctx=ctx, param=param)
            number = int(text)
        if not self.low <= number <= self.high:
            raise InputError(f"{number} is not in {self.low}..{self.high}", ctx=ctx, param=param)
        return number

    def __repr__(self) -> str:
        return f"Count({self.low}, {self.high})"


class FilePath(click.Path):
    """``click.Path`` that also refuses, in one line, what the file system cannot even look up
    (a NUL byte, a name longer than the system allows) instead of raising from inside click."""

    def convert(self, value, param, ctx):
        if "\x00" in str(value):
            raise InputError("a path cannot contain a NUL character", ctx=ctx, param=param)
        try:
            path = super().convert(value, param, ctx)
            kind = (special_kind(os.stat(path).st_mode)
                    if os.path.lexists(path) and os.path.realpath(path) != os.devnull else None)
        except (OSError, ValueError) as err:
            raise InputError(f"{str(value)[:60]!r}: {getattr(err, 'strerror', None) or err}", ctx=ctx,
                             param=param) from err
        if kind:  # reading or writing one would block (a FIFO) or never end (a device)
            raise InputError(f"{str(value)[:60]!r} is {kind}, not a regular file or folder", ctx=ctx, param=param)
        return path


class DbPath(click.ParamType):
    """A database file for ``--db``: every command's, checked by :func:`store.paths.check_db_path`
    (the check ``Store`` makes again when it opens the file) while the command line is parsed, so
    a FIFO or ``/dev/full`` (or a file in a folder that does not exist) is refused in one line
    before a model loads or a kernel is measured, and before SQLite writes a journal beside it.
    The value stays as typed (``~`` expanded later)."""

    name = "file"

    def convert(self, value, param, ctx):
        if "\x00" in str(value):
            raise InputError("a path cannot contain a NUL character", ctx=ctx, param=param)
        try:
            check_db_path(value, typed=True)
        except StoreError as err:
            raise InputError(str(err), ctx=ctx, param=param) from err
        return value


class Date(click.ParamType):
    """A calendar date ``YYYY-MM-DD`` (or an ISO-8601 date and time), checked: ``2020-13-45`` is
    refused with the reason, never compared as text."""

    name = "date"

    def convert(self, value, param, ctx) -> date | datetime:
        if isinstance(value, date):
            return value
        try:
            return parse_date(str(value))
        except StoreError as err:
            raise InputError(str(err), ctx=ctx, param=param) from err


__all__ = ["Count", "Date", "DbPath", "FilePath", "InputError"]
