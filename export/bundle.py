"""The bundle on disk: a library, its parameters, a manifest with the sha256 of every file, a README.

Layout (``schedx export ... -o DIR``)::

    lib.so          the compiled library: tvm.runtime.load_module + tvm.runtime.vm.VirtualMachine
    params.bin      parameters (tvm.runtime.save_param_dict), models only
    inputs.npz      sample inputs, by input name
    reference.npz   the reference's outputs on them (output0, ...)
    run.py          a loader that needs only apache-tvm and numpy (export/runner/, joined into one file)
    kernels.cu      CUDA bundles: the generated CUDA source (and kernels_sm_XX.cubin from nvcc)
    README.md       how to load and run it
    manifest.json   workload, signature, target, TVM version, records per task, sha256 of each file
    manifest.sig    optional: an ed25519 signature of manifest.json (``schedx export --sign KEY``,
                    see :mod:`export.signing`)

Reading a bundle checks every hash first (:func:`read_manifest`); nothing is loaded from a bundle
whose files changed. The hashes catch accidents; only a signature checked against a public key
the reader trusts (``read_manifest(folder, trust=PUBKEY)``) catches a bundle rewritten on purpose.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from export import verify_bundle
from export.errors import BundleError
from export.runner.source import write_runner

LIB, PARAMS, INPUTS, REFERENCE, RUNNER, README = "lib.so", "params.bin", "inputs.npz", "reference.npz", "run.py", "README.md"
MANIFEST = verify_bundle.MANIFEST
ROLES = {LIB: "library", PARAMS: "params", INPUTS: "inputs", REFERENCE: "reference", RUNNER: "runner",
         README: "readme"}


def _schedx_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("schedx")
    except PackageNotFoundError:
        return "unknown"


def save_params(path: Path, names: list[str], values: list[np.ndarray]) -> None:
    import tvm

    blob = tvm.runtime.save_param_dict({n: tvm.runtime.tensor(v) for n, v in zip(names, values)})
    path.write_bytes(bytes(blob))


def readme_text(manifest: dict) -> str:
    w, t = manifest["workload"], manifest["target"]
    device = f"tvm.{t['device']}(0)"
    ins = ", ".join(f"{i['name']} {'x'.join(map(str, i['shape']))} {i['dtype']}" for i in manifest["inputs"])
    params_lines = ("params = tvm.runtime.load_param_dict_from_file(\"params.bin\")\n"
                    "order = [p[\"name\"] for p in json.load(open(\"manifest.json\"))[\"params\"]]\n"
                    "args = inputs + [tvm.runtime.tensor(params[n].numpy(), dev) for n in order]"
                    if manifest["params"] else "args = inputs")
    cuda = f"\n{t['bundle_note']}\n" if t.get("bundle_note") else ""
    return f"""# {w['name']} for {t['label']}

Exported by schedx {manifest['schedx_version']} with TVM {manifest['tvm_version']} on {manifest['created']}.
Workload `{w['spec']}` ({w['kind']}), inputs: {ins}.
{cuda}
## Run it (needs only `pip install apache-tvm numpy`)

```bash
python run.py                 # checks every file's sha256, loads, runs inputs.npz, compares with reference.npz
python run.py --runs 50       # and times 50 runs after the first
```

## Load it yourself

```python
import json
import os
if not os.environ.get("TVM_NUM_THREADS") and not os.environ.get("OMP_NUM_THREADS"):  # see below
    os.environ["TVM_NUM_THREADS"] = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                        else os.cpu_count())
os.environ.setdefault("TVM_BIND_THREADS", "0")  # see below
# os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")  # where other work keeps the cores busy: see below
import numpy as np
import tvm
from tvm.runtime.vm import VirtualMachine  # TVM's runtime alone is enough (no compiler needed)

dev = {device}
lib = tvm.runtime.load_module("lib.so")
vm = VirtualMachine(lib, dev)
data = np.load("inputs.npz")
inputs = [tvm.runtime.tensor(data[i["name"]], dev) for i in json.load(open("manifest.json"))["inputs"]]
{params_lines}
out = vm["main"](*args)
```

Set `TVM_NUM_THREADS` before the first run: TVM's own default is half the hardware threads on x86 (it
assumes hyper-threading), so on a VM whose cores are not hyper-threads it runs at half speed (one thread
on 2 cores). `run.py` sets it to the cores this process may use unless you set it or `OMP_NUM_THREADS`
(which TVM reads next), or pass `--threads N`.

`TVM_BIND_THREADS=0` (unless you set it) keeps TVM from pinning each worker thread to a core: a
parallel kernel is cut into one fixed chunk per thread, so a pinned worker whose core another
process holds makes every kernel wait for it (on a busy 2-core machine, 10-100x slower); unpinned,
the OS runs it on whichever core frees first. On a quiet machine the two are alike.

`TVM_THREAD_POOL_SPIN_COUNT=0` lets an idle worker sleep at once instead of spinning (TVM's default:
300000 yields) between kernels. Where other processes keep the cores busy, a spinning worker uses up
its share of the CPU and is run last when a kernel waits for it; a sleeping one is woken promptly
(MobileNetV2 beside three busy processes on 2 cores: 244 ms with TVM's spin, 69 ms without; ONNX
Runtime 56 ms). On a quiet machine spinning is faster (7.3 against 9.8 ms), so `run.py` sets it only
when other processes' threads are runnable as it starts (unless you set it); TVM reads it once.

