"""``Identity`` nodes bypassed: their readers read what the ``Identity`` reads.

paddle2onnx writes every weight, and every shape vector a ``Reshape`` or a ``Resize`` needs, as a
``Constant`` node behind an ``Identity`` (a DB text detector: 259 Constants, 68 Identities). Two
things then fail that would not on the bare constant: ONNX's shape inference does not carry a value
through ``Identity``, so a ``Reshape`` to ``Identity(Constant)`` gets no output shape and the shape
arithmetic after it never folds (:mod:`explorer.models.shape_fold`); and TVM's importer refuses an
``Identity`` of a shape value ("Node Identity.10 cannot handle ShapeExpr inputs").

:func:`bypass_identities` removes each main-graph ``Identity`` whose output is not a graph output
and is not read inside a subgraph (an ``If`` branch or a ``Loop`` body reads outer names by
name): its readers read its input instead. The model computes the same values.
"""

from __future__ import annotations

import onnx

from explorer.models.onnx_ops import walk_nodes


def _read_in_subgraphs(graph: onnx.GraphProto) -> set[str]:
    """Every name a node inside a subgraph of ``graph`` reads (outer names included)."""
    names: set[str] = set()
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names.update(i for n, _ in walk_nodes(sub) for i in n.input)
                names.update(o.name for o in sub.output)
    return names


def bypass_identities(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` without its bypassable ``Identity`` nodes (see the module), and a note
    saying how many went; a model with none comes back unchanged, with no note."""
    graph = model.graph
    keep = {o.name for o in graph.output} | _read_in_subgraphs(graph)
    source: dict[str, str] = {}
    for node in graph.node:
        if (node.op_type == "Identity" and node.domain in ("", "ai.onnx") and len(node.input) == 1
                and node.output[0] not in keep):
            source[node.output[0]] = source.get(node.input[0], node.input[0])
    if not source:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = [n for n in out.graph.node if not (n.op_type == "Identity" and n.output and n.output[0] in source)]
    for node in nodes:
        for k, name in enumerate(node.input):
            if name in source:
                node.input[k] = source[name]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    gone = set(source)
    kept_info = [vi for vi in out.graph.value_info if vi.name not in gone]
    del out.graph.value_info[:]
    out.graph.value_info.extend(kept_info)
    return out, [f"{len(source)} Identity nodes bypassed (their readers read their inputs)"]


__all__ = ["bypass_identities"]
