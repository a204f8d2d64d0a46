"""OpenVINO as an anchor beside ONNX Runtime: the engine a user of an Intel CPU reaches for.

Two rows, both at the caller's threads (``INFERENCE_NUM_THREADS``) and ``PERFORMANCE_HINT:
LATENCY`` (one stream):

- ``openvino f32``: ``INFERENCE_PRECISION_HINT: f32``, the same arithmetic as schedx's fp32 build;
- ``openvino default``: OpenVINO's own choice of precision. On a CPU with AMX or AVX512-BF16 that
  is bf16 (an fp32 ONNX model runs in bf16 unless told otherwise); the precision the compiled
  model reads back (``INFERENCE_PRECISION_HINT``) is in the row's name, e.g.
  ``openvino default (bf16)``.

Each row states the error of its outputs (its first inference's, outside the steady-state runs: no
extra run) against ONNX Runtime on the same inputs (fp32 where the model is not quantized), by the
rule schedx verifies its own builds of that model with (:func:`export.verify.verification_rule`:
its softmax outputs, an int8 model's quantization steps), the bound the larger of the model's and
schedx's bound for the precision OpenVINO runs in (:data:`BOUNDS`): OpenVINO's bf16 on MobileNetV2
is 1.7e-2 of max|ref|, over the 1e-2 a schedx bf16 build must pass, and a faster anchor that would
fail schedx's own check is not like for like. ONNX Runtime's reference runs once, after OpenVINO
has compiled the model; where it fails, the rows come without an error and a note says why.

Each round compiles the model afresh, as ``export.bench.ort_row`` creates a new session per
round; the first round's compile is the one done up front, which also finds a model OpenVINO cannot
compile before any timing starts. ``openvino`` is an optional extra (``pip install
'schedx[openvino]'``): where it is not installed, or cannot compile the model, there are no rows
and a one-line note says why. Nothing here prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from explorer.precision import BF16_TOLERANCE
from export.noise import Comparison, compare
from export.rows import BenchRow, OutputError, latency_row, output_error, timed_calls
from export.runner.compare import tolerances
from export.verify import VerificationRule, verification_rule

# Row names (``schedx bench --json`` and the benchmarks read them; the default row's name gains
# the precision OpenVINO chose: "openvino default (bf16)")
OV_F32_ROW, OV_DEFAULT_ROW = "openvino f32", "openvino default"
# the precision hint per row (None: OpenVINO's default)
PRECISIONS: dict[str, str | None] = {OV_F32_ROW: "f32", OV_DEFAULT_ROW: None}
INSTALL = "pip install 'schedx[openvino]'"
MISSING_NOTE = f"OpenVINO: not installed, so no OpenVINO rows (add them with {INSTALL})"
# OpenVINO's name of a precision -> schedx's name and the relative bound (of each output's max |ref|)
# schedx verifies a build at that precision with; another precision keeps its name, held to fp32's
BOUNDS: dict[str, tuple[str, float]] = {"f32": ("fp32", tolerances("float32")[0]), "bf16": ("bf16", BF16_TOLERANCE),
                                        "f16": ("fp16", tolerances("float16")[0])}

Contender = Callable[[int, float], BenchRow]


@dataclass(frozen=True)
class OpenVinoModel:
    """A model compiled by OpenVINO for this CPU, the precision it runs in, and the compile seconds."""

    compiled: object  # openvino.CompiledModel
    precision: str  # as OpenVINO names it: "f32", "bf16", "f16"
    compile_s: float
    version: str

    def request(self) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
        """A function that runs one inference (its own infer request) and returns every output."""
        req = self.compiled.create_infer_request()
        outputs = self.compiled.outputs

        def run(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
            # no copy of the inputs (ONNX Runtime binds them too); the outputs copied: a caller may keep them
            result = req.infer(inputs, share_inputs=True, share_outputs=False)
            return [np.asarray(result[o]) for o in outputs]
        return run


def openvino_missing() -> str | None:
    """A one-line note when OpenVINO cannot be imported here (how to add it); None when it can."""
    try:
        import openvino  # noqa: F401
    except ImportError:
        return MISSING_NOTE
    return None


def compile_openvino(onnx_model: onnx.ModelProto, *, threads: int, precision: str | None = None,
                     core=None) -> OpenVinoModel:
    """``onnx_model`` compiled for the CPU at ``threads`` threads with the latency hint;
    ``precision``: ``"f32"`` (or another ``INFERENCE_PRECISION_HINT``), None for OpenVINO's default.
    Raises ImportError without OpenVINO and OpenVINO's own errors for a model it cannot compile."""
    import openvino as ov

    core = core or ov.Core()
    config: dict[str, object] = {"INFERENCE_NUM_THREADS": int(threads), "PERFORMANCE_HINT": "LATENCY"}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    start = time.perf_counter()
    compiled = core.compile_model(core.read_model(onnx_model.SerializeToString()), "CPU", config)
    seconds = time.perf_counter() - start
    chosen = compiled.get_property("INFERENCE_PRECISION_HINT")
    return OpenVinoModel(compiled, getattr(chosen, "get_type_name", lambda: str(chosen))(), seconds, ov.__version__)


