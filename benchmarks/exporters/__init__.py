"""The exporter corpus: ONNX files written by every exporter users use, built locally with random
weights (``python -m benchmarks.exporters.build``; ``bench_corpus --set exporters`` benches them).

One module per exporter (``keras_tf2onnx.py``, ``paddle.py``, ``ort_quant.py``, ...). Each defines:

- ``EXPORTER: str``: the exporter's name as the summary prints it ("tf2onnx", "paddle2onnx", ...);
- ``REQUIREMENTS: tuple[str, ...]``: pip specs of its own builder venv (TensorFlow and Paddle pin
  numpy/protobuf differently from the project, so they never go into ``.venv``); an empty tuple
  means the project's ``.venv`` with the ``corpus`` extra;
- ``build(outdir: pathlib.Path) -> list[dict]``: writes its files into ``outdir`` and returns one
  entry per file: ``{"name", "file" (relative to outdir), "exporter", "shapes" (the ``--shapes``
  string, or None), "notes"}``. A model that failed to build is an entry with ``"error"`` (one
  line) and ``"file": None``: the others go on and ``build.py`` lists it;
- at the bottom ``if __name__ == "__main__": sys.exit(main(build))``, so the module is runnable as
  ``python -m benchmarks.exporters.<module> OUTDIR`` (it prints the entries as JSON, last line).

A module imports its exporter (tensorflow, paddle, torch...) inside ``build``, never at the top:
``build.py`` imports every module in the project's venv to read ``EXPORTER`` and ``REQUIREMENTS``.
This file is stdlib only, since it runs in every builder venv.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FORCE_ENV = "SCHEDX_EXPORTERS_FORCE"  # build.py sets it to "1" under --force
ONLY_ENV = "SCHEDX_EXPORTERS_ONLY"  # build.py's --only model names, comma-separated ("" = every model)


def kept(outdir: Path, file: str) -> bool:
    """Whether ``outdir/file`` exists and is to be kept (build.py was not given ``--force``)."""
    return (Path(outdir) / file).exists() and os.environ.get(FORCE_ENV) != "1"


def wanted(name: str) -> bool:
    """Whether build.py's ``--only`` asks for this model (every model when it names none)."""
    only = [n for n in os.environ.get(ONLY_ENV, "").split(",") if n]
    return not only or name in only


def entry(name: str, file: str | None, exporter: str, shapes: str | None = None, notes: str = "",
          error: str | None = None) -> dict:
    """One manifest entry as a module returns it."""
    out = {"name": name, "file": file, "exporter": exporter, "shapes": shapes, "notes": notes}
    if error:
        out["error"] = error
    return out


def failed(name: str, exporter: str, exc: BaseException, notes: str = "") -> dict:
    """The entry of a model whose build raised: its error in one line, the traceback on stderr."""
    traceback.print_exception(exc, file=sys.stderr)
    text = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    said = " ... ".join(dict.fromkeys([text[0], text[-1]])) if text else ""  # Paddle puts the cause last
    return entry(name, None, exporter, notes=notes, error=f"{type(exc).__name__}: {said}"[:400])


@dataclass(frozen=True)
class Model:
    """One file a module writes: ``make(path)`` writes the ONNX file at ``path``."""

    name: str
    make: Callable[[Path], None]
    shapes: str | None = None
    notes: str = ""


def build_each(outdir: Path, exporter: str, models: list[Model]) -> list[dict]:
    """Write each model wanted (``--only``) into ``outdir/<name>.onnx``, keeping files that exist
    unless forced; each written through a partial file, so a crash leaves no half file. A model that
    raises is an ``error`` entry and the others go on."""
    entries = []
    for m in models:
        if not wanted(m.name):
            continue
        file = f"{m.name}.onnx"
        if not kept(outdir, file):
            partial = Path(outdir) / f".{m.name}.partial.onnx"
            error = _make_apart(m, partial)
            if error:
                partial.unlink(missing_ok=True)
                entries.append(entry(m.name, None, exporter, notes=m.notes, error=error))
                continue
            os.replace(partial, Path(outdir) / file)
        entries.append(entry(m.name, file, exporter, m.shapes, m.notes))
    return entries


def _make_apart(m: Model, path: Path) -> str | None:
    """Run ``m.make(path)`` in a forked child, so that an exporter that exits or crashes the process
    (paddle2onnx exits on a conversion error) fails this model only; its error in one line, or None."""
    import multiprocessing
    import tempfile

    ctx = multiprocessing.get_context("fork")
    read, write = ctx.Pipe(duplex=False)
    log = tempfile.TemporaryFile()

    def child() -> None:
        os.dup2(log.fileno(), 1)  # what the exporter prints (C++ included) goes to the log, not the JSON
        os.dup2(log.fileno(), 2)
        try:
            m.make(path)
            write.send(None)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent as the model's error
            write.send(failed(m.name, "", exc)["error"])

    proc = ctx.Process(target=child)
    proc.start()
    proc.join()
    log.seek(0)
    printed = log.read().decode(errors="replace")
    sys.stderr.write(printed)
    if read.poll():
        return read.recv()
    lines = [ln.strip() for ln in printed.splitlines() if ln.strip()]
    said = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "nothing printed")
    return f"the exporter ended the process (exit code {proc.exitcode}): {said}"[:400]


def main(build: Callable[[Path], list[dict]], argv: list[str] | None = None) -> int:
    """``python -m benchmarks.exporters.<module> OUTDIR``: build, print the entries as JSON (last line)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m benchmarks.exporters.<module> OUTDIR\n")
        return 2
    outdir = Path(args[0])
    outdir.mkdir(parents=True, exist_ok=True)
    entries = build(outdir)
    sys.stdout.write("\n" + json.dumps(entries) + "\n")
    sys.stdout.flush()
    return 0
