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
from dataclasses import asdict, dataclass, field

import numpy as np

from explorer.errors import short_tvm_message


@dataclass(frozen=True)
class LayerResult:
    """One compared tensor: the node that produced it, errors, and whether it is in tolerance."""

    node: str
    op_type: str
    output: str
    max_abs_error: float
    max_rel_error: float
    ok: bool

    def to_dict(self) -> dict:
        return asdict(self)


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

    def summary(self) -> str:
        if self.error:
            return f"layer check did not run: {self.error}"
        if self.first_bad is None:
            return f"all {len(self.layers)} layer outputs agree with ONNX Runtime (tolerance {self.tolerance:.0e})"
        b = self.first_bad
        return (f"first layer out of tolerance: {b.node} ({b.op_type}), output {b.output}: max abs error "
                f"{b.max_abs_error:.2e}, normalised {b.max_rel_error:.2e} > {self.tolerance:.0e}")

    def to_dict(self) -> dict:
        return {"tolerance": self.tolerance, "compared": len(self.layers), "ok": self.ok, "summary": self.summary(),
                "first_bad": self.first_bad.to_dict() if self.first_bad else None, "error": self.error,
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


def _error(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    if out.shape != ref.shape:
        return float("inf"), float("inf")
    diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    abs_err = float(diff.max()) if diff.size else 0.0
    if not np.all(np.isfinite(out)) and np.all(np.isfinite(ref)):
        return float("inf"), float("inf")
    return abs_err, abs_err / max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)


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
        return LayerReport(tolerance=tolerance, error=short_tvm_message(err, 400), seconds=time.perf_counter() - start)
    results = []
    first_bad = None
    for node in onnx_model.graph.node:
        for name in node.output:
            if name not in ort_out or name not in tvm_out:
                continue
            abs_err, rel_err = _error(np.asarray(tvm_out[name]), np.asarray(ort_out[name]))
            r = LayerResult(node.name or name, node.op_type, name, abs_err, rel_err, rel_err <= tolerance)
            results.append(r)
            if not r.ok and first_bad is None:
                first_bad = r
    return LayerReport(tolerance=tolerance, layers=tuple(results), first_bad=first_bad, skipped=tuple(skipped),
                       seconds=time.perf_counter() - start)


__all__ = ["LayerReport", "LayerResult", "compare_layers", "with_all_outputs"]
