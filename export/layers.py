"""Layer by layer: run TVM and ONNX Runtime on the same input and find the first ONNX node whose
output leaves the tolerance.

Every node output with a known float type is made a graph output (the same edited graph on both
sides), ONNX Runtime runs it, and TVM imports and builds it for the host CPU without schedules,
so ``main`` returns every intermediate. Outputs are compared in the graph's (topological) order;
the first node out of tolerance is where the two disagree first. ``tvm_model`` lets the TVM side
run a different copy of the graph (a test perturbs one layer there).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from explorer.errors import short_tvm_message
from explorer.interrupts import reraise as reraise_interrupt
from export.runner.compare import ACTIVATIONS, VALUES_OF_INPUT
from store.values import DictValue


@dataclass(frozen=True)
class LayerResult(DictValue):
    """One compared tensor: the node that produced it, errors, and whether it is in tolerance."""

    node: str
    op_type: str
    output: str
    max_abs_error: float
    max_rel_error: float
    ok: bool
    scale: float = 0.0  # max |ref| of this tensor: the scale its own error is measured against

    @property
    def own_error(self) -> float:
        """The error relative to this tensor's own largest value (inf: a zero tensor that differs)."""
        if self.scale > 0:
            return self.max_abs_error / self.scale
        return 0.0 if self.max_abs_error <= _FLOOR else float("inf")


@dataclass(frozen=True)
class LayerReport:
    """The comparison: every tensor compared, the first bad one (None: all agree), an error if the
    check could not run."""

    tolerance: float
    layers: tuple[LayerResult, ...] = ()
    first_bad: LayerResult | None = None
    skipped: tuple[str, ...] = ()
    error: str = ""
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.error and self.first_bad is None

    @property
    def first_growth(self) -> LayerResult | None:
        """The first layer (in graph order) whose error passes the tolerance relative to its own
        largest value, not to max(1, it) as :attr:`first_bad` judges: where the difference between
        TVM and ONNX Runtime first grows beyond rounding (None: nowhere)."""
        return next((r for r in self.layers if r.own_error > self.tolerance), None)

    def growth(self) -> str:
        """One sentence: the layer where the error first grows, or that it grows nowhere."""
        if self.error or not self.layers:
            return ""
        g = self.first_growth
        if g is None:
            top = max(self.layers, key=lambda r: r.own_error)
            return (f"no layer's error passes {self.tolerance:.0e} of its own largest value (largest: "
                    f"{top.own_error:.1e} at {top.node}, {top.op_type})")
        return (f"the error first passes {self.tolerance:.0e} of a layer's own largest value at {g.node} "
                f"({g.op_type}, output {g.output}): {g.max_abs_error:.2e} on values up to {g.scale:.2e}")

    def summary(self) -> str:
        if self.error:
            return f"layer check did not run: {self.error}"
        if self.first_bad is None:
            return (f"all {len(self.layers)} layer outputs agree with ONNX Runtime (tolerance {self.tolerance:.0e}); "
                    f"{self.growth()}")
        b = self.first_bad
        return (f"first layer out of tolerance: {b.node} ({b.op_type}), output {b.output}: max abs error "
                f"{b.max_abs_error:.2e}, normalised {b.max_rel_error:.2e} > {self.tolerance:.0e}")

    def to_dict(self) -> dict:
        g = self.first_growth
        return {"tolerance": self.tolerance, "compared": len(self.layers), "ok": self.ok, "summary": self.summary(),
                "first_bad": self.first_bad.to_dict() if self.first_bad else None, "error": self.error,
                "first_growth": g.to_dict() if g else None,
                "skipped": list(self.skipped), "seconds": self.seconds,
                "layers": [r.to_dict() for r in self.layers]}


