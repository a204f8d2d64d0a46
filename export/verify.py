"""Verify a bundle the way a user would run it: in a fresh Python process that loads only the
bundle's own ``run.py`` (apache-tvm and numpy), then compare its outputs with the reference
outputs saved at export (ONNX Runtime for models, numpy for kernels)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from export import bundle as bundle_io
from export.errors import BundleError, ExportError
from explorer.temp_dirs import private_temp_dir


@dataclass(frozen=True)
class Verification:
    """The outcome: ``status`` is "verified", "failed" (outputs differ), "error" (could not run)
    or "skipped" (this machine cannot run the bundle's code: ``why`` says why)."""

    status: str
    reference: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    tolerance: float | None = None
    why: str = ""
    device: str = "cpu"
    load_s: float | None = None
    first_s: float | None = None
    foreign_modules: tuple[str, ...] = field(default=())
    # an int8 model's outputs are compared in quantization steps: the absolute tolerance per output
    output_atol: tuple[float | None, ...] = field(default=())
    # the element furthest past (or nearest to) what the rule allows it, over all outputs: output,
    # index, got, expected, error, allowed, rule (see export.verify_bundle.compare_output)
    worst: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status == "verified"

    def summary(self) -> str:
        if self.status == "error":
            return f"not verified: {self.why or 'the bundle could not run'}"
        if self.status == "skipped":
            return f"not run here: {self.why}"
        verdict = "matches" if self.ok else "DIFFERS FROM"
        if self.max_abs_error is None:  # nothing compared (the outputs did not line up): why says why
            return f"fresh process on {self.device}: output {verdict} {self.reference}" + (f"; {self.why}" if self.why else "")
        from explorer.models.qdq import INT8_STEPS

        steps = [a for a in self.output_atol if a]
        tolerance = (f"int8 tolerance {max(steps):.2e} absolute ({INT8_STEPS} quantization steps of the output)"
                     if steps else f"tolerance {self.tolerance or 1e-4:.0e}")
        text = (f"fresh process on {self.device}: output {verdict} {self.reference} (max abs error "
                f"{self.max_abs_error:.2e}, normalised {self.max_rel_error:.2e}")
        if self.worst is not None and (self.ok or not self.worst["ok"]):  # the element that decided, and its rule
            from export.verify_bundle import describe_worst

            return text + f"); {describe_worst(self.worst)}"
        return text + f", {tolerance})" + (f"; {self.why}" if self.why else "")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(ok=self.ok, summary=self.summary())
        return d


def child_env(threads: int | None) -> dict:
    """The bundle's process environment: ``threads`` TVM threads (default: the usable cores)."""
    from explorer.target.environment import threads_env

    return threads_env(threads)


# What every report of the run.py an export writes holds (see export.verify_bundle.run_bundle)
REPORT_KEYS = ("load_s", "first_s", "outputs")


def run_in_child(folder: str | Path, *, threads: int | None = None, runs: int = 0, budget_s: float = 30.0,
                 device: str | None = None, out: str | Path | None = None, timeout: float = 600,
                 profile: int = 0) -> dict:
    """Run the bundle's ``run.py`` in a fresh isolated interpreter; its JSON report.

    Raises :class:`BundleError` when the bundle is refused, :class:`ExportError` when the child
    crashes or hangs."""
    folder = Path(folder).expanduser().resolve()  # the child runs elsewhere: never a relative path
    bundle_io.read_manifest(folder)  # refuse a changed bundle here already, with the same words
    cmd = [sys.executable, "-I", str(folder / bundle_io.RUNNER), str(folder), "--json", "--without-torch", "--runs", str(runs),
           "--budget", str(budget_s)]
    if out is not None:
        cmd += ["--out", str(out)]
    if device:
        cmd += ["--device", device]
    if profile:
        cmd += ["--profile", str(profile)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env(threads),
                              cwd=str(folder))
    except subprocess.TimeoutExpired:
        raise ExportError(f"running the bundle took longer than {timeout:.0f} s") from None
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])[:500]
        if proc.returncode < 0:
            import signal

            name = signal.Signals(-proc.returncode).name
            why = ("an instruction this CPU does not have: the bundle was built for another CPU"
                   if name == "SIGILL" else tail or "it printed nothing")
            raise ExportError(f"the bundle's process died of {name}: {why}") from None
        raise ExportError(f"the bundle's process failed with status {proc.returncode}: "
                          f"{tail or 'it printed nothing'}") from None
    if isinstance(report, dict) and "error" in report:
        raise BundleError(report["error"])
    missing = [k for k in REPORT_KEYS if not isinstance(report, dict) or k not in report]
    if missing:  # a run.py that prints JSON but not schedx's report: not the one the export wrote
        raise BundleError(f"{folder / bundle_io.RUNNER} did not report {', '.join(missing)} as schedx's run.py "
                          "does: it is not the run.py the export wrote. Export the bundle again, or check a bundle "
                          "you were sent with --trust KEY.pub")
    return report


