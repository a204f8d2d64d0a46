"""Shape arithmetic folded to constants once the input shapes are fixed.

A model exported with symbolic dimensions (a detector with dynamic batch, height and width)
computes sizes at run time from its tensors' shapes: ``Shape -> Gather -> Cast -> Range`` for an
anchor grid, ``Concat`` of gathered sizes for a ``Reshape`` or an ``Expand``, ``Mul`` of sizes
for a ``Split``, ``Resize`` sizes. Once ``--shapes`` fixes the inputs, every one of those values
is a constant, but TVM's importer does not always see it: a ``Range`` whose end went through a
``Cast`` becomes a tensor of unknown length (``R.tensor_to_shape``), and the build fails much
later in ``FoldConstant`` ("emit_te now only supports Tensor that has ShapeExpr shape").

:func:`fold_shape_arithmetic` computes those values here, before import:

1. ONNX shape inference (with data propagation) runs on the model with its inputs fixed; the
   value info the exporter wrote is set aside first, since it may hold the shapes of another
   input size;
2. a ``Shape`` or ``Size`` node whose input has a static shape (or a value already folded) is
   replaced by its value, and so is every node that reads such a value when all its other
   inputs are constants: those are evaluated with ONNX's reference runtime, one node at a time,
   in the model's opset;
3. steps 1 and 2 repeat on the folded model (a ``Range`` of known length gives the next
   ``Shape`` a static input) until nothing more folds.

Folded nodes leave the graph; their outputs that something still reads (a node, an ``If``
branch, a graph output) become initializers. Only values that derive from a shape are folded:
weights and their arithmetic (a transposed or dequantized weight) stay as they are, for the
passes that handle them. Values over :data:`MAX_ELEMENTS` elements, nodes with subgraphs, random
generators and operators outside the standard domain are never evaluated here. The rewrite keeps
the model's meaning for the fixed shapes: ONNX Runtime gives the same outputs before and after.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from explorer.models.onnx_ops import walk_nodes
from explorer.models.onnx_rewrite import default_opset

# a folded value is an initializer: an anchor grid of a 1280x1280 detector (33600x2) is well under
MAX_ELEMENTS = 1 << 20
_ROUNDS = 8
_SMALL = 4096  # initializers shape inference gets with their data (shape-sized constants)
_SEEDS = frozenset({"Shape", "Size"})
_NEVER = frozenset({"If", "Loop", "Scan", "RandomNormal", "RandomUniform", "RandomNormalLike",
                    "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"})
_STANDARD = ("", "ai.onnx")


def has_shape_ops(model: onnx.ModelProto) -> bool:
    """Whether the main graph reads a tensor's shape (``Shape`` or ``Size`` nodes)."""
    return any(n.op_type in _SEEDS and n.domain in _STANDARD for n in model.graph.node)