def openvino_outputs(onnx_model: onnx.ModelProto, inputs: dict[str, np.ndarray], *, threads: int = 1,
                     precision: str | None = "f32") -> list[np.ndarray]:
    """Every output of ``onnx_model`` on ``inputs`` as OpenVINO computes it (fp32 unless told)."""
    return compile_openvino(onnx_model, threads=threads, precision=precision).request()(inputs)


def _name(row: str, model: OpenVinoModel) -> str:
    return row if PRECISIONS[row] else f"{row} ({model.precision})"


def openvino_error(model: OpenVinoModel, outputs: Sequence[np.ndarray], references: Sequence[np.ndarray],
                   rule: VerificationRule) -> OutputError:
    """``outputs`` (``model``'s) against ``references`` (ONNX Runtime on the same inputs) by ``rule``
    (the model's, :func:`export.verify.verification_rule`), its bound no tighter than schedx's for
    the precision ``model`` runs in (:data:`BOUNDS`)."""
    precision, bound = BOUNDS.get(model.precision, (model.precision, BOUNDS["f32"][1]))
    return output_error(outputs, references, precision=precision, bound=max(bound, rule.rtol),
                        output_atol=rule.output_atol, activations=rule.activations, reference=rule.reference)


def openvino_row(model: OpenVinoModel, row: str, inputs: dict[str, np.ndarray], *, runs: int,
                 budget_s: float, references: Sequence[np.ndarray] | None = None,
                 rule: VerificationRule | None = None) -> BenchRow:
    """Time a compiled model as ``row`` (:data:`OV_F32_ROW` or :data:`OV_DEFAULT_ROW`): its first
    inference, then up to ``runs`` runs within ``budget_s`` seconds; with ``references`` and the
    model's ``rule``, the first inference's outputs against them (:func:`openvino_error`) in the
    row's ``error``."""
    run = model.request()
    outputs, first, latencies = timed_calls(lambda: run(inputs), runs, budget_s)  # outputs: copies (share_outputs)
    error = openvino_error(model, outputs, references, rule) if references is not None and rule is not None else None
    hint = "INFERENCE_PRECISION_HINT f32" if PRECISIONS[row] else f"its default precision here, {model.precision}"
    return latency_row(_name(row, model), model.compile_s, first, latencies,
                       f"OpenVINO {model.version.split('-')[0]}, {hint}, latency hint; model compile as compile",
                       error=error)