def verify_folder(folder: str | Path, *, threads: int | None = None, device: str | None = None,
                  timeout: float = 600) -> Verification:
    """Load and run the bundle in a fresh process and compare with its saved reference (the rule
    of :func:`export.verify_bundle.compare_outputs`, the one the bundle's run.py applies)."""
    from export.verify_bundle import compare_outputs

    folder = Path(folder)
    manifest = bundle_io.read_manifest(folder)
    device = device or manifest["target"]["device"]
    with private_temp_dir("schedx-verify-") as tmp:
        out = Path(tmp) / "outputs.npz"
        try:
            report = run_in_child(folder, threads=threads, device=device, out=out, timeout=timeout)
        except (ExportError, BundleError) as err:
            return Verification("error", reference=manifest.get("reference", ""), why=str(err), device=device)
        with np.load(out) as data:
            outputs = [data[f"output{k}"] for k in range(len(data.files))]
    ref_file = folder / bundle_io.REFERENCE
    if not ref_file.is_file():
        return Verification("error", why="the bundle has no reference outputs to compare with", device=device)
    with np.load(ref_file) as data:
        refs = [data[f"output{k}"] for k in range(len(data.files))]
    if len(outputs) != len(refs):
        return Verification("failed", reference=manifest.get("reference", ""), device=device,
                            why=f"{len(outputs)} outputs, the reference has {len(refs)}")
    atols = manifest.get("output_atol") or []  # an int8 model: each output within a few quantization steps
    check = compare_outputs(outputs, refs, rtol=manifest.get("tolerance"), output_atol=atols,
                            activations=manifest.get("output_activation"))
    return Verification("verified" if check["verified"] else "failed", reference=manifest.get("reference", ""),
                        max_abs_error=check["max_abs_error"], max_rel_error=check["max_rel_error"],
                        tolerance=float(manifest.get("tolerance", 1e-4)), why=check["why"], device=device,
                        load_s=report.get("load_s"), first_s=report.get("first_s"),
                        foreign_modules=tuple(report.get("foreign_modules", ())), output_atol=tuple(atols),
                        worst=check["worst"])


# ONNX Runtime's DynamicQuantizeLSTM quantizes its inputs and states to 8 bits at every step; the
# bundle computes the same layer in float with the same (dequantized) weights, so the outputs differ
# by the activations' quantization: 0.9% of the largest output on the corpus's LSTM tagger. Its other
# operators (DynamicQuantizeLinear, ConvInteger, MatMulInteger) are computed as ONNX Runtime does, but an
# activation a float ulp away lands one quantization step apart, and such steps add up along a deep
# CNN: ddddocr's CRNN (21 ConvInteger, a 512-wide DynamicQuantizeLSTM) is 1.9% off, its layers 0.2%.
DYNAMIC_QUANT_TOLERANCE = 3e-2


@dataclass(frozen=True)
class VerificationRule:
    """How schedx judges a model's outputs against ONNX Runtime's (:func:`verification_rule`), as a
    bundle's manifest records it: ``rtol``, each float output's relative bound (of its max |ref|);
    ``output_atol``, per output, an int8 (QDQ) model's few quantization steps, accepted as well;
    ``activations``, per output, the non-linearity that makes it (judged at its input's scale); and
    what about the model widened the bound."""

    rtol: float
    output_atol: tuple[float | None, ...] = ()
    activations: tuple[str | None, ...] = ()
    float16_inside: bool = False  # computes in float16 whatever its inputs and outputs are
    quantized: bool = False  # int8 (QDQ) or quantized on the fly by ONNX Runtime (dynamic)
    dynamic_quantized: bool = False

    @property
    def reference(self) -> str:
        """What the outputs are compared with: ONNX Runtime computing the model as written."""
        return "ONNX Runtime" if self.quantized or self.float16_inside else "ONNX Runtime fp32"


