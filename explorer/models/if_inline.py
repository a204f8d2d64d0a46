"""Splice the taken branch of an ``If`` whose condition is computed from constants alone.

Once a scalar input that selects a branch is pinned (:func:`explorer.models.control_flow.pin_scalar_inputs`,
silero-vad's ``sr``), the condition of its ``If`` is a function of constants. The branch taken
is then spliced into the graph in place of the ``If``: its nodes (and initializers, and the
shapes inference gave its values) join the enclosing graph, names it defines that the rest of
the model already uses are renamed (in nested branches too), the names it reads from outer
scopes stay as they are (they are defined before the ``If``), and each branch output becomes
the ``If``'s output through an ``Identity``. Nested ``If`` nodes whose conditions become
known the same way are spliced in turn.

The model keeps its meaning exactly, so ONNX Runtime runs it as the reference (ONNX Runtime
1.2x's own inlining of a constant-condition ``If`` fails on nested branches: "is not If node's
input or previous node output in this subgraph", or a segfault with all optimisations on).
Shape-dependent conditions are left to :func:`explorer.models.control_flow.fold_branches`.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from explorer.models.onnx_rewrite import default_opset

# Operators evaluated to decide a condition (small tensors only): comparisons, logic, arithmetic,
# casts and data movement; nothing random, nothing with a subgraph.
_EVALUATED = frozenset({
    "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "And", "Or", "Xor", "Where",
    "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Min", "Max", "Cast", "CastLike", "Identity",
    "Squeeze", "Unsqueeze", "Reshape", "Flatten", "Gather", "Slice", "Concat", "ReduceMin", "ReduceMax",
    "ReduceSum", "Size"})
_SMALL = 4096  # elements: a condition is a scalar, its inputs stay small


class _Constants:
    """Values computed from the initializers and Constant nodes of a graph (and its outer scopes)."""

    def __init__(self, graph: onnx.GraphProto, opset: int, outer: _Constants | None = None) -> None:
        self.opset, self.outer = opset, outer
        self.values: dict[str, np.ndarray | None] = {i.name: numpy_helper.to_array(i) for i in graph.initializer
                                                     if _size(i.dims) <= _SMALL}
        self.producers = {o: n for n in graph.node for o in n.output if o}
        self.local = {i.name for i in graph.initializer} | {i.name for i in graph.input} | set(self.producers)

    def value(self, name: str, depth: int = 0) -> np.ndarray | None:
        if name in self.values:
            return self.values[name]
        if name not in self.local:
            return self.outer.value(name, depth) if self.outer is not None else None
        node = self.producers.get(name)
        result = None
        if node is not None and node.domain in ("", "ai.onnx") and depth < 32:
            if node.op_type == "Constant":
                result = _constant_node(node)
            elif node.op_type in _EVALUATED:
                inputs = [self.value(i, depth + 1) for i in node.input if i]
                if all(v is not None and v.size <= _SMALL for v in inputs):
                    result = _evaluate(node, inputs, self.opset).get(name)
        self.values[name] = result
        return result


def _size(dims) -> int:
    return int(np.prod([int(d) for d in dims])) if len(dims) else 1


def _constant_node(node: onnx.NodeProto) -> np.ndarray | None:
    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
        if attr.name in ("value_int", "value_float"):
            return np.array(helper.get_attribute_value(attr))
        if attr.name in ("value_ints", "value_floats"):
            return np.array(list(helper.get_attribute_value(attr)))
    return None


def _evaluate(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int) -> dict[str, np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    names = [i for i in node.input if i]
    try:
        graph = helper.make_graph([node], "condition", [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in zip(names, inputs)],
            [helper.make_tensor_value_info(o, 0, None) for o in node.output if o])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        outputs = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    except Exception:  # noqa: BLE001 - not computable here: the condition stays unknown
        return {}
    return {o: np.asarray(v) for o, v in zip([o for o in node.output if o], outputs)}


def _branch(node: onnx.NodeProto, taken: bool) -> onnx.GraphProto:
    label = "then_branch" if taken else "else_branch"
    return next(a.g for a in node.attribute if a.name == label)


def _defined(graph: onnx.GraphProto) -> set[str]:
    """Names ``graph`` defines (its initializers and node outputs, nested graphs included)."""
    names = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    for node in graph.node:
        names.update(o for o in node.output if o)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names |= _defined(sub)
    return names


def _node_names(graph: onnx.GraphProto) -> set[str]:
    names = set()
    for node in graph.node:
        names.add(node.name)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names |= _node_names(sub)
    return names


def _rename(graph: onnx.GraphProto, renamed: dict[str, str]) -> None:
    """Apply ``renamed`` to every use and definition in ``graph`` and the graphs nested in it."""
    for node in graph.node:
        node.input[:] = [renamed.get(n, n) for n in node.input]
        node.output[:] = [renamed.get(n, n) for n in node.output]
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _rename(sub, renamed)
    for group in (graph.initializer, graph.value_info, graph.output, graph.input):
        for item in group:
            item.name = renamed.get(item.name, item.name)


class _Splicer:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.opset = default_opset(model)
        self.taken_names = _defined(model.graph) | _node_names(model.graph)  # tensor and node names
        self.count = 0

    def fresh(self, base: str) -> str:
        k, name = 1, f"{base}_inlined"
        while name in self.taken_names:
            k += 1
            name = f"{base}_inlined{k}"
        self.taken_names.add(name)
        return name

    def graph(self, graph: onnx.GraphProto, outer: _Constants | None = None) -> bool:
        """Splice the known ``If`` nodes of ``graph``, in place, until none is left; then do the
        same in the branches kept. True when anything changed."""
        changed = False
        while True:
            constants = _Constants(graph, self.opset, outer)
            spliced = self._first(graph, constants)
            if not spliced:
                break
            changed = True
        constants = _Constants(graph, self.opset, outer)
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    changed |= self.graph(attr.g, constants)
        return changed

    def _first(self, graph: onnx.GraphProto, constants: _Constants) -> bool:
        for index, node in enumerate(graph.node):
            if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.input:
                continue
            cond = constants.value(node.input[0])
            if cond is None or cond.size != 1:
                continue
            self._splice(graph, index, node, bool(cond.reshape(())))
            return True
        return False

    def _splice(self, graph: onnx.GraphProto, index: int, node: onnx.NodeProto, taken: bool) -> None:
        branch = onnx.GraphProto()
        branch.CopyFrom(_branch(node, taken))
        own = _defined(branch)
        # a name the branch defines that the rest of the model has too gets a fresh one
        others = self.taken_names - own
        renamed = {name: self.fresh(name) for name in sorted(own) if name in others or name in node.output}
        _rename(branch, renamed)
        self.taken_names |= _defined(branch)
        nodes = list(branch.node) + [helper.make_node("Identity", [out.name], [target],
                                                      name=self.fresh(f"{node.name or target}/output"))
                                     for out, target in zip(branch.output, node.output) if target]
        rest = list(graph.node)
        del graph.node[:]
        graph.node.extend(rest[:index] + nodes + rest[index + 1:])
        graph.initializer.extend(branch.initializer)
        graph.value_info.extend(branch.value_info)
        self.count += 1


def inline_known_ifs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` with every ``If`` whose condition constants decide replaced by the
    branch taken (see the module), and how many were; the model itself when none was."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    splicer = _Splicer(out)
    splicer.graph(out.graph)
    return (out, splicer.count) if splicer.count else (model, 0)


__all__ = ["inline_known_ifs"]
