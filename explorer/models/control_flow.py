"""``If`` nodes: fold those whose condition is already known, describe those left.

Exporters write an ``If`` wherever the traced code branched, most often on something fixed once
the input shapes are (``if x.shape[1] > 1``) or on a constant flag. With the shapes fixed,
ONNX shape inference (with data propagation) and onnxscript's optimizer (constant folding)
compute such a condition and replace the ``If`` by the branch taken (its nodes spliced into the
graph, outer-scope names resolved), so the model becomes a plain graph. Small ``ConstantOfShape``
nodes are folded too (onnxscript keeps them by default): scripted PyTorch pads with
``Pad(x, Concat(..., ConstantOfShape(n)))``, and pads left unknown leave every shape after them
symbolic, so no branch on a shape below them could fold.

A branch chosen by an input's *value* (silero-vad's ``if sr == 16000``, a 0-d int64) folds
once that value is fixed: ``--shapes sr=16000`` names a scalar input instead of a dimension,
and :func:`pin_scalar_inputs` makes it a constant of the model (no longer an input; the
reference ONNX Runtime runs gets the same constant). An ``If`` that still depends on input
values stays: TVM's importer turns it into a Relax ``If`` (both branches compiled, one taken),
and :func:`runtime_ifs` describes each such node, with the scalar inputs that would fold it,
for notes and error messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from explorer.models.if_inline import inline_known_ifs
from explorer.models.onnx_ops import walk_nodes

# A ConstantOfShape whose (constant) shape has at most this many elements is folded to an
# initializer; larger ones (a zero state of [2, 1, 512] has 1024) stay generated at run time.
FOLD_CONSTANT_OF_SHAPE = 1 << 16


@dataclass(frozen=True)
class BranchPoint:
    """One ``If`` left in a model after folding: which node, and what it branches on."""

    node: str
    condition: str
    producer: str  # "Greater node 'gt'", "graph input", ...
    where: str = ""  # "" in the main graph, else the enclosing branch
    scalar_inputs: tuple[str, ...] = ()  # 0-d / one-element graph inputs the condition depends on

    def describe(self) -> str:
        place = f" inside {self.where.rstrip('/')}" if self.where else ""
        text = f"If node {self.node!r}{place} branches at run time on {self.condition!r} ({self.producer})"
        if self.scalar_inputs:
            pins = ",".join(f"{name}=VALUE" for name in self.scalar_inputs)
            text += (f"; it depends on the scalar input(s) {', '.join(map(repr, self.scalar_inputs))}: fix them "
                     f"(--shapes {pins}) to keep only the branch taken")
        return text


def count_ifs(model: onnx.ModelProto) -> int:
    """``If`` nodes anywhere in ``model`` (main graph and branches)."""
    return sum(1 for node, _ in walk_nodes(model.graph) if node.op_type == "If")


def _fold_small_constant_of_shape(node) -> bool | None:
    """onnxscript's ``should_fold``: fold a ConstantOfShape of a small constant shape (its default
    keeps every one), leave every other node to the default rules."""
    if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    shape = node.inputs[0].const_value if node.inputs[0] is not None else None
    if shape is None:
        return None
    dims = np.asarray(shape.numpy()).reshape(-1)
    return bool(np.all(dims >= 0) and int(np.prod(dims)) <= FOLD_CONSTANT_OF_SHAPE) or None


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Shape inference with data propagation, then onnxscript's optimizer: shape arithmetic and
    conditions fixed by static shapes or constants become constants (small ConstantOfShape
    included), and an ``If`` on a constant becomes the branch it takes."""
    from onnxscript import ir
    from onnxscript.optimizer import optimize_ir

    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - a node inference cannot read: fold what the optimizer can
        inferred = model
    graph = ir.serde.deserialize_model(inferred)
    optimize_ir(graph, should_fold=_fold_small_constant_of_shape)
    return ir.serde.serialize_model(graph)