def verification_rule(onnx_model, precision_tolerance: float | None = None, *, output_dtype: str | None = None,
                      output_count: int | None = None) -> VerificationRule:
    """The rule schedx verifies a build of ``onnx_model`` (None: a kernel) with: the relative bound
    of its first output's dtype (``output_dtype``; default: the graph's), widened to float16's for
    a model that computes in float16, to :data:`DYNAMIC_QUANT_TOLERANCE` for a dynamically
    quantized one and to ``precision_tolerance`` (a bf16 build's stated bound); an int8 (QDQ)
    model's outputs also within a few quantization steps. ``output_count``: the build's outputs,
    where they may not be the graph's (per-output steps and activations only when they are)."""
    from export.verify_bundle import tolerances

    rtol = tolerances(output_dtype or _first_output_dtype(onnx_model))[0]
    if onnx_model is None:
        return VerificationRule(max(rtol, precision_tolerance or 0.0))
    from explorer.models.dynamic_quant import is_dynamically_quantized
    from explorer.models.qdq import int8_tolerance, is_quantized

    dynamic, float16, int8 = (is_dynamically_quantized(onnx_model), _float16_inside(onnx_model),
                              is_quantized(onnx_model))
    for widen, bound in ((dynamic, DYNAMIC_QUANT_TOLERANCE), (float16, tolerances("float16")[0]),
                         (precision_tolerance, precision_tolerance)):
        if widen:
            rtol = max(rtol, bound)
    names = [o.name for o in onnx_model.graph.output]  # a build's outputs are the graph's, in order
    same = output_count is None or output_count == len(names)
    steps = int8_tolerance(onnx_model) if int8 and same else {}
    return VerificationRule(rtol, tuple(steps.get(n) for n in names) if int8 and same else (),
                            tuple(output_activations(onnx_model)) if same else (), float16, int8 or dynamic, dynamic)


def _first_output_dtype(onnx_model) -> str:
    """The numpy name of the graph's first output's element type; float32 where unknown."""
    try:
        from onnx.helper import tensor_dtype_to_np_dtype

        return str(tensor_dtype_to_np_dtype(onnx_model.graph.output[0].type.tensor_type.elem_type))
    except Exception:  # noqa: BLE001 - no model, no output, or a type numpy has no name for
        return "float32"


def _float16_inside(onnx_model) -> bool:
    """Whether the ONNX model computes in float16 (a float16 weight or cast, in If branches too),
    whatever its inputs and outputs are (onnxconverter-common keeps them float32 when asked)."""
    from onnx import TensorProto

    from explorer.models.onnx_ops import walk_nodes

    half = TensorProto.FLOAT16
    return (any(i.data_type == half for i in onnx_model.graph.initializer)
            or any(n.op_type == "Cast" and any(a.name == "to" and a.i == half for a in n.attribute)
                   for n, _ in walk_nodes(onnx_model.graph)))


def output_activations(onnx_model) -> list[str | None]:
    """Per graph output, the non-linearity that makes it when it is one of
    :data:`export.verify_bundle.ACTIVATIONS` (looking through the ops that move or select its values:
    :data:`export.runner.compare.VALUES_OF_INPUT`), else None:
    what a bundle's manifest records as ``output_activation`` so the comparison can judge the
    output by the scale of that function's input."""
    from export.runner.compare import VALUES_OF_INPUT
    from export.verify_bundle import ACTIVATIONS

    producer = {node.output[0]: node for node in onnx_model.graph.node if node.output}  # (values, not indices)
    found = []
    for output in onnx_model.graph.output:
        node = producer.get(output.name)
        while node is not None and node.op_type in VALUES_OF_INPUT and node.input:
            node = producer.get(node.input[0])
        found.append(node.op_type if node is not None and node.op_type in ACTIVATIONS else None)
    return found


__all__ = ["DYNAMIC_QUANT_TOLERANCE", "Verification", "VerificationRule", "child_env", "output_activations",
           "run_in_child", "verification_rule", "verify_folder"]
