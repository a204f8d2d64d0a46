"""Which ONNX node each binding of an imported Relax ``main`` came from.

TVM's ONNX importer names every binding ``lv``, ``lv1``, ... and keeps no trace of the ONNX node
that produced it, so a graph of the imported module cannot say "this conv2d is
``layer1.0.conv1``". :func:`traced_from_onnx` runs the same importer and watches each ONNX node
being converted: the expression a converter returns, and the bindings that it and its helpers
emit, belong to that node. The module it returns is exactly the one ``from_onnx`` returns, and
:func:`onnx_sources` finds what the trace saw from the loaded model.

For a model imported without the tracer, :func:`onnx_sources` imports its kept ONNX model once
more with it (0.03 s for ResNet-18, 0.3 s for DenseNet-121 here) and uses the result when the two modules bind the same names to the same calls.

Attribution rules, over ``main``'s bindings in order: the variable a converter returned belongs to
its node; a binding whose value is the very expression a converter returned (the importer emits
those lazily, when a consumer needs them) belongs to that converter's node; an item taken out of a
tuple belongs to the tuple's node; any other binding (a sub-expression normalised into its own
binding) belongs to the node of its first consumer, else to the binding before it.
"""

from __future__ import annotations

import contextlib
import io
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from threading import Lock

import onnx
import tvm
from tvm import relax

from store.values import DictValue


@dataclass(frozen=True)
class OnnxNode(DictValue):
    """One ONNX node: its position in the graph, name (its first output's name when it has
    none), operator type and attributes (as short strings)."""

    index: int
    name: str
    op_type: str
    attrs: dict[str, str]


def node_name(node: onnx.NodeProto) -> str:
    """The name a person knows a node by: its own, else its first output's."""
    return node.name or (node.output[0] if node.output else node.op_type)


def _attr_text(attr: onnx.AttributeProto) -> str:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        if value and isinstance(value[0], (int, float)):
            return "[" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) + "]"
        return f"[{len(value)} items]"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (int, str)):
        return str(value)
    return type(value).__name__  # tensors and subgraphs: their kind only


def onnx_node(model: onnx.ModelProto, index: int) -> OnnxNode:
    node = model.graph.node[index]
    return OnnxNode(index, node_name(node), node.op_type, {a.name: _attr_text(a) for a in node.attribute})


# -- tracing the importer ------------------------------------------------------------------

