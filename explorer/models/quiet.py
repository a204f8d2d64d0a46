"""Keep what libraries print off stdout, and keep it for later.

TVM's ONNX importer prints ("Error converting operator Reshape, with inputs: ...") from Python
and TVM may print from C++, straight to file descriptor 1, where it breaks ``--json`` output and
alarms users about an error schedx then recovers from. :func:`captured_output` redirects fd 1
(and ``sys.stdout``, which test runners and click's ``CliRunner`` replace) into a temporary file
for the duration of a block, and records Python warnings raised inside it; afterwards
:attr:`Capture.lines` holds what was printed, for the caller to keep as a note.

With ``stderr=True`` fd 2 is captured too, into the same record: TVM's C++ logger warns there
while an importer cleans up after a failed attempt ("BlockBuilder destroyed with remaining
blocks!"), which alarms as much as a printed error.

Contract: the redirection is process-wide (a file descriptor belongs to the process), so
blocks are serialised by a (re-entrant) lock, and another thread printing meanwhile is captured
too. Blocks nest: an inner block captures what it sees and hands the rest back to the outer.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

_LOCK = threading.RLock()


@dataclass
class Capture:
    """What a :func:`captured_output` block printed (filled when the block ends)."""

    stdout: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def lines(self) -> list[str]:
        """Non-empty printed lines, then the warnings' messages."""
        return [ln for ln in self.stdout.splitlines() if ln.strip()] + self.warnings


def _flush_c_stdio() -> None:
    try:
        ctypes.CDLL(None).fflush(None)  # C/C++ stdio buffers written by TVM's C++ side
    except (OSError, AttributeError):  # no libc symbol table (e.g. Windows): nothing buffered there
        pass


def _fd(stream, default: int) -> int:
    try:
        return stream.fileno() if stream is not None else default
    except (OSError, ValueError, io.UnsupportedOperation):
        return default


@contextlib.contextmanager
def captured_output(*, stderr: bool = False) -> Iterator[Capture]:
    """Run the block with fd 1, ``sys.stdout`` and Python warnings captured, and fd 2 with
    ``stderr`` (see the module)."""
    capture = Capture()
    fds = [_fd(sys.__stdout__, 1)] + ([_fd(sys.__stderr__, 2)] if stderr else [])
    with _LOCK, tempfile.TemporaryFile(mode="w+b") as sink, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        py_out = io.StringIO()
        for stream in (sys.stdout, sys.__stdout__, sys.stderr, sys.__stderr__):
            _flush_python(stream)
        _flush_c_stdio()
        saved = [os.dup(fd) for fd in fds]
        try:
            for fd in fds:
                os.dup2(sink.fileno(), fd)
            with contextlib.redirect_stdout(py_out):
                yield capture
        finally:
            for stream in (sys.__stdout__, sys.__stderr__):
                _flush_python(stream)
            _flush_c_stdio()
            for fd, old in zip(fds, saved):
                os.dup2(old, fd)
                os.close(old)
            sink.seek(0)
            capture.stdout = sink.read().decode("utf-8", "replace") + py_out.getvalue()
            capture.warnings = [f"{w.category.__name__}: {w.message}" for w in caught]


def _flush_python(stream) -> None:
    try:
        if stream is not None:
            stream.flush()
    except (OSError, ValueError):
        pass


__all__ = ["Capture", "captured_output"]