def _scalar_input(inp: onnx.ValueInfoProto) -> bool:
    tt = inp.type.tensor_type
    return tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value == 1 for d in tt.shape.dim)


def pin_scalar_inputs(model: onnx.ModelProto, values: dict[str, int]) -> tuple[onnx.ModelProto, dict[str, int]]:
    """``model`` with each scalar input (0-d or one element, numeric or bool) named in ``values``
    made a constant initializer of that value, the ``If`` nodes that this decides spliced to the
    branch taken (:func:`inline_known_ifs`), and the inputs so pinned. A name that is no such
    input is left alone (it may be a dimension); a model with none comes back as it is."""
    inits = {i.name for i in model.graph.initializer}
    pins = {i.name: values[i.name] for i in model.graph.input
            if i.name in values and i.name not in inits and _scalar_input(i)}
    if not pins:
        return model, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = []
    for inp in out.graph.input:
        if inp.name not in pins:
            keep.append(inp)
            continue
        tt = inp.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt.elem_type else np.dtype("int64")
        value = np.full([d.dim_value for d in tt.shape.dim], pins[inp.name]).astype(dtype)
        out.graph.initializer.append(numpy_helper.from_array(value, inp.name))
    del out.graph.input[:]
    out.graph.input.extend(keep)
    return inline_known_ifs(out)[0], pins


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


def input_sources(cond: str, nodes: dict[str, onnx.NodeProto], scalars: set[str]) -> tuple[str, ...]:
    """The graph inputs among ``scalars`` that ``cond`` is computed from (``nodes``: each output's
    producer): which inputs decide an If's condition or a Loop's trip count."""
    found, seen, todo = [], set(), [cond]
    while todo:
        name = todo.pop()
        if name in seen or not name:
            continue
        seen.add(name)
        if name in scalars:
            found.append(name)
        node = nodes.get(name)
        if node is not None:
            todo.extend(node.input)
    return tuple(sorted(found))


def runtime_ifs(model: onnx.ModelProto) -> list[BranchPoint]:
    """The ``If`` nodes of ``model`` and what their conditions come from."""
    producers, nodes = {}, {}
    for node, where in walk_nodes(model.graph):
        for out in node.output:
            producers[out] = f"{node.op_type} node {node.name or out!r}"
            nodes[out] = node
    inits = {i.name for i in model.graph.initializer}
    inputs = {i.name for i in model.graph.input}
    scalars = {i.name for i in model.graph.input if i.name not in inits and _scalar_input(i)}
    points = []
    for node, where in walk_nodes(model.graph):
        if node.op_type != "If":
            continue
        cond = node.input[0] if node.input else ""
        source = producers.get(cond) or ("the graph input" if cond in inputs else "a value from an outer scope")
        points.append(BranchPoint(node=node.name or (node.output[0] if node.output else "If"), condition=cond,
                                  producer=f"computed by {source}" if cond in producers else source, where=where,
                                  scalar_inputs=input_sources(cond, nodes, scalars)))
    return points


def enclosing_branches(model: onnx.ModelProto, where: str) -> str:
    """For a node at ``where`` (``"If_0/else_branch/..."``, as :func:`walk_nodes` gives it), what
    the ``If`` nodes around it branch on, in words ("" in the main graph): which branch it sits
    in, the condition, and the scalar inputs that would fold it."""
    around = [p for p in runtime_ifs(model) if where.startswith(f"{p.where}{p.node}/")]
    around.sort(key=lambda p: len(p.where))
    return "; ".join(f"it sits in the {where[len(p.where + p.node) + 1:].split('/')[0]} of "
                     + p.describe().replace(" branches at run time", ", which branches at run time", 1)
                     for p in around)


__all__ = ["FOLD_CONSTANT_OF_SHAPE", "BranchPoint", "count_ifs", "enclosing_branches", "fold_branches",
           "fold_constants", "input_sources", "pin_scalar_inputs", "runtime_ifs"]
