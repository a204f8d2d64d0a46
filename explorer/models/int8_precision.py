"""The ``int8`` precision: a float ONNX model quantized by ``schedx quantize``'s own flow
(:func:`explorer.models.quantize.quantize_model`: ONNX Runtime's static quantizer, QDQ, calibrated
on :class:`explorer.precision.Calibration`'s samples), then built exactly as that QDQ model is built
(:mod:`explorer.passes.qdq_int8`: int8 kernels, AMX-INT8 where the CPU has it). Its reference is
ONNX Runtime running the quantized model (what is built); the quantizer's report (the int8 model
against the float one on held-out inputs) rides along in :class:`explorer.precision.Precision`, so
both what int8 costs in accuracy and whether the build is right are said.

The quantized model and its report are cached by content in ``$XDG_CACHE_HOME/schedx/quantized``
(``~/.cache/schedx/quantized/<key>/<name>.int8.onnx`` and ``report.json``), the key a hash of the
float model's bytes, the calibration settings (and the data file's bytes), the quantizer's
machine-dependent choice (7-bit weights without AVX-512 VNNI) and ONNX Runtime's version: a
bench then an export of the same model quantize once. A cache entry is written in a private
temporary folder and renamed into place whole, so a killed process never leaves half of one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from explorer.models.quantize import QuantizeError, QuantizeReport, quantize_model

# a calibration is an explorer.precision.Calibration (``samples``, ``data``); not imported here:
# explorer.precision calls this module

CACHE_VERSION = 1  # bump when the quantize flow changes what it writes for the same inputs


def read_samples(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of an .npz file by input name; a file of anything else is an error (never
    unpickled)."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise QuantizeError(f"{path} is not a NumPy .npz file of arrays ({str(err).split('.')[0]})") from None
    if isinstance(loaded, np.ndarray):
        raise QuantizeError(f"{path} holds one array: give an .npz with one array per model input name")
    with loaded:
        return {name: loaded[name] for name in loaded.files}


def why_not_int8(workload) -> str:
    """Why ``workload`` cannot be quantized by the int8 flow ("" where it can)."""
    if workload.kind != "model":
        return (f"--precision int8 quantizes models (ONNX Runtime's quantizer); {workload.name} is a single kernel, "
                f"built as written")
    if workload.onnx_model is None:
        return (f"--precision int8 quantizes with ONNX Runtime's quantizer, which takes an ONNX model; {workload.name} "
                f"did not come from ONNX (a PyTorch module: export it with torch.onnx.export, then give the .onnx)")
    from explorer.models.qdq import is_quantized

    if is_quantized(workload.onnx_model):
        return (f"{workload.name} is already quantized (it holds QuantizeLinear/DequantizeLinear or QLinear nodes): "
                f"export it as it is, without --precision int8 (its int8 kernels are built from its own QDQ nodes)")
    return ""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "schedx" / "quantized"


def cache_key(model_bytes: bytes, calibration) -> str:
    """The content key of a quantization: the model, the settings, what else decides the output."""
    import onnxruntime

    from explorer.models.quantize import needs_reduced_range

    h = hashlib.sha256(model_bytes)
    data_hash = hashlib.sha256(Path(calibration.data).read_bytes()).hexdigest() if calibration.data else None
    h.update(json.dumps({"samples": calibration.samples, "data": data_hash, "version": CACHE_VERSION,
                         "reduce_range": needs_reduced_range("uint8"), "onnxruntime": onnxruntime.__version__},
                        sort_keys=True).encode())
    return h.hexdigest()[:24]


def quantized_model(workload, calibration, progress: Callable[[str], None] | None = None
                    ) -> tuple[Path, QuantizeReport, bool]:
    """``(path, report, cached)``: the QDQ model of ``workload``'s float ONNX model quantized with
    ``calibration`` (from the cache when it holds one: ``cached``) and the quantizer's report."""
    folder = cache_dir() / cache_key(workload.onnx_model.SerializeToString(), calibration)
    path, report_path = folder / f"{_file_stem(workload.name)}.int8.onnx", folder / "report.json"
    if path.is_file() and report_path.is_file():
        try:
            return path, _report(json.loads(report_path.read_text())), True
        except (ValueError, TypeError, OSError):
            pass  # a damaged entry: made again
    shutil.rmtree(folder, ignore_errors=True)  # (an entry a file of which is missing or unreadable)
    data = read_samples(calibration.data) if calibration.data else None
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=folder.parent))
    try:
        _, report = quantize_model(workload.onnx_model, calibrate=calibration.samples, data=data,
                                   data_label=calibration.data or "random", name=workload.name,
                                   output=staging / path.name, progress=progress)
        report = dataclasses.replace(report, output=str(path))
        (staging / report_path.name).write_text(json.dumps(report.to_dict(), indent=2))
        try:
            staging.rename(folder)
        except OSError:  # another process made it first: theirs is the same model
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path, report, False


def _report(d: dict) -> QuantizeReport:
    known = {f.name for f in dataclasses.fields(QuantizeReport)}
    return QuantizeReport(**{**{k: v for k, v in d.items() if k in known}, "notes": tuple(d.get("notes") or ())})


def _file_stem(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:80] or "model"


def int8_workload(workload, calibration, progress: Callable[[str], None] | None = None):
    """``(workload, quantization)``: the QDQ model of ``workload`` loaded as any QDQ model is
    (:func:`explorer.workload.load_workload` of the cached file), and the quantizer's report as a
    dict (with ``cached``: whether the cache held it). Raises
    :class:`QuantizeError` with the reason for a workload the flow cannot
    quantize (:func:`why_not_int8`)."""
    from explorer.workload import load_workload

    why = why_not_int8(workload)
    if why:
        raise QuantizeError(why)
    path, report, cached = quantized_model(workload, calibration, progress)
    built = load_workload(str(path))
    quantization = {**report.to_dict(), "cached": cached, "from": workload.spec}
    return dataclasses.replace(built, notes=tuple(built.notes) + (summary(quantization),)), quantization


def summary(quantization: dict) -> str:
    """One line: how the model was quantized and what the int8 model loses against the float one."""
    q = quantization
    top1 = f", top-1 agrees on {q['top1_agreement']:.0%}" if q.get("top1_agreement") is not None else ""
    reused = ", reused from the cache" if q.get("cached") else ""
    return (f"quantized to int8 by ONNX Runtime's quantizer ({q['quantized_nodes']} tensors, calibrated on "
            f"{q['calibration_samples']} {q['calibration_data']} sample(s){reused}); against the float model on "
            f"{q['eval_samples']} held-out input(s): max abs error {q['max_abs_error']:.4g}, max relative "
            f"{q['max_rel_error']:.2%}{top1}")


__all__ = ["cache_dir", "cache_key", "int8_workload", "quantized_model",
           "read_samples", "summary", "why_not_int8"]