def openvino_contenders(onnx_model: onnx.ModelProto, inputs: dict[str, np.ndarray], *, threads: int,
                        references: Sequence[np.ndarray] | None = None) -> tuple[dict[str, Contender], list[str]]:
    """OpenVINO's f32 and default-precision rows as contenders of :func:`export.bench.alternate`
    (keyed :data:`OV_F32_ROW` and :data:`OV_DEFAULT_ROW`), or none and a one-line note saying why
    (not installed: how to add it; a model it cannot compile: its error). Each row carries its
    outputs' error against ``references`` (default: ONNX Runtime on ``inputs``, run once here after
    OpenVINO's compiles, as an export's verification computes its reference; where it fails, the
    rows carry none and a note says why)."""
    missing = openvino_missing()
    if missing:
        return {}, [missing]
    import openvino as ov

    core = ov.Core()
    ready: dict[str, list[OpenVinoModel]] = {}
    try:
        for row, precision in PRECISIONS.items():  # the first round's compiles, done up front
            ready[row] = [compile_openvino(onnx_model, threads=threads, precision=precision, core=core)]
    except Exception as exc:  # noqa: BLE001 - any OpenVINO failure leaves the rows out, with the reason
        return {}, [f"OpenVINO: cannot compile this model, so no OpenVINO rows ({_first_line(exc)})"]
    from explorer.models.ort_run import ort_outputs

    notes: list[str] = []
    try:
        rule = verification_rule(onnx_model)
        references = ort_outputs(onnx_model, inputs, threads=threads) if references is None else references
    except Exception as exc:  # noqa: BLE001 - the rows stand without their error
        rule, references = None, None
        notes.append(f"OpenVINO: ONNX Runtime could not compute the reference, so OpenVINO's rows state no "
                     f"error ({_first_line(exc)})")

    def contender(row: str) -> Contender:
        def run(runs: int, budget_s: float) -> BenchRow:
            pending = ready[row]
            model = pending.pop() if pending else compile_openvino(onnx_model, threads=threads,
                                                                   precision=PRECISIONS[row], core=core)
            return openvino_row(model, row, inputs, runs=runs, budget_s=budget_s, references=references, rule=rule)
        return run

    return {row: contender(row) for row in PRECISIONS}, notes


def _first_line(exc: Exception) -> str:
    return ((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:200]


@dataclass(frozen=True)
class Anchor:
    """An OpenVINO row timed apart from a TVM build (the Profile page's figures), and that build
    against it under the noise (:func:`export.noise.compare`, ``a``: TVM, ``b``: OpenVINO)."""

    row: BenchRow
    versus: Comparison

    def to_dict(self) -> dict:
        return {"row": self.row.to_dict(), "versus": self.versus.to_dict()}


def openvino_anchors(onnx_model: onnx.ModelProto, inputs: dict[str, np.ndarray], tvm_latencies: Sequence[float], *,
                     threads: int, runs: int = 10, budget_s: float = 5.0,
                     tvm_name: str = "tvm") -> tuple[tuple[Anchor, ...], list[str]]:
    """Both OpenVINO rows timed once each (``runs`` runs within ``budget_s``) and TVM's runs
    (``tvm_latencies``, timed before) against each, or none and the one-line note why. Not
    alternated: where TVM and OpenVINO must be compared in rounds, use :func:`openvino_contenders`
    with :func:`export.bench.alternate`."""
    contenders, notes = openvino_contenders(onnx_model, inputs, threads=threads)
    anchors = []
    for run in contenders.values():
        row = run(max(3, runs), budget_s)
        anchors.append(Anchor(row, compare(tvm_latencies, row.latencies, a_name=tvm_name, b_name=row.name)))
    return tuple(anchors), notes


__all__ = [
    "BOUNDS",
    "MISSING_NOTE",
    "Anchor",
    "OV_DEFAULT_ROW",
    "OV_F32_ROW",
    "OpenVinoModel",
    "compile_openvino",
    "openvino_anchors",
    "openvino_contenders",
    "openvino_error",
    "openvino_missing",
    "openvino_outputs",
    "openvino_row",
]
