"""Build the exporter corpus: run every exporter module of ``benchmarks/exporters`` in its own
builder venv, into a cache folder outside the repository, and write the manifest
(``benchmarks/exporters/manifest.json``, committed: what each file is and which exporter wrote it).

Run: ``python -m benchmarks.exporters.build [--out DIR] [--modules keras_tf2onnx,paddle] [--only NAMES]
[--force]`` (the folder: ``--out``, else ``~/.cache/schedx/exporters``). A module with
``REQUIREMENTS`` runs in ``~/.cache/schedx/exporter-venvs/<module>`` (made with ``python3.11 -m venv``
and those pip specs, reused while they are unchanged; ``$SCHEDX_EXPORTER_PYTHON`` names another
interpreter); one without runs in this interpreter. Files that exist are kept (``--force`` rebuilds);
a module or a model that fails is listed with its error, the others go on, and the manifest keeps
the failures beside the models.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.corpus.build import corpus_dir, describe, manifest_path
from benchmarks.exporters import FORCE_ENV, ONLY_ENV

PACKAGE = "benchmarks.exporters"
ROOT = Path(__file__).resolve().parents[2]  # the repository: the builder venvs import benchmarks from it
NOT_MODULES = {"build"}
REQUIRED_KEYS = ("name", "file", "exporter", "shapes", "notes")


@dataclass(frozen=True)
class Failure:
    """A module or one of its models that did not build, and why (one line)."""

    module: str
    name: str | None  # None: the whole module failed (its venv, a crash, no entries)
    error: str

    def to_json(self) -> dict:
        return {"module": self.module, "name": self.name, "error": self.error}

    def text(self) -> str:
        return f"FAILED {self.module}{'/' + self.name if self.name else ''}: {self.error}"


def out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def modules() -> list[str]:
    """Every exporter module of the package, by dotted name."""
    folder = Path(__file__).parent
    return sorted(f"{PACKAGE}.{m.name}" for m in pkgutil.iter_modules([str(folder)])
                  if not m.name.startswith("_") and m.name not in NOT_MODULES)


def short(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def venv_root() -> Path:
    return Path(os.environ.get("SCHEDX_EXPORTER_VENVS") or Path.home() / ".cache" / "schedx" / "exporter-venvs")


def builder_python(module: str, requirements: tuple[str, ...], log=out) -> str:
    """The interpreter that runs ``module``: this one, or its own venv with ``requirements`` installed
    (made once, remade when the requirements change). Raises ``RuntimeError`` naming the failed command."""
    if not requirements:
        return sys.executable
    folder = venv_root() / short(module)
    stamp = folder / ".schedx-requirements"
    python = folder / "bin" / "python"
    wanted = "\n".join(requirements)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return str(python)
    base = os.environ.get("SCHEDX_EXPORTER_PYTHON", "python3.11")
    steps = [[base, "-m", "venv", "--clear", str(folder)],
             [str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
             [str(python), "-m", "pip", "install", "-q", *requirements]]
    log(f"{short(module)}: making its builder venv in {folder} ({', '.join(requirements)})")
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"`{' '.join(cmd)}` exited {proc.returncode}: {tail}"[:400])
    stamp.write_text(wanted)
    return str(python)


def run_module(module: str, folder: Path, *, force: bool = False, only: list[str] | None = None,
               pythonpath: list[Path] | None = None, timeout: float = 3600, log=out) -> list[dict]:
    """Run one exporter module (in its builder venv) into ``folder``; its entries as it printed them.
    Raises ``RuntimeError`` with a one-line reason when the module fails as a whole."""
    mod = importlib.import_module(module)
    python = builder_python(module, tuple(getattr(mod, "REQUIREMENTS", ())), log)
    paths = [str(p) for p in (pythonpath or [])] + [str(ROOT)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), FORCE_ENV: "1" if force else "0",
           ONLY_ENV: ",".join(only or []), "PYTHONWARNINGS": "ignore", "TF_CPP_MIN_LOG_LEVEL": "2"}
    try:
        proc = subprocess.run([python, "-m", module, str(folder)], capture_output=True, text=True, env=env,
                              timeout=timeout, cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout:.0f} s") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"exited {proc.returncode}: {tail}"[:400])
    return json.loads(lines[-1])


def check_entry(entry: dict) -> str | None:
    """What is wrong with a module's entry, or None."""
    missing = [k for k in REQUIRED_KEYS if k not in entry]
    if missing:
        return f"entry {entry.get('name', '?')} lacks {', '.join(missing)}"
    if entry["shapes"] is not None and not isinstance(entry["shapes"], str):
        return f"entry {entry['name']}: shapes must be a --shapes string or None, not {entry['shapes']!r}"
    return None