def fold_shape_arithmetic(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` (input shapes fixed) whose shape computations are constants, and a
    note saying how many nodes were folded (none: the model comes back unchanged, no note)."""
    if not has_shape_ops(model):
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    folded: dict[str, int] = {}
    derived: set[str] = set()  # names whose value comes from a shape, over all sweeps
    for _ in range(_ROUNDS):
        counts = _fold_once(out, derived)
        if not counts:
            break
        for op, n in counts.items():
            folded[op] = folded.get(op, 0) + n
    if not folded:
        return model, []
    total = sum(folded.values())
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(folded.items(), key=lambda kv: (-kv[1], kv[0])))
    return out, [f"{total} shape computation node(s) folded to constants, as the input shapes fix them ({ops})"]


def _fold_once(model: onnx.ModelProto, derived: set[str]) -> dict[str, int]:
    """One sweep over ``model``'s main graph, in place (``derived`` grows by what it folds); how
    many nodes of each type it folded."""
    graph = model.graph
    shapes = _static_shapes(model)
    values = _Constants(graph, default_opset(model))
    removed: list[int] = []  # positions in graph.node
    outputs = {o.name for o in graph.output}
    for index, node in enumerate(graph.node):
        if not _evaluable(node) or node.op_type == "Constant":
            continue
        if any(o in outputs for o in node.output):  # a graph output stays produced by its node
            continue
        if node.op_type in _SEEDS:
            result = _shape_value(node, shapes, values)
        elif any(i in derived for i in node.input if i):
            result = values.evaluate(node)
        else:
            continue
        if result is None:
            continue
        values.known.update(result)
        derived.update(result)
        removed.append(index)
    if not removed:
        return {}
    counts: dict[str, int] = {}
    for index in removed:
        op = graph.node[index].op_type
        counts[op] = counts.get(op, 0) + 1
    _replace(graph, set(removed), values)
    return counts


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Static shapes of the main graph's values, from shape inference on a copy without the
    exporter's value info, whose large initializers are typed inputs instead (inference needs
    their shapes, not their data, and a model's weights would be serialised for it otherwise)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(_without_large_initializers(model))
    del probe.graph.value_info[:]
    for out in probe.graph.output:  # declared output shapes may be stale too
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    try:
        probe = onnx.shape_inference.infer_shapes(probe, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is a help: what it cannot type is not folded
        pass
    g = probe.graph
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape") and \
                all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    for init in model.graph.initializer:
        shapes[init.name] = tuple(int(d) for d in init.dims)
    return shapes


def _without_large_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every initializer over :data:`_SMALL` elements turned into a graph input of
    its type and shape (a shallow rebuild: the weights are not copied)."""
    graph = model.graph
    small = [i for i in graph.initializer if int(np.prod(i.dims, dtype=np.int64)) <= _SMALL]
    if len(small) == len(graph.initializer):
        return model
    listed = {i.name for i in graph.input}
    inputs = list(graph.input) + [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
                                  for i in graph.initializer if i.name not in listed and
                                  int(np.prod(i.dims, dtype=np.int64)) > _SMALL]
    lean = helper.make_graph(list(graph.node), graph.name, inputs, list(graph.output), small)
    return helper.make_model(lean, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                             functions=list(model.functions))


def _shape_value(node: onnx.NodeProto, shapes: dict, values: _Constants) -> dict[str, np.ndarray] | None:
    """The output of a ``Shape`` (its ``start``/``end`` honoured) or ``Size`` node whose input's
    shape is known."""
    src = node.input[0] if node.input else ""
    shape = shapes.get(src)
    if shape is None and src in values.known:
        shape = tuple(values.known[src].shape)
    if shape is None:
        return None
    if node.op_type == "Size":
        return {node.output[0]: np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)}
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end")
    return {node.output[0]: np.array(shape[start:end], dtype=np.int64)}  # slicing clamps as ONNX does


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


class _Constants:
    """Values known in one sweep: initializers, and the outputs of nodes computed from constants
    alone (``Constant``, a ``Cast`` of one...), both read on demand as a model's weights can be
    large; and what the sweep folded."""

    def __init__(self, graph: onnx.GraphProto, opset: int) -> None:
        self.opset = opset
        self.known: dict[str, np.ndarray] = {}
        self.evaluated: set[int] = set()  # positions of the nodes ``get`` computed: dropped when no longer read
        self._nodes = graph.node
        self._inits = {i.name: i for i in graph.initializer}
        self._producers = {o: k for k, n in enumerate(graph.node) for o in n.output if o}
        self._failed: set[str] = set()
        self._static = set(self._inits)  # computable from constants alone, so worth evaluating on demand
        for node in graph.node:
            if _evaluable(node) and node.op_type not in _SEEDS and all(not i or i in self._static for i in node.input):
                self._static.update(o for o in node.output if o)

    def get(self, name: str, depth: int = 0) -> np.ndarray | None:
        """The value of ``name`` when it is known or computable from constants alone, else None."""
        if name in self.known:
            return self.known[name]
        if name in self._inits:
            self.known[name] = numpy_helper.to_array(self._inits[name])
            return self.known[name]
        index = self._producers.get(name)
        if index is None or name in self._failed or name not in self._static or depth > 64:
            return None
        node = self._nodes[index]
        result = self.evaluate(node, depth + 1)
        if result is None:
            self._failed.update(node.output)
            return None
        self.known.update(result)
        self.evaluated.add(index)
        return result[name]

    def evaluate(self, node: onnx.NodeProto, depth: int = 0) -> dict[str, np.ndarray] | None:
        """``node``'s outputs when every input it reads is known and each output is small."""
        if any(i and i not in self.known and i not in self._static for i in node.input):
            return None  # reads a value computed at run time
        feeds = {}
        for name in node.input:
            if name:
                value = self.get(name, depth)
                if value is None:
                    return None
                feeds[name] = value
        return self._run(node, feeds)

    def _run(self, node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        from onnx.reference import ReferenceEvaluator

        outs = [o for o in node.output if o]
        try:
            graph = helper.make_graph(
                [node], "fold", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                                 for n, v in feeds.items()],
                [helper.make_tensor_value_info(o, 0, None) for o in outs])
            probe = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
            results = ReferenceEvaluator(probe).run(None, feeds)
        except Exception:  # noqa: BLE001 - the reference cannot run it: the node stays in the graph
            return None
        if len(results) != len(outs) or not all(isinstance(r, np.ndarray) and r.size <= MAX_ELEMENTS
                                                for r in results):
            return None
        return {o: np.ascontiguousarray(r) if r.ndim else r for o, r in zip(outs, results)}


def _evaluable(node: onnx.NodeProto) -> bool:
    """A standard, deterministic node without subgraphs (``Constant`` included)."""
    return node.domain in _STANDARD and node.op_type not in _NEVER and not _has_subgraph(node)


def _replace(graph: onnx.GraphProto, removed: set[int], values: _Constants) -> None:
    """Drop the nodes at ``removed`` from ``graph``, and with them the constant nodes (``Constant``,
    or computed from constants only) and initializers that nothing reads any more; each folded
    value still read becomes an initializer. Deleted in place: the weights are not copied."""
    nodes = graph.node
    produced = {o for k in removed for o in nodes[k].output if o}
    kept = [k for k in range(len(nodes)) if k not in removed]
    read = _names_read([nodes[k] for k in kept], graph)
    while True:  # constants that fed only folded nodes
        unused = {k for k in kept if (k in values.evaluated or nodes[k].op_type == "Constant" and _evaluable(nodes[k]))
                  and not any(o in read for o in nodes[k].output)}
        if not unused:
            break
        kept = [k for k in kept if k not in unused]
        read = _names_read([nodes[k] for k in kept], graph)
    keep = set(kept)
    for k in reversed(range(len(nodes))):
        if k not in keep:
            del nodes[k]
    listed = {i.name for i in graph.input}
    for k in reversed(range(len(graph.initializer))):
        if graph.initializer[k].name not in read and graph.initializer[k].name not in listed:
            del graph.initializer[k]
    have = {i.name for i in graph.initializer}
    graph.initializer.extend(numpy_helper.from_array(np.asarray(values.known[name]), name)
                             for name in sorted(produced & read) if name not in have)
    live = read | {o for n in nodes for o in n.output}
    for k in reversed(range(len(graph.value_info))):
        if graph.value_info[k].name not in live:
            del graph.value_info[k]


def _names_read(nodes: list[onnx.NodeProto], graph: onnx.GraphProto) -> set[str]:
    """Every name ``nodes`` read, in their subgraphs too, and the graph's outputs."""
    read = {o.name for o in graph.output}
    for node in nodes:
        read.update(i for i in node.input if i)
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                read.update(i for inner, _ in walk_nodes(sub) for i in inner.input if i)
    return read


__all__ = ["MAX_ELEMENTS", "fold_shape_arithmetic", "has_shape_ops"]
