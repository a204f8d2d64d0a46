"""Helpers for ONNX-to-ONNX rewrites: read what a node's inputs are, emit its replacement.

The rewrites that run before TVM's importer (recurrent layers, QOperator quantized ops) replace
one node by a few plain ones. Keeping them ONNX-to-ONNX means ONNX Runtime can run the rewritten
model against the original, which is how the tests check them. This module holds what they share:

- :class:`GraphView`: constants (initializers and ``Constant`` nodes), static shapes (inputs,
  ``value_info``, outputs, initializers) and the names already taken in a graph;
- :class:`Emitter`: builds replacement nodes and initializers with fresh names, choosing the
  operator form the model's opset expects (``Slice`` and ``Clip`` took attributes before
  opsets 10 and 11 and inputs since);
- :func:`replace_nodes`: swaps each rewritten node for its replacement, in place in the order,
  in the main graph and, asked to, in the branches of every ``If`` (a view of a branch sees the
  constants and shapes of the scopes around it; its new initializers stay in the branch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper


# Ops a constant may pass through and still be a constant (weights sliced, stacked, reshaped)
# and generators of constants from constant sizes (a window of 400 samples, a mel filter bank)
FOLDABLE = frozenset({"Identity", "Cast", "Slice", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Flatten",
                      "Transpose", "Gather", "Split", "Expand", "Tile", "Add", "Sub", "Mul", "Div", "Neg",
                      "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"})


def default_opset(model: onnx.ModelProto) -> int:
    """The model's ``ai.onnx`` opset version (1 when none is declared)."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


