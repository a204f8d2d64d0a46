"""``If`` nodes: fold those whose condition is already known, describe those left.

Exporters write an ``If`` wherever the traced code branched, most often on something fixed once
the input shapes are (``if x.shape[1] > 1``) or on a constant flag. With the shapes fixed,
ONNX shape inference (with data propagation) and onnxscript's optimizer (constant folding)
compute such a condition and replace the ``If`` by the branch taken, so the model becomes a
plain graph. An ``If`` that still depends on input *values* stays: TVM's importer turns it into
a Relax ``If`` (both branches compiled, one run), and :func:`runtime_ifs` describes each such
node for notes and error messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from explorer.models.onnx_ops import walk_nodes


@dataclass(frozen=True)
class BranchPoint:
    """One ``If`` left in a model after folding: which node, and what it branches on."""

    node: str
    condition: str
    producer: str  # "Greater node 'gt'", "graph input", ...
    where: str = ""  # "" in the main graph, else the enclosing branch

    def describe(self) -> str:
        place = f" inside {self.where.rstrip('/')}" if self.where else ""
        return f"If node {self.node!r}{place} branches at run time on {self.condition!r} ({self.producer})"


def count_ifs(model: onnx.ModelProto) -> int:
    """``If`` nodes anywhere in ``model`` (main graph and branches)."""
    return sum(1 for node, _ in walk_nodes(model.graph) if node.op_type == "If")


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Shape inference with data propagation, then onnxscript's optimizer: shape arithmetic and
    conditions fixed by static shapes or constants become constants, and an ``If`` on a
    constant becomes the branch it takes."""
    import onnxscript.optimizer

    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - a node inference cannot read: fold what the optimizer can
        inferred = model
    return onnxscript.optimizer.optimize(inferred)


def fold_branches(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with every ``If`` whose condition is known replaced by its taken branch, and
    notes saying what was folded and what still branches at run time. A model without ``If``
    comes back unchanged."""
    before = count_ifs(model)
    if not before:
        return model, []
    try:
        folded = fold_constants(_without_initializer_inputs(model))
    except Exception as err:  # noqa: BLE001 - folding is an improvement: TVM imports an If as it is
        return model, [f"If nodes were not folded (onnxscript's optimizer failed: {str(err)[:160]})"]
    after = count_ifs(folded)
    notes = []
    if after < before:
        notes.append(f"{before - after} of {before} If node(s) folded: their condition is fixed by the "
                     "input shapes or by constants, so only the branch taken was kept")
    notes += [p.describe() + "; imported as a Relax If" for p in runtime_ifs(folded)]
    return folded, notes


def _without_initializer_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Old exporters list initializers among the graph inputs, which makes them overridable and
    keeps the optimizer from folding them; TVM treats them as constants, so do the same."""
    inits = {i.name for i in model.graph.initializer}
    if not any(i.name in inits for i in model.graph.input):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = [i for i in out.graph.input if i.name not in inits]
    del out.graph.input[:]
    out.graph.input.extend(keep)
    return out


def runtime_ifs(model: onnx.ModelProto) -> list[BranchPoint]:
    """The ``If`` nodes of ``model`` and what their conditions come from."""
    producers = {}
    for node, where in walk_nodes(model.graph):
        for out in node.output:
            producers[out] = f"{node.op_type} node {node.name or out!r}"
    inputs = {i.name for i in model.graph.input}
    points = []
    for node, where in walk_nodes(model.graph):
        if node.op_type != "If":
            continue
        cond = node.input[0] if node.input else ""
        source = producers.get(cond) or ("the graph input" if cond in inputs else "a value from an outer scope")
        points.append(BranchPoint(node=node.name or (node.output[0] if node.output else "If"), condition=cond,
                                  producer=f"computed by {source}" if cond in producers else source, where=where))
    return points


__all__ = ["BranchPoint", "count_ifs", "fold_branches", "fold_constants", "runtime_ifs"]