`main` takes the inputs, then the parameters in the order `manifest.json` lists them. Some are not the
model's weights as the ONNX file has them: batch-norm folded in (`folded`), or a weight already in the
layout its kernel reads (`packed:<initializer>`, computed once at build time). New weights of the same
shapes need only a new `params.bin`, not a new library: `export.build.model_params(workload, target,
schedules)` computes the parameters from the new model as this export did (same target and records),
and `export.bundle.replace_params` writes them and updates the hash.

## What the manifest protects against

`manifest.json` holds every file's sha256, and `run.py` refuses a bundle whose files no longer match
it: that catches accidents (a truncated copy, a file swapped by mistake, a damaged disk), not
someone who rewrites the manifest along with the library. When the bundle was exported with
`--sign KEY`, `manifest.sig` is an ed25519 signature of the manifest: `python run.py --trust KEY.pub`
(needs `pip install cryptography`) refuses it unless that signature verifies with the public key you
were given by a channel you trust, so no file can change without the private key.
"""


def write_bundle(folder: str | Path, *, executable, manifest: dict, inputs: dict[str, np.ndarray],
                 references: list[np.ndarray] | None, param_names: list[str], param_values: list[np.ndarray],
                 extra_files: dict[str, tuple[str, bytes]] | None = None, compiler: str | None = None) -> dict:
    """Write a bundle; ``manifest`` is completed with versions, time and every file's sha256.

    ``extra_files``: ``{name: (role, bytes)}`` (CUDA source, cubin). ``compiler``: the C++
    compiler that links the library (a cross compiler for another architecture; None: the
    default one)."""
    import tvm

    folder = Path(folder)  # a new folder (export.folders.staging_folder): published once verified
    folder.mkdir(parents=True, exist_ok=True)
    if compiler is None:
        executable.export_library(str(folder / LIB))
    else:
        from tvm.support import cc

        if shutil.which(compiler) is None:
            package = "g++-" + compiler.removesuffix("-g++").replace("_", "-")
            raise BundleError(f"the cross compiler {compiler} is not installed: `apt-get install {package}` "
                              f"(`make system` installs it)")
        executable.export_library(str(folder / LIB), fcompile=cc.cross_compiler(compiler))
    if param_names:
        save_params(folder / PARAMS, param_names, param_values)
    np.savez(folder / INPUTS, **inputs)
    if references is not None:
        np.savez(folder / REFERENCE, **{f"output{k}": np.asarray(r) for k, r in enumerate(references)})
    write_runner(folder / RUNNER)
    roles = dict(ROLES)
    for name, (role, data) in (extra_files or {}).items():
        (folder / name).write_bytes(data)
        roles[name] = role
    manifest = {"format": verify_bundle.FORMAT, "format_version": verify_bundle.FORMAT_VERSION,
                "schedx_version": _schedx_version(), "tvm_version": tvm.__version__,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **manifest}
    (folder / README).write_text(readme_text(manifest))
    files = {}
    for name in sorted(roles):
        path = folder / name
        if path.is_file():
            files[name] = {"role": roles[name], "sha256": verify_bundle.sha256_file(path), "bytes": path.stat().st_size}
    manifest["files"] = files
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
    return manifest


def read_manifest(folder: str | Path, *, trust: str | Path | None = None) -> dict:
    """The manifest, once every file is present and matches its hash (else :class:`BundleError`);
    with ``trust`` (a public key file), once the manifest's signature verifies with it too."""
    try:
        return verify_bundle.check_bundle(folder, trust=trust)
    except verify_bundle.BundleCheckError as err:
        raise BundleError(str(err)) from None


def replace_params(folder: str | Path, names: list[str], values: list[np.ndarray]) -> dict:
    """Give a bundle new weights without recompiling: write ``params.bin`` anew and update its hash.

    Names, shapes and dtypes must be those the manifest lists (the library was built for them).
    Packed weights (``packed:<initializer>``) must be in the layout this export's kernels read:
    compute the values with :func:`export.build.model_params` for the export's target and records
    (the check here cannot tell two layouts of one shape apart). The saved reference outputs no
    longer apply and are removed. Returns the updated manifest."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    want = [(p["name"], tuple(p["shape"]), p["dtype"]) for p in manifest["params"]]
    got = [(n, tuple(int(d) for d in v.shape), str(v.dtype)) for n, v in zip(names, values)]
    if want != got:
        diff = next(((w, g) for w, g in zip(want, got) if w != g), (len(want), len(got)))
        raise BundleError(f"the new parameters do not fit the library: expected {diff[0]}, got {diff[1]}")
    save_params(folder / PARAMS, names, values)
    files = manifest["files"]
    files[PARAMS].update(sha256=verify_bundle.sha256_file(folder / PARAMS), bytes=(folder / PARAMS).stat().st_size)
    if REFERENCE in files:
        del files[REFERENCE]
        (folder / REFERENCE).unlink(missing_ok=True)
    manifest["params_replaced"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
    (folder / verify_bundle.SIGNATURE).unlink(missing_ok=True)  # it signed the old manifest: sign again
    return manifest


def zip_bundle(folder: str | Path) -> bytes:
    """The bundle as a zip archive in memory, files under a folder named after the bundle."""
    folder = Path(folder)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.iterdir()):
            if path.is_file():
                zf.write(path, f"{folder.name}/{path.name}")
    return buffer.getvalue()


__all__ = ["INPUTS", "LIB", "MANIFEST", "PARAMS", "REFERENCE", "RUNNER", "read_manifest",
           "readme_text", "replace_params", "save_params", "write_bundle", "zip_bundle"]