class GraphView:
    """What a rewrite may ask about one graph of a model (the main graph, or ``graph``, a branch
    inside it, seen from ``outer``, the view of the graph around it): constants, shapes, used
    names (those of the whole model, so that no new name shadows one in another scope)."""

    def __init__(self, model: onnx.ModelProto, graph: onnx.GraphProto | None = None, *,
                 outer: GraphView | None = None, where: str = "") -> None:
        graph = model.graph if graph is None else graph
        self.opset = default_opset(model)
        self.outer = outer
        self.where = where  # "" for the main graph, "If_0/else_branch/" inside a branch
        self._inits = {i.name: i for i in graph.initializer}
        self._const_nodes = {n.output[0]: n for n in graph.node if n.op_type == "Constant" and n.output}
        self._shapes: dict[str, tuple[int, ...] | None] = {}
        self._ranks: dict[str, int] = {}
        self.elem_types: dict[str, int] = {}  # ONNX element type of each typed value
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            self._shapes.setdefault(vi.name, _static_shape(vi))
            if vi.type.tensor_type.HasField("shape"):
                self._ranks.setdefault(vi.name, len(vi.type.tensor_type.shape.dim))
            if vi.type.tensor_type.elem_type:
                self.elem_types.setdefault(vi.name, vi.type.tensor_type.elem_type)
        for init in graph.initializer:
            self._shapes[init.name] = tuple(int(d) for d in init.dims)
            self.elem_types[init.name] = init.data_type
        if outer is not None:
            self.elem_types = {**outer.elem_types, **self.elem_types}
            self.names = outer.names  # one set for the whole model
        else:
            self.names = _all_names(graph)
        self.names.update(self._inits, (vi.name for vi in graph.input))
        self._producers: dict[str, onnx.NodeProto] = {}
        self._folded: dict[str, np.ndarray | None] = {}
        for node in graph.node:
            self.names.update(node.output)
            self._producers.update((o, node) for o in node.output if o)
            if node.name:
                self.names.add(node.name)

    def constant(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is an initializer, a ``Constant`` node's output, or made from
        constants by data-movement ops (``FOLDABLE``: PyTorch exports an LSTM's R as
        ``Unsqueeze(Concat(Slice(initializer)))``), evaluated here with ONNX's reference runtime."""
        if not name:
            return None
        if name in self._inits:
            return numpy_helper.to_array(self._inits[name])
        node = self._const_nodes.get(name)
        if node is not None:
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t)
            return None
        if name not in self._producers and self.outer is not None:
            return self.outer.constant(name)
        return self._fold(name, depth=0)

    def _fold(self, name: str, depth: int) -> np.ndarray | None:
        if name in self._folded:
            return self._folded[name]
        node = self._producers.get(name)
        value = None
        if node is not None and node.op_type in FOLDABLE and node.domain in ("", "ai.onnx") and depth < 64:
            inputs = [self._fold(i, depth + 1) if i in self._producers and i not in self._const_nodes
                      else self.constant(i) for i in node.input if i]
            if all(v is not None for v in inputs):
                value = self._evaluate(node, inputs).get(name)
        self._folded[name] = value
        return value

    def _evaluate(self, node: onnx.NodeProto, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Run one node on constant inputs with ONNX's reference runtime, in the model's opset."""
        from onnx.reference import ReferenceEvaluator

        names = [i for i in node.input if i]
        try:
            graph = helper.make_graph([node], "fold", [helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in zip(names, inputs)],
                [helper.make_tensor_value_info(o, 0, None) for o in node.output if o])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
            outputs = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
        except Exception:  # noqa: BLE001 - not foldable here: the value stays unknown (computed at run time)
            return {}
        return {o: np.asarray(v) for o, v in zip([o for o in node.output if o], outputs)}

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The static shape of ``name``; ``None`` when unknown or symbolic."""
        shape = self._shapes.get(name)
        if shape is None and name not in self._shapes and name not in self._producers and self.outer is not None:
            return self.outer.shape(name)
        if shape is None:
            value = self.constant(name)
            return tuple(value.shape) if value is not None else None
        return shape

    def rank(self, name: str) -> int | None:
        """The rank of ``name`` when shape inference knows it, even with symbolic dimensions."""
        shape = self.shape(name)
        if shape is not None:
            return len(shape)
        if name in self._ranks:
            return self._ranks[name]
        return self.outer.rank(name) if self.outer is not None and name not in self._producers else None


def _all_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor and node name in ``graph`` and the graphs nested in it."""
    names = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    for node in graph.node:
        names.update(o for o in node.output if o)
        if node.name:
            names.add(node.name)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names |= _all_names(sub)
    return names


def if_branches(graph: onnx.GraphProto, path: str = "") -> Iterable[tuple[onnx.NodeProto, str, onnx.GraphProto, str]]:
    """Each ``If`` of ``graph`` (not of its branches) with each of its branches:
    ``(node, "then_branch", branch, "If_0/then_branch/")`` with ``path`` before the label."""
    for node in graph.node:
        if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
            continue
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield node, attr.name, attr.g, f"{path}{node.name or node.output[0]}/{attr.name}/"


def _static_shape(vi: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


class Emitter:
    """Builds the nodes and initializers that replace one node, with names no one uses yet."""

    def __init__(self, view: GraphView, prefix: str) -> None:
        self.view = view
        self.prefix = prefix.replace("/", "_") or "rewrite"
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def fresh(self, hint: str) -> str:
        """A tensor or node name not used in the graph, readable as ``<prefix>/<hint>``."""
        while True:
            self._count += 1
            name = f"{self.prefix}/{hint}_{self._count}"
            if name not in self.view.names:
                self.view.names.add(name)
                return name

    def const(self, value: np.ndarray, hint: str = "const") -> str:
        """A new initializer holding ``value``; returns its name."""
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def op(self, op_type: str, inputs: Iterable[str], *, out: str | None = None, hint: str | None = None,
           **attrs) -> str:
        """Emit one single-output node; ``out`` fixes the output name (to keep the original's)."""
        output = out or self.fresh(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=self.fresh(op_type), **attrs))
        return output

    def custom(self, op_type: str, domain: str, inputs: Iterable[str], outputs: int, **attrs) -> list[str]:
        """Emit one node of a custom ``domain`` with ``outputs`` fresh outputs; returns their names."""
        names = [self.fresh(f"{op_type.lower()}_out") for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self.fresh(op_type), domain=domain,
                                           **attrs))
        return names

    def slice(self, x: str, start: int, end: int, axis: int, *, out: str | None = None) -> str:
        """``x[start:end]`` along ``axis`` in the form the opset expects."""
        if self.view.opset >= 10:
            args = [self.const(np.array([v], "int64"), n) for v, n in ((start, "start"), (end, "end"), (axis, "axis"))]
            return self.op("Slice", [x, *args], out=out)
        return self.op("Slice", [x], out=out, starts=[start], ends=[end], axes=[axis])

    def split(self, x: str, sizes: list[int], axis: int) -> list[str]:
        """``x`` cut into parts of ``sizes`` along ``axis`` with one Split node (TVM makes one
        kernel of it, where as many Slices would make as many different kernels)."""
        outputs = [self.fresh("part") for _ in sizes]
        if len(sizes) == 1:
            self.nodes.append(helper.make_node("Identity", [x], outputs, name=self.fresh("Identity")))
        elif self.view.opset >= 13:
            split = self.const(np.array(sizes, "int64"), "split")
            self.nodes.append(helper.make_node("Split", [x, split], outputs, name=self.fresh("Split"), axis=axis))
        else:
            self.nodes.append(helper.make_node("Split", [x], outputs, name=self.fresh("Split"), axis=axis,
                                               split=list(sizes)))
        return outputs

    def clip(self, x: str, low: float, high: float, dtype: np.dtype) -> str:
        """``Clip(x, low, high)`` in the form the opset expects."""
        if self.view.opset >= 11:
            return self.op("Clip", [x, self.const(np.array(low, dtype), "min"), self.const(np.array(high, dtype), "max")])
        return self.op("Clip", [x], min=float(low), max=float(high))

    def reshape(self, x: str, shape: Iterable[int], *, out: str | None = None) -> str:
        return self.op("Reshape", [x, self.const(np.array(list(shape), "int64"), "shape")], out=out)


def replace_nodes(model: onnx.ModelProto, rewrite: Callable[[onnx.NodeProto, GraphView], Emitter | None], *,
                  branches: bool = False) -> int:
    """Replace, in place in ``model``'s main graph (and in the branches of its ``If`` nodes, at
    any depth, when ``branches``), every node that ``rewrite`` returns an :class:`Emitter` for by
    the emitter's nodes (initializers added to the same graph); returns how many."""
    return _replace_in(model, model.graph, rewrite, None, "", branches)


def _replace_in(model: onnx.ModelProto, graph: onnx.GraphProto, rewrite, outer: GraphView | None, where: str,
                branches: bool) -> int:
    view = GraphView(model, graph, outer=outer, where=where)
    new_nodes: list[onnx.NodeProto] = []
    count = 0
    for node in graph.node:
        emitted = rewrite(node, view)
        if emitted is None:
            new_nodes.append(node)
            continue
        count += 1
        new_nodes.extend(emitted.nodes)
        graph.initializer.extend(emitted.initializers)
    if count:
        del graph.node[:]
        graph.node.extend(new_nodes)
    if branches:
        inner = GraphView(model, graph, outer=outer, where=where) if count else view  # the rewritten graph
        for _node, _label, branch, path in list(if_branches(graph, where)):
            count += _replace_in(model, branch, rewrite, inner, path, branches)
    return count


__all__ = ["Emitter", "GraphView", "default_opset", "if_branches", "replace_nodes"]