def _float_outputs(model) -> tuple[list, list[str]]:
    """Value infos of every node output with a known float type, in node order; and those skipped."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    graph_outputs = {o.name for o in model.graph.output}
    chosen, skipped = [], []
    for node in model.graph.node:
        for name in node.output:
            if not name or name in graph_outputs:
                continue
            info = known.get(name)
            elem = info.type.tensor_type.elem_type if info is not None else 0
            if info is None or elem not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16):
                skipped.append(name)
                continue
            chosen.append(info)
    return chosen, skipped


def with_all_outputs(model, extra: list):
    """A copy of ``model`` whose graph also outputs ``extra`` (value infos)."""
    edited = copy.deepcopy(model)
    edited.graph.output.extend(copy.deepcopy(extra))
    return edited


# An error this small on a tensor of zeros is denormal noise, not a difference (float32's floor in
# export.verify_bundle.TOLERANCES).
_FLOOR = 1e-35


def _error(out: np.ndarray, ref: np.ndarray) -> tuple[float, float, float]:
    """Max abs error, that error over max(1, max |ref|), and max |ref|."""
    if out.shape != ref.shape:
        return float("inf"), float("inf"), 0.0
    o, r = out.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: an attention mask's -inf agrees with itself
        diff = np.where((o == r) | (np.isnan(o) & np.isnan(r)), 0.0, np.abs(o - r))
    abs_err = float(diff.max()) if diff.size else 0.0
    finite = np.abs(r[np.isfinite(r)])
    scale = float(finite.max()) if finite.size else 0.0
    if not np.all(np.isfinite(out)) and np.all(np.isfinite(ref)):
        return float("inf"), float("inf"), scale
    return abs_err, abs_err / max(1.0, scale), scale


def _explained_by_its_input(out: np.ndarray, ref: np.ndarray, op_type: str, tolerance: float) -> bool:
    """Whether a layer holding values of one of :data:`export.runner.compare.ACTIVATIONS` (a sigmoid,
    a square root; made by it, or selected from what it made) errs by no more than that function's
    input, checked at its own scale, explains: the outputs' comparison rule
    (:func:`export.runner.compare.compare_output`), applied to the layer."""
    from export.runner.compare import compare_output

    if op_type not in ACTIVATIONS or not np.issubdtype(ref.dtype, np.floating):
        return False
    return bool(compare_output(out, ref, rtol=tolerance, activation=op_type)["ok"])


def compare_layers(onnx_model, inputs: dict[str, np.ndarray], *, tvm_model=None, tolerance: float = 1e-4,
                   threads: int | None = None) -> LayerReport:
    """Compare every layer of ``onnx_model`` between ONNX Runtime and TVM on ``inputs``."""
    import time

    import tvm

    from explorer.workload.reference import flatten_outputs, ort_session
    from explorer.models.onnx_import import import_onnx

    start = time.perf_counter()
    try:
        extra, skipped = _float_outputs(onnx_model)
        reference_model = with_all_outputs(onnx_model, extra)
        names = [o.name for o in reference_model.graph.output]
        ort_out = dict(zip(names, ort_session(reference_model, threads).run(names, inputs)))
        tvm_side = with_all_outputs(tvm_model if tvm_model is not None else onnx_model, extra)
        loaded = import_onnx(tvm_side, name="layers")
        from tvm import relax

        ex = tvm.compile(loaded.mod, target=tvm.target.Target({"kind": "llvm"}))
        vm = relax.VirtualMachine(ex, tvm.cpu())
        order = [i.name for i in tvm_side.graph.input if i.name in inputs]
        result = flatten_outputs(vm["main"](*[tvm.runtime.tensor(inputs[n]) for n in order]))
        tvm_out = dict(zip([o.name for o in tvm_side.graph.output], [r.numpy() for r in result]))
    except Exception as err:  # noqa: BLE001 - the check reports why it could not run, the export goes on
        reraise_interrupt(err)  # unless it is Ctrl-C (which TVM turns into a bare RuntimeError)
        return LayerReport(tolerance=tolerance, error=short_tvm_message(err, 400), seconds=time.perf_counter() - start)
    results = []
    first_bad = None
    made_by: dict[str, str] = {}  # a tensor -> the activation whose values it holds (through selections)
    for node in onnx_model.graph.node:
        made = node.op_type if node.op_type in ACTIVATIONS else (
            made_by.get(node.input[0]) if node.op_type in VALUES_OF_INPUT and node.input else None)
        if made is not None and node.output:
            made_by[node.output[0]] = made  # (not a TopK's or a max pool's indices)
        for name in node.output:
            made = made_by.get(name)
            if name not in ort_out or name not in tvm_out:
                continue
            out, ref = np.asarray(tvm_out[name]), np.asarray(ort_out[name])
            abs_err, rel_err, scale = _error(out, ref)
            ok = rel_err <= tolerance or (made is not None and _explained_by_its_input(out, ref, made, tolerance))
            r = LayerResult(node.name or name, node.op_type, name, abs_err, rel_err, ok, scale)
            results.append(r)
            if not r.ok and first_bad is None:
                first_bad = r
    return LayerReport(tolerance=tolerance, layers=tuple(results), first_bad=first_bad, skipped=tuple(skipped),
                       seconds=time.perf_counter() - start)


__all__ = ["LayerReport", "LayerResult", "compare_layers", "with_all_outputs"]
