"""Build the kit that checks schedx CUDA bundles on a real NVIDIA GPU with only TVM's runtime there.

The device machine has no apache-tvm, and what travels to it is limited to 64 MiB: the compiler
library alone (``libtvm_compiler.so``, ~250 MiB) exceeds that. So the bundles are exported here,
and the kit carries them with a runtime-only copy of the installed ``tvm`` package and the
apache-tvm-ffi wheel for the device's Python; its ``run.sh`` runs ``python -m export.gpu_check``
on each bundle (from this repository, on ``PYTHONPATH``) and writes ``$OUT/gpu_report.json``.

Run: ``python -m benchmarks.gpu_kit --out DIR [--models a,b,...] [--arch sm_90] [--python 3.12]``.
Figures: 2026-12-04, NVIDIA H200 (driver 580.159.04): 17/17 bundles verified, each loaded its
sm_90 cubin; see README.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path.home() / ".cache" / "schedx" / "corpus"
ZOO_MODELS = ("small_cnn", "mobilenet_v2")
CORPUS_MODELS = ("lstm_tagger", "gru_voice_activity", "wav2vec2_small", "whisper_encoder_small", "hf_vit_small",
                 "gpt2_small", "bert_small", "mobilenet_v2_int8_qdq", "squeezenet1_1", "dbnet_text_detector",
                 "crnn", "byte_conv_classifier", "bert_small_int8_dynamic", "lstm_tagger_int8_dynamic",
                 "mobilenet_v3_small")
# the `schedx` console script (pyproject: schedx = "app.cli:main"), run with this interpreter
SCHEDX = [sys.executable, "-c", "import sys; from app.cli import main; sys.argv[0] = 'schedx'; main()"]
TVM_RT_SKIP_DIRS = {"3rdparty", "src"}  # top-level folders of the tvm package left out
TVM_RT_SKIP_FILES = {"lib/libtvm_compiler.so"}
FFI_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")

RUN_SH = r"""#!/bin/bash
# schedx CUDA bundles on a real GPU, with a runtime-only TVM (written by benchmarks/gpu_kit.py)
# usage: bash KIT/run.sh [REPO_ROOT]   (repo root: argument, else $SCHEDX_ROOT, else KIT/..)
KIT=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "${1:-${SCHEDX_ROOT:-$KIT/..}}" && pwd) || exit 3
[ -f "$ROOT/export/gpu_check.py" ] || { echo "no schedx repository at $ROOT" >&2; exit 3; }
export OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
cd "$ROOT"
export PYTHONUNBUFFERED=1
rm -rf /tmp/site /tmp/res /tmp/b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$KIT"/whl/*.whl || exit 3
tar -xzf "$KIT/tvm_rt.tar.gz" -C /tmp/site || exit 3
export PYTHONPATH=/tmp/site:$ROOT TVM_USE_RUNTIME_LIB=1
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
nproc; python3 -c "import sys; print(sys.version)"
mkdir -p /tmp/res /tmp/b && tar -xJf "$KIT/bundles.tar.xz" -C /tmp/b || exit 3
for b in /tmp/b/*/; do
  n=$(basename "$b")
  t0=$(date +%s.%N)
  timeout 90 python3 -m export.gpu_check "$b" --runs 200 --budget 3 --json --out /tmp/res/$n.json > /tmp/res/$n.txt 2>&1
  rc=$?
  if [ $rc -eq 2 ]; then cp /tmp/res/$n.json /tmp/res/$n.nvrtc.json 2>/dev/null
    TVM_CUDA_COMPILE_MODE=nvcc timeout 90 python3 -m export.gpu_check "$b" --runs 200 --budget 3 --json --out /tmp/res/$n.json > /tmp/res/$n.txt 2>&1; rc=$?; fi
  echo "$n rc=$rc $(python3 -c "import time; print(round(time.time()-$t0,1))")s $(python3 -c "
import json,sys
r=json.load(open('/tmp/res/$n.json'))
c=r.get('check',{})
print(r.get('error') or f\"verified={c.get('verified')} max_rel={c.get('max_rel_error')} median_ms={round(r.get('median_s',0)*1e3,4)} load_s={round(r.get('load_s',0),2)} first_s={round(r.get('first_s',0),2)}\")
" 2>&1 | tail -1)"
done
[ -d /tmp/b/small_cnn ] && (cd /tmp/b/small_cnn && python3 run.py --device cuda --runs 50 --without-torch 2>&1 | tail -6)
python3 "$KIT/torch_ref.py" 2>&1 | tail -20
python3 - <<'PY'
import glob, json, os
out = {os.path.basename(f)[:-5]: json.load(open(f)) for f in sorted(glob.glob("/tmp/res/*.json"))}
json.dump(out, open(os.environ["OUT"] + "/gpu_report.json", "w"), indent=1, default=str)
PY
tar -czf "$OUT/gpu_logs.tgz" -C /tmp/res .
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def default_models() -> list[str]:
    """The zoo models, then the corpus ONNX files present here."""
    present = [name for name in CORPUS_MODELS if (CORPUS / f"{name}.onnx").is_file()]
    missing = sorted(set(CORPUS_MODELS) - set(present))
    if missing:
        log(f"not in {CORPUS}, skipped: {', '.join(missing)}")
    return [*ZOO_MODELS, *present]


def workload_for(name: str) -> str:
    """What `schedx export` gets for a model name: the zoo name, else the corpus file when there is one."""
    path = CORPUS / f"{name}.onnx"
    return str(path) if name not in ZOO_MODELS and path.is_file() else name


def export_bundles(models: list[str], arch: str, bundles: Path) -> list[str]:
    """Export each model for cuda:ARCH into BUNDLES/NAME; return the names that exported."""
    exported = []
    for name in models:
        t0 = time.perf_counter()
        cmd = [*SCHEDX, "export", workload_for(name), "--target", f"cuda:{arch}", "-o", str(bundles / name), "--no-db"]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if proc.returncode == 0:
            exported.append(name)
            log(f"exported {name} ({seconds:.1f} s)")
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            log(f"export of {name} failed (rc={proc.returncode}, {seconds:.1f} s), skipped: {' | '.join(tail)}")
    return exported


def pack_bundles(bundles: Path, names: list[str], dest: Path) -> None:
    with tarfile.open(dest, "w:xz") as tar:
        for name in names:
            tar.add(bundles / name, arcname=name)


def tvm_package_dir() -> Path:
    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the tvm package is not installed in this environment")
    return Path(list(spec.submodule_search_locations)[0])


def pack_tvm_runtime(dest: Path) -> None:
    """The installed tvm package without sources, caches and the compiler library, under `tvm/`.

    Walks by hand so that left-out files never reach the archive (tarfile would otherwise note
    their inodes, and an included hard link to one would point at a missing member).
    """
    root = tvm_package_dir()
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(root, arcname="tvm", recursive=False)
        for folder, dirs, files in os.walk(root):
            rel = Path(folder).relative_to(root)
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (rel == Path(".") and d in TVM_RT_SKIP_DIRS))
            for entry in [*dirs, *sorted(files)]:
                if (rel / entry).as_posix() not in TVM_RT_SKIP_FILES:
                    tar.add(Path(folder) / entry, arcname=f"tvm/{(rel / entry).as_posix()}", recursive=False)


def download_ffi_wheel(python: str, dest: Path) -> None:
    """The apache-tvm-ffi wheel of the installed version for CPython PYTHON on x86-64 Linux."""
    version = importlib.metadata.version("apache-tvm-ffi")
    platforms = [arg for platform in FFI_PLATFORMS for arg in ("--platform", platform)]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", python,
           "--implementation", "cp", *platforms, "-d", str(dest), f"apache-tvm-ffi=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise SystemExit(f"pip download of apache-tvm-ffi=={version} failed:\n{proc.stderr.strip()[-2000:]}")
    log(f"downloaded {', '.join(w.name for w in wheels)}")


def write_device_scripts(out: Path) -> None:
    run_sh = out / "run.sh"
    run_sh.write_text(RUN_SH)
    run_sh.chmod(0o755)
    shutil.copyfile(Path(__file__).with_name("gpu_torch_ref.py"), out / "torch_ref.py")


def folder_size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the kit that checks schedx CUDA bundles on a real GPU.")
    parser.add_argument("--out", required=True, type=Path, help="the kit folder to write")
    parser.add_argument("--models", help="comma-separated model names (default: zoo + corpus list)")
    parser.add_argument("--arch", default="sm_90", help="CUDA architecture to export for")
    parser.add_argument("--python", default="3.12", help="the device's Python version, for the apache-tvm-ffi wheel")
    opts = parser.parse_args(argv)
    models = [m.strip() for m in opts.models.split(",") if m.strip()] if opts.models else default_models()
    out: Path = opts.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu_kit_") as tmp:
        bundles = Path(tmp) / "bundles"
        names = export_bundles(models, opts.arch, bundles)
        if not names:
            log("no bundle exported; nothing to check")
            return 1
        log(f"packing {len(names)} bundle(s) into {out / 'bundles.tar.xz'}")
        pack_bundles(bundles, names, out / "bundles.tar.xz")
    log("packing the runtime-only tvm package")
    pack_tvm_runtime(out / "tvm_rt.tar.gz")
    shutil.rmtree(out / "whl", ignore_errors=True)
    download_ffi_wheel(opts.python, out / "whl")
    write_device_scripts(out)
    log(f"kit: {out} ({folder_size(out) / 2**20:.1f} MiB; the device tool carries at most 64 MiB)")
    log(f"bundles: {', '.join(names)}")
    log("use: copy the kit into the repo as an ignored folder (e.g. .gpu), carry it, and run `bash .gpu/run.sh`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
