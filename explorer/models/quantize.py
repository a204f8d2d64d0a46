"""Make an int8 QDQ model from a float ONNX model, and say what it costs and gains.

:func:`quantize_model` fixes the input shapes, runs ONNX Runtime's pre-processing (shape
inference and graph optimisation: BatchNorm folded into Conv, so it is not quantized on its
own), then ``quantize_static`` in QDQ format with a calibration reader over N inputs (random,
or given), and measures both models side by side with ONNX Runtime: serialized size, median
latency, and the accuracy lost on held-out inputs (max absolute error, that error relative to
the float output's largest magnitude, and for classifier outputs how often the top-1 class
agrees). The QDQ model is what TVM imports (see :mod:`explorer.models.qdq`).

Random inputs are standard normal floats (what the zoo feeds its models) and small
non-negative integers; calibration and evaluation draw from different seeds, so the accuracy
figures are measured on inputs the quantizer did not see. Random data calibrates a model
poorly compared with real data: pass real samples for figures that mean something for a task.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx

from explorer.errors import ModelLoadError, short_tvm_message
from explorer.models.onnx_import import fix_input_shapes, model_inputs, read_onnx
from explorer.models.ort_run import ort_latency, ort_outputs, ort_session
from explorer.models.shapes import ShapeSpec, parse_shape_spec
from explorer.temp_dirs import private_temp_dir


class QuantizeError(ModelLoadError):
    """ONNX Runtime's quantizer could not quantize the model, or the inputs given do not fit."""


@dataclass(frozen=True)
class QuantizeReport:
    """The float model and its int8 QDQ version, side by side (sizes in bytes, times in ms)."""

    model: str
    output: str | None
    calibration_samples: int
    calibration_data: str  # "random" or where the samples came from
    eval_samples: int
    per_channel: bool
    activations: str
    preprocessed: bool
    float_bytes: int
    int8_bytes: int
    float_ms: float
    int8_ms: float
    threads: int
    max_abs_error: float
    max_rel_error: float
    mean_abs_error: float
    top1_agreement: float | None
    quantized_nodes: int
    notes: tuple[str, ...] = ()

    @property
    def size_ratio(self) -> float:
        """How many times smaller the int8 model is."""
        return self.float_bytes / max(1, self.int8_bytes)

    @property
    def speedup(self) -> float:
        """Float latency over int8 latency under ONNX Runtime (above 1: int8 is faster)."""
        return self.float_ms / self.int8_ms if self.int8_ms > 0 else float("nan")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["size_ratio"] = round(self.size_ratio, 3)
        d["speedup"] = round(self.speedup, 3)
        return d


def random_inputs(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One random sample for every input of a model whose input shapes are static."""
    out = {}
    for inp in model_inputs(model):
        tt = inp.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt.elem_type else np.dtype("float32")
        shape = [d.dim_value for d in tt.shape.dim]
        if np.issubdtype(dtype, np.floating):
            out[inp.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            out[inp.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            out[inp.name] = rng.integers(0, 4, shape).astype(dtype)
    return out


def samples_from(data: Mapping[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> list[dict[str, np.ndarray]]:
    """Split given arrays into samples: an array of the input's shape is one sample, one with an
    extra leading axis is that many."""
    missing = sorted(set(shapes) - set(data))
    if missing:
        raise QuantizeError(f"the data has no array for input(s) {', '.join(missing)}; it has: {', '.join(sorted(data))}")
    counts = {}
    for name, shape in shapes.items():
        arr = np.asarray(data[name])
        if tuple(arr.shape) == tuple(shape):
            counts[name] = None
        elif tuple(arr.shape[1:]) == tuple(shape):
            counts[name] = arr.shape[0]
        else:
            raise QuantizeError(f"data for input {name!r} has shape {list(arr.shape)}; expected {list(shape)} "
                                f"or [N, {', '.join(map(str, shape))}]")
    n = {c for c in counts.values() if c is not None}
    if len(n) > 1:
        raise QuantizeError(f"the inputs' arrays hold different numbers of samples: {sorted(n)}")
    total = n.pop() if n else 1
    return [{k: (np.asarray(data[k]) if counts[k] is None else np.asarray(data[k])[i]) for k in shapes}
            for i in range(total)]


class _Reader:
    """ONNX Runtime's CalibrationDataReader over a list of samples."""

    def __init__(self, samples: list[dict[str, np.ndarray]]) -> None:
        self._it = iter(samples)

    def get_next(self):
        return next(self._it, None)

    def rewind(self) -> None:  # the calibrator may call it; a second pass is not needed here
        pass


@contextlib.contextmanager
def _quiet_quantizer(notes: list[str]) -> Iterator[None]:
    """ONNX Runtime's quantizer logs warnings on the root logger: keep them as notes instead."""
    records: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage().strip())

    root = logging.getLogger()
    saved, old_level = root.handlers[:], root.level
    root.handlers = [_Keep(logging.WARNING)]
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers = saved
        root.setLevel(old_level)
        seen = []
        for r in records:
            short = r.split(". Refer to")[0].split(". See ")[0]
            if short and short not in seen:
                seen.append(short)
        if seen:
            notes.append(f"ONNX Runtime's quantizer said: {'; '.join(seen[:3])}"
                         + (f" (and {len(seen) - 3} more)" if len(seen) > 3 else ""))


