"""A worker process of :class:`search.pool.WarmPool`: ``python -m search.pool_worker READ_FD WRITE_FD``.

Reads jobs (a cloudpickled ``(function, args, failed)``, length-prefixed) and answers each with
``(Outcome.OK, result)``; ``(failed, message)`` when the job raised (``failed`` is what that means
to the caller, a build or a run error); or ``(Outcome.INFRA_ERROR, message)`` when it raised
:class:`search.errors.InfrastructureError` (not the candidate's fault). The parent enforces time limits (it kills the
process), so this loop stays simple; a worker whose parent is gone exits on its own, quietly (a
reply it can no longer send is not an error to print). Importing the ``search`` package first keeps torch out of
TVM's start-up here too (see :mod:`explorer.tvm_fast`).
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import traceback


def _read(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _describe(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    if len(text) < 40:  # a bare message: add where it came from
        frames = traceback.extract_tb(err.__traceback__)[-2:]
        text += " (" + "; ".join(f"{f.name} line {f.lineno}" for f in frames) + ")"
    return f"{type(err).__name__}: {text}"


def _exit_with_parent() -> None:
    """A worker whose parent died (even by SIGKILL) exits, whatever job it is stuck in."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="schedx-parent-watch").start()


def main(argv: list[str]) -> int:
    import signal

    import cloudpickle

    from store.outcome import Outcome

    # Ctrl-C and `schedx jobs stop` signal the whole process group: the parent decides, and
    # closes the pool (which kills its workers); a worker never dies half-way through a reply.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _exit_with_parent()
    rfd, wfd = int(argv[1]), int(argv[2])
    while True:
        header = _read(rfd, 8)
        if header is None:  # the parent closed the pipe: done
            return 0
        body = _read(rfd, struct.unpack("<Q", header)[0])
        if body is None:
            return 0
        failed = Outcome.RUN_ERROR
        try:
            fn, args, failed = cloudpickle.loads(body)
            reply = (Outcome.OK, fn(*args))
        except BaseException as err:  # every failure goes back to the parent as data
            infra = type(err).__name__ == "InfrastructureError"
            reply = (Outcome.INFRA_ERROR if infra else failed, _describe(err))
        try:
            data = cloudpickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:
            data = cloudpickle.dumps((failed, f"the result could not be sent back: {err}"))
        try:
            _write(wfd, data)
        except OSError:  # the parent is gone (BrokenPipeError): nobody to answer, nothing to report
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