def build_all(names: list[str], folder: Path, manifest: Path, *, force: bool = False,
              only: list[str] | None = None, pythonpath: list[Path] | None = None,
              log=out) -> tuple[list[dict], list[Failure]]:
    """Run each module, describe each file it wrote, and write the manifest (entries of modules not
    run this time are kept, as are those of models whose rebuild failed). The models built and the
    failures."""
    folder.mkdir(parents=True, exist_ok=True)
    failures: list[Failure] = []
    built = []
    for module in names:
        t0 = time.perf_counter()
        try:
            entries = run_module(module, folder, force=force, only=only, pythonpath=pythonpath, log=log)
        except Exception as exc:  # noqa: BLE001 - one module's failure is listed, the rest go on
            failures.append(Failure(module, None, f"{type(exc).__name__}: {exc}"[:400]))
            log(failures[-1].text())
            continue
        for e in entries:
            problem = e.get("error") or check_entry(e) or (None if (folder / e["file"]).exists()
                                                            else f"{e['file']} was not written")
            if problem:
                failures.append(Failure(module, e.get("name"), problem))
                log(failures[-1].text())
                continue
            try:
                info = describe(folder / e["file"])
            except Exception as exc:  # noqa: BLE001 - a file onnx cannot read is the model's failure
                failures.append(Failure(module, e["name"], f"onnx cannot read it: {type(exc).__name__}: {exc}"[:400]))
                log(failures[-1].text())
                continue
            row = {"name": e["name"], "family": e["exporter"], "source": short(module), "file": e["file"],
                   "shapes": e["shapes"], "exporter": e["exporter"], "notes": e["notes"],
                   "producer": _producer(folder / e["file"]), **info}
            built.append(row)
            log(f"{e['name']:<34} {e['exporter']:<14} opset {info['opset']} {info['nodes']:>5} nodes "
                f"{info['megabytes']:>7.1f} MB")
        log(f"{short(module)}: {sum(r['source'] == short(module) for r in built)} files in "
            f"{time.perf_counter() - t0:.0f} s")
    write_manifest(manifest, names, built, failures)
    return built, failures


def write_manifest(manifest: Path, names: list[str], built: list[dict], failures: list[Failure]) -> None:
    """Merge this run into the manifest as it is now (another build may have written it since this
    one started: the read and write are under a lock): models built replace their old entries, the
    failures of the modules run replace theirs, and a model whose rebuild failed keeps its entry."""
    manifest.parent.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(str(manifest.resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"schedx-manifest-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = json.loads(manifest.read_text()) if manifest.exists() else {}
        by_name = {m["name"]: m for m in old.get("models", [])} | {m["name"]: m for m in built}
        kept = [Failure(**f) for f in old.get("failures", []) if f["module"] not in names]
        order = {m: i for i, m in enumerate(modules())}
        models = sorted(by_name.values(), key=lambda m: (order.get(f"{PACKAGE}.{m['source']}", len(order)), m["name"]))
        text = json.dumps({"about": "ONNX files written by each exporter (python -m benchmarks.exporters.build); "
                                    "files in ~/.cache/schedx/exporters",
                           "models": models, "failures": [f.to_json() for f in kept + failures]}, indent=1)
        partial = manifest.with_name(f".{manifest.name}.{os.getpid()}")
        partial.write_text(text + "\n")
        os.replace(partial, manifest)


def _producer(path: Path) -> str:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return f"{model.producer_name} {model.producer_version}".strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="the folder (default ~/.cache/schedx/exporters)")
    ap.add_argument("--modules", help="comma-separated exporter modules (default: every one): "
                                      + ", ".join(short(m) for m in modules()))
    ap.add_argument("--only", help="comma-separated model names (the modules still run, building only these)")
    ap.add_argument("--force", action="store_true", help="build again files that exist")
    opts = ap.parse_args(argv)
    every = modules()
    if opts.modules:
        unknown = [m for m in opts.modules.split(",") if f"{PACKAGE}.{m}" not in every]
        if unknown:
            ap.error(f"no exporter module {', '.join(unknown)}; there are {', '.join(short(m) for m in every)}")
        every = [f"{PACKAGE}.{m}" for m in opts.modules.split(",")]
    folder = corpus_dir(opts.out, "exporters")
    built, failures = build_all(every, folder, manifest_path("exporters"), force=opts.force,
                                only=opts.only.split(",") if opts.only else None)
    out(f"{len(built)} files built into {folder}; {len(failures)} failures"
        + "".join(f"\n  {f.text()}" for f in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