ACTIVATION_TYPES = ("uint8", "int8")


def needs_reduced_range(activations: str) -> bool:
    """ONNX Runtime's advice: uint8 activations times int8 weights can saturate on x86 CPUs
    without VNNI (VPMADDUBSW adds pairs into int16), so quantize weights to 7 bits there. schedx's
    own int8 kernels use VNNI's AVX-512 form only (:mod:`explorer.schedule.int8_dot`): on a CPU with
    AVX-VNNI alone (256-bit), full-range weights would keep every convolution off its int8
    micro-kernel, so 7 bits there too."""
    import platform

    from explorer.target.environment import cpu_flags

    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")
    return activations == "uint8" and x86 and "avx512_vnni" not in cpu_flags()


def _quantize(fixed: onnx.ModelProto, calib: list[dict[str, np.ndarray]], *, per_channel: bool, preprocess: bool,
              activations: str, reduce_range: bool, notes: list[str]) -> tuple[onnx.ModelProto, bool]:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with private_temp_dir("schedx-quant-") as tmp:
        src = Path(tmp) / "float.onnx"
        onnx.save(fixed, src)
        done = False
        with _quiet_quantizer(notes):
            if preprocess:
                pre = Path(tmp) / "pre.onnx"
                try:
                    quant_pre_process(str(src), str(pre))
                    src, done = pre, True
                except Exception as err:  # noqa: BLE001 - pre-processing is an improvement, not a need
                    notes.append(f"ONNX Runtime's pre-processing failed, quantized without it: {short_tvm_message(err, 160)}")
            dst = Path(tmp) / "int8.onnx"
            try:
                quantize_static(str(src), str(dst), _Reader(calib), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                                activation_type=QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8,
                                weight_type=QuantType.QInt8, reduce_range=reduce_range)
            except Exception as err:
                raise QuantizeError(f"ONNX Runtime's quantizer failed: {short_tvm_message(err)}") from err
        return onnx.load(dst), done


def _errors(ref: list[list[np.ndarray]], got: list[list[np.ndarray]]) -> tuple[float, float, float, float | None]:
    abs_max = rel_max = 0.0
    means, agree, total = [], 0, 0
    for r_out, g_out in zip(ref, got):
        for r, g in zip(r_out, g_out):
            r, g = np.asarray(r, np.float64), np.asarray(g, np.float64)
            if r.size == 0:
                continue
            diff = np.abs(r - g)
            abs_max = max(abs_max, float(diff.max()))
            rel_max = max(rel_max, float(diff.max()) / max(float(np.abs(r).max()), 1e-12))
            means.append(float(diff.mean()))
        first_r, first_g = np.asarray(r_out[0]), np.asarray(g_out[0])
        if first_r.ndim == 2 and first_r.shape[1] > 1:
            agree += int(np.sum(first_r.argmax(1) == first_g.argmax(1)))
            total += first_r.shape[0]
    return abs_max, rel_max, float(np.mean(means)) if means else 0.0, (agree / total if total else None)


