"""Keep what libraries print off stdout, and keep it for later.

TVM's ONNX importer prints ("Error converting operator Reshape, with inputs: ...") from Python
and TVM may print from C++, straight to file descriptor 1, where it breaks ``--json`` output and
alarms users about an error schedx then recovers from. :func:`captured_output` redirects fd 1
(and ``sys.stdout``, which test runners and click's ``CliRunner`` replace) into a temporary file
for the duration of a block, and records Python warnings raised inside it; afterwards
:attr:`Capture.lines` holds what was printed, for the caller to keep as a note.

Contract: the redirection is process-wide (a file descriptor belongs to the process), so
blocks are serialised by a lock; another thread printing meanwhile is captured too. stderr is
left alone (warnings a user should see still reach the terminal through the logging module).
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


@contextlib.contextmanager
def captured_output() -> Iterator[Capture]:
    """Run the block with fd 1, ``sys.stdout`` and Python warnings captured (see the module)."""
    capture = Capture()
    with _LOCK:
        try:
            fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
        except (OSError, ValueError, io.UnsupportedOperation):
            fd = 1
        with tempfile.TemporaryFile(mode="w+b") as sink, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            py_out = io.StringIO()
            _flush_python(sys.stdout)
            _flush_python(sys.__stdout__)
            _flush_c_stdio()
            saved = os.dup(fd)
            try:
                os.dup2(sink.fileno(), fd)
                with contextlib.redirect_stdout(py_out):
                    yield capture
            finally:
                _flush_python(sys.__stdout__)
                _flush_c_stdio()
                os.dup2(saved, fd)
                os.close(saved)
                sink.seek(0)
                raw = sink.read().decode("utf-8", "replace")
                capture.stdout = raw + py_out.getvalue()
                capture.warnings = [f"{w.category.__name__}: {w.message}" for w in caught]


def _flush_python(stream) -> None:
    try:
        if stream is not None:
            stream.flush()
    except (OSError, ValueError):
        pass


__all__ = ["Capture", "captured_output"]
