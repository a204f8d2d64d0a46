"""Load and run an exported schedx bundle with nothing but apache-tvm and numpy.

This file is copied into every bundle as ``run.py``, so a clean Python with only ``apache-tvm``
installed can check and run a bundle (the runtime alone does: a runtime-only TVM, or
``TVM_USE_RUNTIME_LIB=1``, loads the library and runs it through ``tvm.runtime.vm``)::

    python run.py                      # check hashes, load, run inputs.npz, compare with reference.npz
    python run.py --runs 50 --json     # also time 50 runs after the first one
    python -m export.verify_bundle BUNDLE_DIR --out outputs.npz   # the same, from schedx

Before anything is loaded every file listed in ``manifest.json`` is hashed; a missing or changed
file stops the run with a message naming it. That catches accidents (a truncated copy, a file
swapped by mistake, a damaged disk), not an attacker, who can rewrite the manifest too. A signed
bundle (``schedx export --sign KEY``) also carries ``manifest.sig``, an ed25519 signature of the
manifest's bytes; ``python run.py --trust PUBKEY.pem`` (``schedx run --trust``) refuses the bundle
unless that signature verifies with the given public key, so no file can change without the
private key. Checking a signature needs the ``cryptography`` package; nothing else here does.
Keep this module free of schedx imports: it must run where schedx is not installed
(``foreign_modules`` in the report lists any that got loaded).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"  # raw 64-byte ed25519 signature of manifest.json's bytes
FORMAT = "schedx-bundle"
FORMAT_VERSION = 1
_FOREIGN = ("explorer", "app", "search", "store", "onnx", "onnxruntime", "torch", "streamlit", "click")


class BundleCheckError(Exception):
    """The bundle cannot be trusted or used: a file is missing, changed, or the manifest is bad."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_signature(folder: str | os.PathLike, manifest_bytes: bytes, public_key: str | os.PathLike) -> None:
    """Refuse (:class:`BundleCheckError`) unless ``manifest.sig`` in ``folder`` is an ed25519
    signature of ``manifest_bytes`` by the private key of ``public_key`` (a PEM file)."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.hazmat.primitives.serialization import load_pem_public_key
    except ImportError:
        raise BundleCheckError("checking a bundle's signature needs the cryptography package: "
                               "pip install cryptography") from None
    try:
        key = load_pem_public_key(Path(public_key).read_bytes())
    except (OSError, ValueError, TypeError) as err:
        raise BundleCheckError(f"cannot read the public key {public_key}: {err}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BundleCheckError(f"{public_key} is not an ed25519 public key (schedx keygen makes one)")
    sig = Path(folder) / SIGNATURE
    if sig.is_symlink() or not sig.is_file():
        raise BundleCheckError(f"refused: {folder} is not signed (no {SIGNATURE}) and --trust asks for a signature. "
                               f"Nothing was loaded")
    try:
        key.verify(sig.read_bytes(), manifest_bytes)
    except InvalidSignature:
        raise BundleCheckError(f"refused: the signature in {SIGNATURE} does not verify with {public_key}: the "
                               f"manifest changed after it was signed, or another key signed it. Nothing was "
                               f"loaded") from None


def check_bundle(folder: str | os.PathLike, *, trust: str | os.PathLike | None = None) -> dict:
    """The manifest of ``folder`` once every file it lists is present with its recorded sha256
    (and, with ``trust``, once the manifest's signature verifies with that public key)."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise BundleCheckError(f"{folder} is not a folder: give the folder `schedx export -o DIR` wrote")
    if path.is_symlink():
        raise BundleCheckError(f"refused: {MANIFEST} in {folder} is a link, not a plain file. Nothing was loaded")
    if not path.is_file():
        raise BundleCheckError(f"{folder} has no {MANIFEST}: not a schedx bundle")
    try:
        data = path.read_bytes()  # read once: the bytes checked are the bytes used
        if trust is not None:
            check_signature(folder, data, trust)
        manifest = json.loads(data)
    except (OSError, ValueError) as err:
        raise BundleCheckError(f"{path} is not readable JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleCheckError(f"{path} is not a schedx bundle manifest")
    if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise BundleCheckError(f"{path} was written by a newer schedx (format {manifest.get('format_version')})")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BundleCheckError(f"{path} lists no files")
    if file_with_role(manifest, "library") is None:
        raise BundleCheckError(f"{path} lists no library file")
    for name, entry in files.items():
        if Path(name).name != name:
            raise BundleCheckError(f"{path} lists a file outside the bundle: {name!r}")
        where = folder / name
        role = entry.get("role", "file")
        if where.is_symlink() or (where.exists() and not where.is_file()):
            raise BundleCheckError(f"refused: {name} in {folder} is a link or a special file, not a plain file; "
                                   f"a bundle holds only its own files. Nothing was loaded")
        if not where.is_file():
            what = "parameters file" if role == "params" else f"{role} file"
            raise BundleCheckError(f"the {what} {name} is missing from {folder}; the bundle cannot run without it "
                                   f"(export it again)")
        actual = sha256_file(where)
        if actual != entry.get("sha256"):
            raise BundleCheckError(f"refused: {name} does not match the sha256 in {MANIFEST} "
                                   f"({actual[:12]}... vs {str(entry.get('sha256'))[:12]}...): it changed after export. "
                                   f"Nothing was loaded")
    if trust is not None:  # a signed bundle is exactly what its manifest lists: nothing more, nothing special
        check_nothing_unlisted(folder, files)
    return manifest


def check_nothing_unlisted(folder: Path, files: dict) -> None:
    """Refuse a signed bundle ``folder`` holding anything its manifest does not list."""
    listed = set(files) | {MANIFEST, SIGNATURE}
    extra = sorted(entry.name for entry in os.scandir(folder) if entry.name not in listed)
    if extra:
        raise BundleCheckError(f"refused: {', '.join(extra[:5])} in {folder} {'is' if len(extra) == 1 else 'are'} "
                               f"not in the signed manifest; a signed bundle holds only the files it lists "
                               f"(remove {'it' if len(extra) == 1 else 'them'}, or export again). Nothing was loaded")


def file_with_role(manifest: dict, role: str) -> str | None:
    return next((n for n, e in manifest["files"].items() if e.get("role") == role), None)


def cuda_compile_mode() -> str:
    """How TVM will compile the CUDA source when the library loads: NVRTC needs ``cuda-python``;
    without it, nvcc (when on PATH) is chosen through ``TVM_CUDA_COMPILE_MODE``."""
    import importlib.util
    import shutil

    mode = os.environ.get("TVM_CUDA_COMPILE_MODE")
    if not mode:
        mode = "nvrtc" if importlib.util.find_spec("cuda") is not None or not shutil.which("nvcc") else "nvcc"
        os.environ["TVM_CUDA_COMPILE_MODE"] = mode
    return mode


def load_cuda_runtime() -> bool:
    """Make TVM's CUDA runtime available; True when ``tvm.cuda(0)`` exists afterwards.

    A full TVM loads its CUDA library (``libtvm_runtime_cuda.so``, beside ``libtvm_runtime.so``) when
    imported; a runtime-only TVM (``TVM_USE_RUNTIME_LIB=1``, or an install without the compiler)
    loads no device library, so ``tvm.cuda(0)`` would not exist even on a machine with a GPU."""
    import ctypes

    import tvm

    loaded = getattr(tvm.base, "_LOADED_LIBS", {})
    if "tvm_runtime_cuda" not in loaded and "tvm_runtime" in loaded:
        library = Path(loaded["tvm_runtime"]._name).resolve().parent / "libtvm_runtime_cuda.so"
        if library.exists():
            try:
                loaded["tvm_runtime_cuda"] = ctypes.CDLL(str(library), mode=ctypes.RTLD_LOCAL)
            except OSError:  # no NVIDIA driver (libcuda.so.1) on this machine: no CUDA device
                pass
    return bool(tvm.cuda(0).exist)


def cuda_code_loader(folder: str | os.PathLike, manifest: dict, used: list | None = None, arch: str | None = None):
    """The function TVM's CUDA runtime calls (``tvm_callback_cuda_compile``) with the kernels' source
    when the library loads: the bundle's own cubin when the source is the one it was built from and
    the GPU is of its architecture (nothing to compile, no compiler needed), else the source
    compiled for the GPU found here (NVRTC with ``cuda-python``, or nvcc: :func:`cuda_compile_mode`).
    TVM's own callback reads the compile target from its compiler, which a runtime-only TVM lacks.
    What it did is appended to ``used``; ``arch`` (``sm_90``) stands for the GPU's own."""
    folder = Path(folder)
    files = manifest.get("files", {})
    source_sha = next((info["sha256"] for info in files.values() if info.get("role") == "cuda-source"), None)
    cubins = {name for name, info in files.items() if info.get("role") == "cubin"}
    log = used if used is not None else []

    def load_code(code) -> bytes:
        import tvm

        text = code.decode() if isinstance(code, (bytes, bytearray)) else str(code)
        gpu = arch or "sm_" + str(tvm.cuda(0).compute_version).replace(".", "")
        shipped = f"kernels_{gpu}.cubin"
        if shipped in cubins and hashlib.sha256(text.encode()).hexdigest() == source_sha:
            log.append(f"the bundle's {shipped} (built at export; nothing compiled here)")
            return (folder / shipped).read_bytes()
        start = time.perf_counter()
        binary, how = _compile_cuda(text, gpu)
        log.append(f"the source compiled here for {gpu} with {how} ({time.perf_counter() - start:.1f} s)")
        return binary

    return load_code


# nvcc's options as TVM's own CUDA compile passes them (half and bfloat16 operators, fast math)
_NVCC_OPTIONS = ("-O3", "--use_fast_math", "--expt-relaxed-constexpr", "--expt-extended-lambda",
                 *(f"-U__CUDA_NO_{kind}_{what}__" for kind in ("HALF", "BFLOAT16", "BFLOAT162")
                   for what in ("OPERATORS", "CONVERSIONS")))


def _compile_cuda(source: str, arch: str) -> tuple[bytes, str]:
    """A cubin of ``source`` for ``arch`` and the compiler used: nvcc itself where it is chosen
    (``TVM_CUDA_COMPILE_MODE=nvcc``) or where a runtime-only TVM has no compiler to ask, else TVM's
    NVRTC path (which reads the target from TVM's compiler, so it runs in a target scope)."""
    import shutil
    import subprocess
    import tempfile

    import tvm

    nvcc = shutil.which("nvcc")
    if nvcc and (cuda_compile_mode() == "nvcc" or getattr(tvm.base, "_RUNTIME_ONLY", False)):
        with tempfile.TemporaryDirectory(prefix="schedx-cuda-") as tmp:
            src, out = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.cubin"
            src.write_text(source)
            proc = subprocess.run([nvcc, "--cubin", f"-arch={arch}", *_NVCC_OPTIONS, "-o", str(out), str(src)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise BundleCheckError(f"nvcc could not compile the kernels for {arch}: "
                                       f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
            return out.read_bytes(), "nvcc"
    from tvm.support import nvcc as tvm_nvcc

    with tvm.target.Target({"kind": "cuda", "arch": arch}):
        return bytes(tvm_nvcc.compile_cuda(source, target_format="cubin", arch=arch, compiler="nvrtc")), "nvrtc"


def _flatten(value) -> list:
    if hasattr(value, "numpy"):
        return [value]
    out = []
    for v in value:
        out.extend(_flatten(v))
    return out


# The comparison rule, written once: this file's run.py uses it, and so do schedx's export
# (export.verify) and kernel measurements (explorer.measure.verify), which import it from here.
# dtype -> (rtol: share of the output's scale, atol: an absolute floor that only lets a reference of
# exact zeros accept denormal noise). Integers and booleans compare exactly.
TOLERANCES = {"float64": (1e-9, 1e-300), "float32": (1e-4, 1e-35), "float16": (1e-2, 1e-7), "bfloat16": (2e-2, 1e-35)}
# The spacing of each float dtype's values at 1.0 (its "ulp" there).
_UNIT_SPACING = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
# How many of those steps a bounded non-linearity (range within [-1, 1]) may be off by, in absolute
# terms: implementations compute them to absolute, not relative, accuracy. ONNX Runtime's Sigmoid is
# off by up to 1.1 float32 steps of 1.0 (1.3e-7) at every input below -5, 5x the value itself at -17.
ACTIVATION_STEPS = 4


def tolerances(dtype: str) -> tuple[float, float]:
    """``(rtol, atol)`` for ``dtype``: exact (0, 0) for integers and booleans."""
    if dtype in TOLERANCES:
        return TOLERANCES[dtype]
    if "int" in dtype or dtype == "bool":
        return 0.0, 0.0
    return TOLERANCES["float32"]


def _sigmoid(r):
    """Sigmoid: its input is ``log(r / (1 - r))``, its slope ``r (1 - r)``."""
    import numpy as np

    inside = r[(r > 0) & (r < 1)]
    pre = np.log(inside) - np.log1p(-inside)
    return (float(np.abs(pre).max()) if pre.size else 0.0), np.clip(r * (1 - r), 0.0, None)


def _tanh(r):
    """Tanh: its input is ``atanh(r)``, its slope ``1 - r^2``."""
    import numpy as np

    pre = np.arctanh(r[np.abs(r) < 1])
    return (float(np.abs(pre).max()) if pre.size else 0.0), np.clip(1 - r * r, 0.0, None)


def _softmax(r):
    """Softmax: its input is ``log r`` up to a shift (the scale is their spread), and an error of
    ``d`` in every input moves an output ``p`` by at most ``2 p (1 - p) d``."""
    import numpy as np

    pre = np.log(r[r > 0])
    return (float(pre.max() - pre.min()) if pre.size else 0.0), np.clip(2 * r * (1 - r), 0.0, None)


# An output's last non-linearity (its ONNX operator), when it is one that shrinks the scale of what
# it gets: name -> the scale of its input and its slope at each element, recovered from the reference.
ACTIVATIONS = {"Sigmoid": _sigmoid, "Tanh": _tanh, "Softmax": _softmax}


def _plain(value):
    """A numpy scalar as a JSON-ready Python number."""
    value = value.item() if hasattr(value, "item") else value
    return value if isinstance(value, (bool, int, float)) else float(value)


def compare_output(out, ref, *, rtol: float | None = None, activation: str | None = None,
                   steps: float | None = None) -> dict:
    """One output against its reference, element by element (arrays of any rank, 0-d included).

    An element agrees when ``|out - ref| <= atol + rtol * max |ref|`` (the output's own scale;
    ``rtol`` and ``atol`` per dtype, :data:`TOLERANCES`); ``steps`` (an int8 model: a few
    quantization steps, absolute) is accepted as well. When the output is made by a non-linearity
    of :data:`ACTIVATIONS`, an element also agrees when its error is what that function's input,
    checked at its own scale, explains: ``ACTIVATION_STEPS`` steps of the dtype at 1.0 (the
    function's absolute accuracy) plus ``rtol * scale of the input * slope at the element``. A
    sigmoid of logits near -10 has values near 1e-4 whose error is measured, through the sigmoid's
    slope, against logits of ~10; a wrong kernel still moves the output by far more than that.

    ``rtol`` replaces the dtype's relative bound for float outputs (a bundle's manifest tolerance).
    The result is plain data: ``ok``, ``max_abs_error``, ``max_rel_error`` (against max |ref|),
    ``scale``, ``rule`` (in words), ``why`` and ``worst``: the element furthest past, or nearest to,
    what it is allowed (``index``, ``got``, ``expected``, ``error``, ``allowed``, ``rule``, ``ok``)."""
    import numpy as np

    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return {"ok": False, "max_abs_error": float("inf"), "max_rel_error": float("inf"), "scale": None,
                "rule": "the same shape", "worst": None, "why": f"shape {out.shape}, expected {ref.shape}"}
    dtype = str(out.dtype)
    dtype_rtol, atol = tolerances(dtype)
    rtol = rtol if rtol is not None and dtype_rtol else dtype_rtol
    o, r = out.astype("float64").reshape(-1), ref.astype("float64").reshape(-1)  # 0-d: one element
    with np.errstate(invalid="ignore"):
        diff = np.abs(o - r)
    diff[(o == r) | (np.isnan(o) & np.isnan(r))] = 0.0  # the same inf, or NaN where the reference has NaN
    diff[np.isnan(diff)] = np.inf
    finite = np.abs(r[np.isfinite(r)])
    scale = float(finite.max()) if finite.size else 0.0
    allowed = np.full(diff.shape, atol + rtol * scale)
    rule = (f"error <= {rtol:.0e} x max |ref| ({scale:.2e})" + (f" + {atol:.0e}" if atol else "")) if rtol else "exact"
    if steps:
        allowed = np.maximum(allowed, float(steps))
        rule += f", or <= {float(steps):.2e} (a few quantization steps)"
    recover = ACTIVATIONS.get(activation or "") if rtol else None
    if recover is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            pre_scale, slope = recover(np.where(np.isfinite(r), r, 0.0))
        floor = ACTIVATION_STEPS * _UNIT_SPACING.get(dtype, 2.0 ** -23)
        allowed = np.maximum(allowed, floor + rtol * pre_scale * slope)
        rule += (f"; or, as the {activation} of an input of scale {pre_scale:.3g}: <= {floor:.1e} ({ACTIVATION_STEPS} "
                 f"{dtype} steps of 1.0) + {rtol:.0e} x {pre_scale:.3g} x the {activation}'s slope at the element")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / allowed)  # inf where nothing is allowed and something differs
    abs_err = float(diff.max()) if diff.size else 0.0
    rel_err = abs_err / scale if scale > 0 else (0.0 if abs_err == 0 else float("inf"))
    ok, worst = True, None
    if diff.size:
        i = int(np.argmax(ratio))
        ok = bool(ratio[i] <= 1.0)
        worst = {"index": [int(j) for j in np.unravel_index(i, out.shape)], "got": _plain(out.reshape(-1)[i]),
                 "expected": _plain(ref.reshape(-1)[i]), "error": float(diff[i]), "allowed": float(allowed[i]),
                 "ratio": float(ratio[i]), "rule": rule, "ok": ok}
    return {"ok": ok, "max_abs_error": abs_err, "max_rel_error": rel_err, "scale": scale, "rule": rule,
            "worst": worst, "why": ""}


def _number(value) -> str:
    return f"{value:.7g}" if isinstance(value, float) else repr(value)


def describe_worst(worst: dict) -> str:
    """One sentence on a worst element (as :func:`compare_outputs` gives it) and the rule it was held to."""
    verb, sign = ("is nearest its bound", "<=") if worst["ok"] else ("differs from the reference", ">")
    return (f"output {worst.get('output', 0)} {verb} at {tuple(worst['index'])}: got {_number(worst['got'])}, "
            f"expected {_number(worst['expected'])} (error {worst['error']:.2e} {sign} {worst['allowed']:.2e} "
            f"allowed there; rule: {worst['rule']})")


def compare_outputs(outputs: list, references: list, *, rtol: float | None = None,
                    output_atol: list | None = None, activations: list | None = None) -> dict:
    """Every output against its reference with :func:`compare_output` (``output_atol`` and
    ``activations``: per output, as a bundle's manifest lists them). Plain data: ``verified``,
    ``max_abs_error``, ``max_rel_error``, ``why`` (the first failing output's worst element, in
    words), ``worst`` (the worst element over all outputs, with its ``output`` number) and
    ``outputs`` (each output's result)."""
    results = []
    for k, (out, ref) in enumerate(zip(outputs, references)):
        step = output_atol[k] if output_atol and k < len(output_atol) else None
        act = activations[k] if activations and k < len(activations) else None
        result = compare_output(out, ref, rtol=rtol, activation=act, steps=step)
        if result["worst"] is not None:
            result["worst"]["output"] = k
        results.append(result)
    why = "" if len(outputs) == len(references) else f"{len(outputs)} outputs, the reference has {len(references)}"
    failing = next((k for k, r in enumerate(results) if not r["ok"]), None)
    if failing is not None:
        bad = results[failing]
        why = describe_worst(bad["worst"]) if bad["worst"] else f"output {failing}: {bad['why']}"
    worsts = [r["worst"] for r in results if r["worst"] is not None]
    return {"verified": not why, "max_abs_error": max((r["max_abs_error"] for r in results), default=0.0),
            "max_rel_error": max((r["max_rel_error"] for r in results), default=0.0), "why": why,
            "worst": max(worsts, key=lambda w: w["ratio"], default=None), "outputs": results}


def profile_calls(vm, args: list, dev, runs: int) -> dict:
    """Seconds per run spent in each function ``main`` calls (kernels by their symbol, VM builtins
    too), timed around every call by a VM instrument, and the end-to-end time of those runs (the
    instrument's own cost is the difference between the two). Each figure is the median over
    ``runs`` runs, after one run that is not counted: a sum over the runs took in every pause of
    the Python callback, and a small model's rows moved severalfold between profiles."""
    import statistics

    totals: dict[str, list] = {}
    started: list[float] = []

    def instrument(func, symbol, before_run, ret_value, *call_args):
        if before_run:
            started.append(time.perf_counter())
        else:
            dev.sync()
            entry = totals.setdefault(str(symbol), [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - started.pop()
        return 0

    vm.set_instrument(instrument)
    vm["main"](*args)  # a first instrumented run, not counted: it pays the callback's set-up once
    dev.sync()
    per_run: list[dict[str, list]] = []
    walls = []
    for _ in range(runs):
        totals.clear()
        begin = time.perf_counter()
        vm["main"](*args)
        dev.sync()
        walls.append(time.perf_counter() - begin)
        per_run.append({name: list(entry) for name, entry in totals.items()})
    vm.set_instrument(None)
    names = {name for run in per_run for name in run}
    calls = {name: {"calls": max(run.get(name, [0, 0.0])[0] for run in per_run),
                    "seconds": statistics.median(run.get(name, [0, 0.0])[1] for run in per_run)} for name in names}
    return {"runs": runs, "instrumented_run_s": statistics.median(walls), "calls": calls}


def run_bundle(folder: str | os.PathLike, *, inputs_file: str | None = None, device: str | None = None,
               runs: int = 0, budget_s: float = 30.0, profile: int = 0,
               trust: str | os.PathLike | None = None) -> tuple[dict, list]:
    """Check, load and run a bundle: a report (plain data) and the outputs (numpy arrays).

    The report holds ``load_s`` (library, VM, parameters), ``first_s`` (the first inference) and,
    with ``runs``, ``latencies_s``/``median_s``/``p90_s`` of up to ``runs`` more runs (fewer when
    ``budget_s`` is spent), and with ``profile`` the time per called function (:func:`profile_calls`).
    ``trust``: a public key the manifest's signature must verify with (see the module docstring)."""
    import numpy as np

    folder = Path(folder)
    manifest = check_bundle(folder, trust=trust)
    import tvm
    from tvm.runtime.vm import VirtualMachine  # the runtime's VM: a runtime-only TVM loads the bundle

    device = device or manifest.get("target", {}).get("device", "cpu")
    dev = tvm.cuda(0) if device == "cuda" else tvm.cpu(0)
    if device == "cuda" and not load_cuda_runtime():
        raise BundleCheckError("this is a CUDA bundle and no CUDA device is visible here")
    cuda_code: list[str] = []
    if device == "cuda":
        import tvm.support.nvcc  # noqa: F401 - registers TVM's callback first, so ours overrides it
        import tvm_ffi

        tvm_ffi.register_global_func("tvm_callback_cuda_compile", cuda_code_loader(folder, manifest, cuda_code),
                                     override=True)
    start = time.perf_counter()
    lib = tvm.runtime.load_module(str(folder / file_with_role(manifest, "library")))
    vm = VirtualMachine(lib, dev)
    params = []
    params_file = file_with_role(manifest, "params")
    if manifest.get("params"):
        if params_file is None:
            raise BundleCheckError("the manifest lists parameters but no parameters file")
        table = tvm.runtime.load_param_dict_from_file(str(folder / params_file))
        missing = [p["name"] for p in manifest["params"] if p["name"] not in table]
        if missing:
            raise BundleCheckError(f"{params_file} lacks parameter(s) {', '.join(missing[:5])}")
        params = [tvm.runtime.tensor(table[p["name"]].numpy(), dev) for p in manifest["params"]]
    load_s = time.perf_counter() - start

    source = Path(inputs_file) if inputs_file else folder / (file_with_role(manifest, "inputs") or "inputs.npz")
    with np.load(source) as data:
        arrays = []
        for spec in manifest["inputs"]:
            if spec["name"] not in data:
                raise BundleCheckError(f"{source} has no input {spec['name']!r}")
            # np.array keeps a 0-d input 0-d (np.ascontiguousarray makes it shape (1,))
            arrays.append(np.array(data[spec["name"]], dtype=spec["dtype"], order="C"))
    args = [tvm.runtime.tensor(a, dev) for a in arrays] + params

    start = time.perf_counter()
    result = vm["main"](*args)
    dev.sync()
    first_s = time.perf_counter() - start
    outputs = [t.numpy() for t in _flatten(result)]
    report = {"bundle": str(folder), "workload": manifest.get("workload", {}).get("spec"),
              "target": manifest.get("target", {}).get("label"), "device": device, "tvm_version": tvm.__version__,
              "threads": os.environ.get("TVM_NUM_THREADS"), "bind_threads": os.environ.get("TVM_BIND_THREADS"),
              "load_s": load_s, "first_s": first_s, **({"cuda_code": cuda_code} if device == "cuda" else {}),
              "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outputs]}

    if runs > 0:
        latencies = []
        begin = time.perf_counter()
        for _ in range(runs):
            t0 = time.perf_counter()
            vm["main"](*args)
            dev.sync()
            latencies.append(time.perf_counter() - t0)
            if time.perf_counter() - begin > budget_s and len(latencies) >= 3:
                break
        report.update(latencies_s=latencies, runs=len(latencies), median_s=float(np.median(latencies)),
                      p90_s=float(np.percentile(latencies, 90)))

    if profile > 0:
        report["profile"] = profile_calls(vm, args, dev, profile)

    reference = file_with_role(manifest, "reference")
    if reference and not inputs_file:
        with np.load(folder / reference) as data:
            refs = [data[f"output{k}"] for k in range(len(data.files))]
        tol = float(manifest.get("tolerance", 1e-4))
        check = compare_outputs(outputs, refs, rtol=tol, output_atol=manifest.get("output_atol"),
                                activations=manifest.get("output_activation"))
        check.update(tolerance=tol, reference=manifest.get("reference", "reference"),
                     output_atol=[a for a in manifest.get("output_atol") or [] if a])
        report["check"] = check
    report["foreign_modules"] = sorted(m for m, mod in sys.modules.items() if m in _FOREIGN and mod is not None)
    return report, outputs


def _write(text: str) -> None:
    sys.stdout.write(text + "\n")


def usable_cores() -> int:
    """The cores this process may run on. TVM's own default thread count is half the hardware
    threads on x86 (it assumes hyper-threading): one thread on a 2-core VM, half the speed."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description="Check, load and run a schedx bundle (needs only apache-tvm).")
    parser.add_argument("folder", nargs="?", default=str(here) if (here / MANIFEST).is_file() else None,
                        help="the bundle folder (default: the folder of this script)")
    parser.add_argument("--inputs", help="an .npz with the model's inputs by name (default: the bundle's inputs.npz)")
    parser.add_argument("--out", help="write the outputs to this .npz (output0, output1, ...)")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: the bundle's target")
    parser.add_argument("--runs", type=int, default=0, help="time this many runs after the first one")
    parser.add_argument("--budget", type=float, default=30.0, help="stop timing after this many seconds")
    parser.add_argument("--threads", type=int,
                        help="CPU threads for TVM (sets TVM_NUM_THREADS; default: TVM_NUM_THREADS or OMP_NUM_THREADS if "
                             "set, else the cores this process may use: TVM's own default is half the hardware "
                             "threads on x86)")
    parser.add_argument("--profile", type=int, default=0, metavar="RUNS",
                        help="time every kernel call over this many runs (per-kernel profile)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--trust", metavar="PUBKEY.pem",
                        help="refuse the bundle unless manifest.sig verifies with this ed25519 public key "
                             "(needs the cryptography package)")
    parser.add_argument("--without-torch", action="store_true",
                        help="keep PyTorch out of this process (tvm_ffi imports it when installed, 2 s; the bundle "
                             "never needs it): proves a plain TVM runtime suffices")
    opts = parser.parse_args(argv)
    if opts.without_torch:
        sys.modules.setdefault("torch", None)  # `import torch` now raises ImportError, which tvm_ffi tolerates
    if opts.folder is None:
        parser.error("give the bundle folder")
    if opts.threads:
        os.environ["TVM_NUM_THREADS"] = str(opts.threads)
    elif not os.environ.get("TVM_NUM_THREADS") and not os.environ.get("OMP_NUM_THREADS"):  # TVM reads both
        os.environ["TVM_NUM_THREADS"] = str(usable_cores())  # before its thread pool starts (at the first run)
    # unpinned workers: pinned, every parallel kernel waits for a worker whose core another process
    # holds (a Whisper encoder 116 ms instead of 1.4 ms beside two busy processes on 2 cores)
    os.environ.setdefault("TVM_BIND_THREADS", "0")
    try:
        report, outputs = run_bundle(opts.folder, inputs_file=opts.inputs, device=opts.device, runs=opts.runs,
                                     budget_s=opts.budget, profile=opts.profile, trust=opts.trust)
    except BundleCheckError as err:
        if opts.json:
            _write(json.dumps({"error": str(err)}))
        else:
            sys.stderr.write(f"error: {err}\n")
        return 2
    if opts.out:
        import numpy as np

        np.savez(opts.out, **{f"output{k}": o for k, o in enumerate(outputs)})
    if opts.json:
        _write(json.dumps(report, indent=2))
        return 0 if report.get("check", {}).get("verified", True) else 1
    _write(f"{report['workload']} on {report['target']}: loaded in {report['load_s'] * 1e3:.1f} ms, "
           f"first inference {report['first_s'] * 1e3:.2f} ms")
    if "median_s" in report:
        _write(f"steady state over {report['runs']} runs: median {report['median_s'] * 1e3:.3f} ms, "
               f"p90 {report['p90_s'] * 1e3:.3f} ms")
    if "profile" in report:
        calls = sorted(report["profile"]["calls"].items(), key=lambda kv: -kv[1]["seconds"])
        total = sum(c["seconds"] for _, c in calls) or 1.0
        _write(f"time per kernel over {report['profile']['runs']} runs:")
        for name, c in calls[:15]:
            _write(f"  {c['seconds'] * 1e3:9.3f} ms {c['seconds'] / total:6.1%}  x{c['calls']:<3} {name}")
    check = report.get("check")
    if check:
        verdict = "matches" if check["verified"] else "DIFFERS FROM"
        _write(f"output {verdict} {check['reference']}: max abs error {check['max_abs_error']:.2e}, "
               f"relative to max |ref| {check['max_rel_error']:.2e}")
        worst = check.get("worst")  # the element that decided, and the rule it was held to
        if worst:
            _write(describe_worst(worst))
        elif check.get("why"):
            _write(check["why"])
        return 0 if check["verified"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