def quantize_model(source: str | os.PathLike | bytes | onnx.ModelProto, *, shapes: str | dict | ShapeSpec | None = None,
                   calibrate: int = 16, data: Mapping[str, np.ndarray] | None = None, data_label: str = "given data",
                   eval_samples: int = 8, per_channel: bool = True, preprocess: bool = True,
                   activations: str = "uint8", seed: int = 0,
                   threads: int | None = None, runs: int = 20, budget_s: float = 5.0, name: str | None = None,
                   output: str | os.PathLike | None = None,
                   progress: Callable[[str], None] | None = None) -> tuple[onnx.ModelProto, QuantizeReport]:
    """Quantize a float ONNX model to int8 QDQ and compare it with the float one (see the module).

    ``calibrate`` samples calibrate (the first ones of ``data`` when given, else random);
    ``eval_samples`` others measure the accuracy lost. ``output``, when given, is where the
    QDQ model is saved (the report names it). Weights are int8; ``activations`` are ``uint8``
    (the default: ONNX Runtime's x86 integer kernels take unsigned activations, measured 1.8x
    faster than ``int8`` on MobileNetV2 here) or ``int8``."""
    step = progress or (lambda _msg: None)
    if calibrate < 1 or eval_samples < 1:
        raise QuantizeError("calibrate with at least 1 sample and evaluate on at least 1")
    if activations not in ACTIVATION_TYPES:
        raise QuantizeError(f"activations must be one of {', '.join(ACTIVATION_TYPES)}, not {activations!r}")
    model = read_onnx(source)
    fixed, shape_dict = fix_input_shapes(model, parse_shape_spec(shapes))
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul") for n in fixed.graph.node):
        raise QuantizeError("the model is already quantized; give the float model")
    rng_cal, rng_eval = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 2])
    notes: list[str] = []
    if data is not None:
        given = samples_from(data, shape_dict)
        calib = given[:calibrate]
        held = given[calibrate:calibrate + eval_samples]
        label = data_label
        if len(calib) < calibrate:
            notes.append(f"only {len(calib)} samples given: calibrated on those")
        if not held:
            held = [random_inputs(fixed, rng_eval) for _ in range(eval_samples)]
            notes.append("no samples left over for evaluation: accuracy measured on random inputs")
    else:
        calib = [random_inputs(fixed, rng_cal) for _ in range(calibrate)]
        held = [random_inputs(fixed, rng_eval) for _ in range(eval_samples)]
        label = "random"
    step(f"quantizing with {len(calib)} calibration sample(s)")
    reduce_range = needs_reduced_range(activations)
    if reduce_range:
        notes.append("weights quantized to 7 bits (reduce_range): this x86 CPU has no AVX-512 VNNI, where uint8 x "
                     "int8 products can saturate in int8 kernels that add them in pairs (schedx's, and ONNX "
                     "Runtime's without any VNNI)")
    qmodel, preprocessed = _quantize(fixed, calib, per_channel=per_channel, preprocess=preprocess,
                                     activations=activations, reduce_range=reduce_range, notes=notes)
    if output is not None:
        onnx.save(qmodel, output)
    step("comparing the float and int8 models with ONNX Runtime")
    f_sess, q_sess = ort_session(fixed, threads), ort_session(qmodel, threads)
    ref = [ort_outputs(fixed, s, session=f_sess) for s in held]
    got = [ort_outputs(qmodel, s, session=q_sess) for s in held]
    abs_err, rel_err, mean_err, top1 = _errors(ref, got)
    step("timing both models")
    f_ms = ort_latency(f_sess, held[0], runs=runs, budget_s=budget_s) * 1e3
    q_ms = ort_latency(q_sess, held[0], runs=runs, budget_s=budget_s) * 1e3
    from explorer.target.environment import cpu_info

    label_name = name or (Path(source).stem if isinstance(source, (str, os.PathLike)) else (model.graph.name or "model"))
    report = QuantizeReport(
        model=label_name, output=str(output) if output is not None else None,
        calibration_samples=len(calib), calibration_data=label, eval_samples=len(held), per_channel=per_channel,
        activations=activations, preprocessed=preprocessed, float_bytes=fixed.ByteSize(), int8_bytes=qmodel.ByteSize(),
        float_ms=f_ms, int8_ms=q_ms, threads=int(threads or cpu_info()["usable_cores"]),
        max_abs_error=abs_err, max_rel_error=rel_err, mean_abs_error=mean_err, top1_agreement=top1,
        quantized_nodes=sum(n.op_type == "QuantizeLinear" for n in qmodel.graph.node), notes=tuple(notes))
    return qmodel, report


__all__ = ["ACTIVATION_TYPES", "QuantizeError", "QuantizeReport", "quantize_model", "random_inputs", "samples_from"]