def _importer_class():
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    class _TracingImporter(ONNXGraphImporter):
        """The stock importer, plus schedx's own operators (:mod:`explorer.models.custom_ops`) and
        a record of what each node's converter returned."""

        def __init__(self, graph: onnx.GraphProto, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._graph_nodes = list(graph.node)
            self._cursor = 0
            self.returned: list[tuple[int, object]] = []  # (ONNX node index, converter result)

        def _node_index(self, op_name: str, name: str) -> int | None:
            for k in range(self._cursor, len(self._graph_nodes)):
                node = self._graph_nodes[k]
                if node.op_type == op_name and node.name == name:
                    self._cursor = k + 1
                    return k
            return None  # a node of a subgraph (If branches): not one of main's

        def _check_for_unsupported_ops(self, graph):
            from explorer.models.custom_ops import CUSTOM_OPS

            ours = CUSTOM_OPS | {"Loop"}  # a Loop left by loop_unroll: explorer.models.loop_relax
            if not any(n.op_type in ours for n in graph.node):
                return super()._check_for_unsupported_ops(graph)
            stock = onnx.GraphProto()
            stock.node.extend(n for n in graph.node if n.op_type not in ours)
            return super()._check_for_unsupported_ops(stock)

        def _convert_operator(self, op_name, inputs, attrs, opset):
            from explorer.models.custom_ops import convert_custom

            if op_name == "Loop":
                from explorer.models.loop_relax import convert_loop

                sym = convert_loop(self, list(inputs), attrs)
            else:
                sym = convert_custom(op_name, self.bb, inputs, attrs)
            if sym is None:
                sym = super()._convert_operator(op_name, inputs, attrs, opset)
            index = self._node_index(op_name, str(attrs.get("tvm_custom", {}).get("name", "")))
            if index is not None:
                self.returned.append((index, sym))
            return sym

    return _TracingImporter


def _opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def _bindings(mod: tvm.IRModule) -> list:
    func = mod["main"]
    body = func.body
    return [b for block in body.blocks for b in block.bindings] if isinstance(body, relax.SeqExpr) else []


def _used_vars(expr: object, out: list) -> None:
    """Variables an expression reads (calls, tuples, tuple items; enough for ``main``)."""
    if isinstance(expr, relax.Var):
        out.append(expr)
    elif isinstance(expr, relax.Call):
        for a in expr.args:
            _used_vars(a, out)
    elif isinstance(expr, relax.Tuple):
        for f in expr.fields:
            _used_vars(f, out)
    elif isinstance(expr, relax.TupleGetItem):
        _used_vars(expr.tuple_value, out)


def attribute_bindings(mod: tvm.IRModule, returned: list[tuple[int, object]]) -> dict[str, int]:
    """``{binding variable name: ONNX node index}`` for ``main`` (see the module docstring)."""
    result_var: dict = {}
    pending: dict = {}
    for index, sym in returned:
        items = list(sym.fields) if isinstance(sym, relax.Tuple) else [sym]
        for item in items:
            if isinstance(item, relax.Var):
                result_var.setdefault(item, index)
            elif isinstance(item, relax.Call):
                pending.setdefault(item, index)
    bindings = _bindings(mod)
    owner: list[int | None] = []
    by_var: dict = {}
    for b in bindings:
        who = result_var.get(b.var)
        if who is None:
            who = pending.get(b.value)
        if who is None and isinstance(b.value, relax.TupleGetItem) and isinstance(b.value.tuple_value, relax.Var):
            who = by_var.get(b.value.tuple_value)
        owner.append(who)
        if who is not None:
            by_var[b.var] = who
    consumers: dict = {}
    for i, b in enumerate(bindings):
        used: list = []
        _used_vars(b.value, used)
        for v in used:
            consumers.setdefault(v, []).append(i)
    for i in range(len(bindings) - 1, -1, -1):  # sub-expressions: their first consumer's node
        if owner[i] is None:
            owner[i] = next((owner[j] for j in consumers.get(bindings[i].var, []) if owner[j] is not None), None)
    for i in range(1, len(bindings)):  # dead leftovers: the node emitted just before
        if owner[i] is None:
            owner[i] = owner[i - 1]
    return {b.var.name: who for b, who in zip(bindings, owner) if who is not None}


def _trace_import(model: onnx.ModelProto, shape_dict: Mapping | None, dtype_dict: Mapping | str | None,
                  **kwargs) -> tuple[tvm.IRModule, dict[str, int]]:
    importer = _importer_class()(model.graph, shape_dict or {}, dtype_dict or "float32", **kwargs)
    mod = importer.from_onnx(model.graph, _opset(model))
    return mod, attribute_bindings(mod, importer.returned)


def _sources_from(model: onnx.ModelProto, by_index: Mapping[str, int]) -> OnnxSources:
    nodes: dict[int, OnnxNode] = {}
    out = {}
    for var, index in by_index.items():
        if index not in nodes and 0 <= index < len(model.graph.node):
            nodes[index] = onnx_node(model, index)
        if index in nodes:
            out[var] = nodes[index]
    return OnnxSources(out)


@dataclass(frozen=True)
class OnnxSources:
    """ONNX nodes by Relax binding name, for one imported model."""

    by_var: dict[str, OnnxNode]

    def of(self, var: str) -> OnnxNode | None:
        return self.by_var.get(var)

    def __len__(self) -> int:
        return len(self.by_var)


# Modules imported through traced_from_onnx, with what the trace found; a few are kept (the UI
# caches about as many loaded models) and the module itself is the key, compared by identity.
_TRACED: OrderedDict[int, tuple[tvm.IRModule, OnnxSources]] = OrderedDict()
_TRACED_KEEP = 16
_TRACED_LOCK = Lock()


def traced_from_onnx(model: onnx.ModelProto, shape_dict: Mapping | None = None,
                     dtype_dict: Mapping | str | None = "float32", **kwargs) -> tvm.IRModule:
    """``tvm.relax.frontend.onnx.from_onnx``, remembering which ONNX node each binding of
    ``main`` came from (a drop-in replacement for the import step; :func:`onnx_sources` reads it).
    """
    mod, by_index = _trace_import(model, shape_dict, dtype_dict, **kwargs)
    try:
        sources = _sources_from(model, by_index)
    except Exception:  # noqa: BLE001 - naming is a help: an import never fails because of it
        return mod
    with _TRACED_LOCK:
        _TRACED[id(mod)] = (mod, sources)
        while len(_TRACED) > _TRACED_KEEP:
            _TRACED.popitem(last=False)
    return mod


def _same_bindings(a: tvm.IRModule, b: tvm.IRModule) -> bool:
    """Both ``main`` functions bind the same names to calls of the same operators, in order."""
    from explorer.ir.relax_walk import callee_name

    def sig(mod):
        return [(x.var.name, callee_name(x.value) if isinstance(x.value, relax.Call) else type(x.value).__name__)
                for x in _bindings(mod)]

    return sig(a) == sig(b)


def onnx_sources(loaded) -> OnnxSources:
    """The ONNX node behind each binding of ``loaded.mod``'s ``main``.

    Known at once when the model was imported through :func:`traced_from_onnx`; otherwise its
    kept ONNX model (``loaded.onnx_model``) is imported again with the tracer and used when both
    imports bind the same names to the same operators. Empty for models that did not come from
    ONNX or cannot be retraced."""
    with _TRACED_LOCK:
        hit = _TRACED.get(id(loaded.mod))
    if hit is not None and hit[0] is loaded.mod:
        return hit[1]
    model = getattr(loaded, "onnx_model", None)
    if not isinstance(model, onnx.ModelProto):
        return OnnxSources({})
    try:
        shapes = {name: list(shape) for name, shape, _ in loaded.info.inputs}
        dtypes = {name: dtype for name, _, dtype in loaded.info.inputs}
        with contextlib.redirect_stdout(io.StringIO()):  # the importer prints on failures
            mod, by_index = _trace_import(model, shapes, dtypes)
    except Exception:  # noqa: BLE001 - a model the importer took once but not twice: no names
        return OnnxSources({})
    if not _same_bindings(mod, loaded.mod):
        return OnnxSources({})
    return _sources_from(model, by_index)


__all__ = ["OnnxNode", "OnnxSources", "attribute_bindings", "node_name", "onnx_node",
           "onnx_sources", "traced_from_onnx"]
