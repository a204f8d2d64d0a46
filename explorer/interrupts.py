"""Ctrl-C and SIGTERM as exceptions that unwind, and the question every broad ``except`` asks
first: is this error an interrupt?

The command line (:func:`handling_signals`) turns SIGINT into ``KeyboardInterrupt`` and SIGTERM
into :class:`Terminated` (a ``KeyboardInterrupt`` too), so both unwind the stack: ``with`` blocks
remove their temporary folders, an export removes its staging folder, and the command exits
130 or 143 (:func:`exit_status`). A search installs handlers of its own instead, which only
request a stop (:mod:`search.stopping`).

A signal that arrives while a module is being imported waits for the import to end: raised
inside a C extension's initialisation (onnx's protobuf, TVM's libraries), the exception crashes the
interpreter (a segfault) instead of unwinding.

TVM loses a Python exception's type when it crosses a packed call: a ``KeyboardInterrupt``
raised while TVM's C++ runs comes back as a bare ``RuntimeError`` (an empty message, or one that
names the interrupt). So these handlers also record the signal, and :func:`reraise` treats an
error raised after one arrived as that interrupt. A library ``except Exception`` that carries on
(a check that reports why it could not run) calls :func:`reraise` first.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

INTERRUPTED, TERMINATED = 130, 143  # the shell's 128 + signal number


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread (a ``KeyboardInterrupt``: whatever stops cleanly on
    Ctrl-C stops the same way)."""


_received: list[int] = []  # signals the handlers below raised for, in this process
_holding: list[None] = []  # one entry per held() block open in the main thread
_pending: list[int] = []  # signals that arrived while one was
_IMPORTING = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
RETRY_S = 0.05  # a signal that came during an import is delivered again this much later
_retry: list[threading.Timer] = []


def _raise(signum: int, frame=None) -> None:
    if _holding:  # a step that must not stop halfway: raised when it ends
        _pending.append(signum)
        return
    if _importing(frame):  # raised inside a C extension's initialisation (onnx's protobuf), it segfaults
        _again_later(signum)
        return
    _received.append(signum)
    raise _interrupt(signum)


def _importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename in _IMPORTING:
            return True
        frame = frame.f_back
    return False


def _again_later(signum: int) -> None:
    """The signal again in :data:`RETRY_S` (once the import is done, its handler raises)."""
    if _retry and _retry[-1].is_alive():
        return
    timer = threading.Timer(RETRY_S, os.kill, (os.getpid(), signum))
    timer.daemon = True
    _retry[:] = [timer]
    timer.start()


@contextmanager
def handling_signals() -> Iterator[None]:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` and SIGTERM :class:`Terminated`;
    the previous handlers come back afterwards. Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    _received.clear()
    _pending.clear()
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, _raise)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def held() -> Iterator[None]:
    """Within the block, Ctrl-C and SIGTERM wait (in the main thread, where Python runs their
    handlers): the first that arrived is raised as the block ends. For a step that must not stop
    halfway (removing a folder). Blocking the signals would not do: the kernel delivers a signal
    sent to the process to any thread that does not block it (TVM's workers), and Python then runs
    the handler in the main thread all the same."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _holding.append(None)
    try:
        yield
    finally:
        _holding.pop()
        if not _holding and _pending:
            signum = _pending[0]
            _pending.clear()
            _received.append(signum)
            raise _interrupt(signum)


def received() -> int | None:
    """The first signal :func:`handling_signals` raised for (None: none)."""
    return _received[0] if _received else None


def as_interrupt(err: BaseException) -> KeyboardInterrupt | None:
    """The interrupt ``err`` is or stands for: itself or one in its chain; after a signal arrived,
    any error (TVM's conversion of the interrupt); an error whose message names a
    ``KeyboardInterrupt``; None for a plain error."""
    chain, seen = [], set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in chain:
        if isinstance(e, KeyboardInterrupt):
            return e
    if received() is not None:
        return _interrupt(received())
    if any("KeyboardInterrupt" in str(e) for e in chain):
        return KeyboardInterrupt()
    return None


def _interrupt(signum: int) -> KeyboardInterrupt:
    return Terminated("terminated (SIGTERM)") if signum == signal.SIGTERM else KeyboardInterrupt()


def reraise(err: BaseException) -> None:
    """Raise the interrupt ``err`` stands for (see :func:`as_interrupt`); nothing when it is a
    plain error. Call it first in an ``except`` that would carry on."""
    found = as_interrupt(err)
    if found is err:
        raise err
    if found is not None:
        raise found from err


def check() -> None:
    """Raise the interrupt that arrived, if one did (a step that must not go on after one, even
    when something below swallowed it: publishing an export)."""
    signum = received()
    if signum is not None:
        raise _interrupt(signum)


def exit_status(err: BaseException) -> int:
    """130 for Ctrl-C, 143 for SIGTERM (``err``: the interrupt, or what it stands for)."""
    found = as_interrupt(err)
    return TERMINATED if isinstance(found, Terminated) else INTERRUPTED


__all__ = ["INTERRUPTED", "TERMINATED", "Terminated", "as_interrupt", "check", "exit_status", "handling_signals",
           "held", "received", "reraise"]
