"""What the browser needs to draw one snapshot's graph and explain each node: plain data, JSON.

A node is titled by the model's own name for it (the ONNX node it came from, found through
:class:`~explorer.graph.lineage.Lineage` and :mod:`explorer.graph.onnx_names`), then what it calls
and its output type. Its details hold everything a click shows: operator, attributes, shapes and
dtypes of its inputs and output, the ONNX nodes it stands for, the kernel it is (after
LegalizeOps) and the kernels of the final module that compute it.

The payload of a snapshot does not depend on what it is compared with; the diff statuses travel
apart (:func:`status_codes`), so comparing with another pass never lays a graph out again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import networkx as nx

from explorer.graph.dot import DTYPE_SHORT, KIND_FILL, STATUS_STYLE, fmt_bytes
from explorer.graph.layout import GraphLayout, layout
from explorer.graph.onnx_names import OnnxNode, OnnxSources
from explorer.text import shorten

TITLE_CHARS = 34
STATUS_CODES = {"kept": 0, "changed": 1, "removed": 2, "added": 3, "fused": 4, "merged": 5, "lowered": 6}


def type_text(shape, dtype) -> str:
    if shape is None:
        return DTYPE_SHORT.get(dtype, dtype or "")
    return "x".join(map(str, shape)) + (f" {DTYPE_SHORT.get(dtype, dtype)}" if dtype else "")


def onnx_names_of(g0: nx.DiGraph, origins: frozenset[str], sources: OnnxSources) -> list[OnnxNode]:
    """The ONNX nodes behind a set of input-graph nodes, in the ONNX graph's order."""
    found: dict[int, OnnxNode] = {}
    for o in origins:
        if o in g0:
            node = sources.of(g0.nodes[o]["var"])
            if node is not None:
                found[node.index] = node
    return [found[k] for k in sorted(found)]


# what only moves or retypes data: never the node that stands for an ONNX node in a search
_DATA_MOVEMENT = ("permute_dims", "layout_transform", "reshape", "expand_dims", "squeeze", "flatten",
                  "broadcast_to", "astype", "transpose")


def _alnum(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _stands_for(g: nx.DiGraph, nodes: list[str], name: str) -> str:
    """Of ``nodes`` (in drawing order), the one that stands for something called ``name`` (an
    ONNX operator type, a fused kernel's name): the first whose operator ``name`` names
    (``conv2d`` for Conv and for fused_conv2d_add_relu), else the first that computes (not a
    transpose, reshape or cast), else the first."""
    wanted = _alnum(name)
    ops = {n: (g.nodes[n]["op"] or "").lower().rsplit(".", 1)[-1] for n in nodes}
    named = [n for n in nodes if ops[n] and (_alnum(ops[n]) in wanted or wanted in _alnum(ops[n]))]
    computing = [n for n in nodes if not any(m in ops[n] for m in _DATA_MOVEMENT)]
    return (named or computing or nodes)[0]


def representatives(g: nx.DiGraph, names: Mapping[str, list[OnnxNode]]) -> tuple[dict[int, str], dict[tuple, str]]:
    """The one node of ``g`` that stands in a search for each ONNX node (by its index) and for
    each call of a fused function (by its name and call). A pass splits an ONNX Conv into a
    convolution, its bias add and the layout's transposes, and FuseOps names a group of three
    after its convolution; a search for "Conv" should count convolutions alike before and after
    (it counted 109 before and 211 after on a layout model, when every node from a Conv or in a
    conv group matched)."""
    became: dict[int, list[str]] = {}
    groups: dict[tuple, list[str]] = {}
    for n in sorted(g.nodes, key=lambda n: g.nodes[n]["order"]):
        for x in names.get(n, ()):
            became.setdefault(x.index, []).append(n)
        d = g.nodes[n]
        if d["group"]:
            groups.setdefault((d["group"], d.get("group_call", 0)), []).append(n)
    op_type = {x.index: x.op_type for xs in names.values() for x in xs}
    return ({index: _stands_for(g, nodes, op_type[index]) for index, nodes in became.items()},
            {key: _stands_for(g, nodes, key[0]) for key, nodes in groups.items()})


def search_text(d: Mapping, names: list[OnnxNode], n: str, onnx_nodes: Mapping[int, str]) -> str:
    """What a search matches a node by (lower case): its operator and variable, and the names
    and operator types of the ONNX nodes it came from where it is the node that stands for them
    (:func:`representatives`). A fused group's name is matched apart (:func:`group_text`)."""
    own = [x for x in names if onnx_nodes.get(x.index) == n]
    return " ".join([d["op"] or "", d["var"] or ""] + [x.name for x in own] + [x.op_type for x in own]).lower()


def group_text(d: Mapping, n: str, groups: Mapping[tuple, str]) -> str:
    """The fused group's name, on the node that stands for that call of it (else ""): the browser
    matches it by its start, with or without ``fused_`` (``fused_conv2d_add_relu`` for "conv" or
    "fused_conv", not for "relu", which the relu node itself matches)."""
    key = (d["group"], d.get("group_call", 0))
    return d["group"].lower() if d["group"] and groups.get(key) == n else ""


def node_lines(d: Mapping, names: list[OnnxNode]) -> list[str]:
    """Title (the model's name), what it calls, its output type."""
    if d["kind"] == "input":
        return [shorten(d["var"] or "input", TITLE_CHARS), "input · " + type_text(d["shape"], d["dtype"])]
    if d["kind"] == "output":
        return ["output", type_text(d["shape"], d["dtype"])]
    call = shorten(d["label"], TITLE_CHARS)
    lines = []
    if names:
        title = shorten(names[0].name, TITLE_CHARS) + (f" +{len(names) - 1}" if len(names) > 1 else "")
        if title != call:
            lines.append(title)
    lines.append(call)
    kind = type_text(d["shape"], d["dtype"])
    if d.get("const_count"):
        kind += f" · +{d['const_count']} const"
    lines.append(kind)
    return [ln.replace("\\", "/") for ln in lines]


def _details(g: nx.DiGraph, n: str, d: Mapping, names: list[OnnxNode], becomes: list[str], titles: Mapping) -> dict:
    out = {"op": d["op"], "var": d["var"], "type": type_text(d["shape"], d["dtype"])}
    if d["group"]:
        out["group"] = d["group"]
    if d.get("attrs"):
        out["attrs"] = dict(d["attrs"])
    if d.get("const_count"):
        out["consts"] = f"{d['const_count']} ({fmt_bytes(d['const_bytes'])}): " + ", ".join(d.get("const_shapes", ()))
    out["inputs"] = [[titles[p], type_text(g.nodes[p]["shape"], g.nodes[p]["dtype"])]
                     for p in sorted(g.predecessors(n), key=lambda p: g.nodes[p]["order"])]
    if names:
        out["onnx"] = [[x.name, x.op_type, ", ".join(f"{k}={v}" for k, v in x.attrs.items())] for x in names[:64]]
        if len(names) > 64:
            out["onnx_more"] = len(names) - 64
    if d["kind"] == "kernel":
        out["kernel"] = d["op"]
    if becomes:
        out["becomes"] = becomes
    return out


def snapshot_view(g: nx.DiGraph, g0: nx.DiGraph, origins: Mapping[str, frozenset[str]], sources: OnnxSources,
                  becomes: Mapping[str, list[str]], *, laid_out: GraphLayout | None = None) -> dict:
    """The JSON-ready payload for one graph (see the module docstring).

    ``g0`` is the input graph and ``origins`` maps each node of ``g`` to nodes of ``g0``;
    ``becomes`` maps a node to the names of the final module's kernels that compute it."""
    order = sorted(g.nodes, key=lambda n: g.nodes[n]["order"])
    names = {n: onnx_names_of(g0, origins.get(n, frozenset()), sources) for n in order}
    lines = {n: node_lines(g.nodes[n], names[n]) for n in order}
    titles = {n: lines[n][0] for n in order}
    pos = laid_out or layout(g, lines)
    index = {n: i for i, n in enumerate(order)}
    onnx_nodes, groups = representatives(g, names)
    nodes = []
    for n in order:
        d = g.nodes[n]
        x, y, w, h = pos.nodes[n]
        nodes.append({"id": n, "x": x, "y": y, "w": w, "h": h, "k": d["kind"], "t": lines[n],
                      "s": search_text(d, names[n], n, onnx_nodes), "g": group_text(d, n, groups),
                      "o": sorted(int(o[1:]) for o in origins.get(n, ()) if o[1:].isdigit()),
                      "d": _details(g, n, d, names[n], becomes.get(n, []), titles)})
    edges = [[index[u], index[v], path] for u, v, path in pos.edges]
    return {"w": pos.width, "h": pos.height, "engine": pos.engine, "nodes": nodes, "edges": edges,
            "clusters": [list(c) for c in pos.clusters]}


def status_codes(g: nx.DiGraph, statuses: Mapping[str, str]) -> list[int]:
    """Diff statuses of ``g``'s nodes in drawing order, as small integers (:data:`STATUS_CODES`)."""
    order = sorted(g.nodes, key=lambda n: g.nodes[n]["order"])
    return [STATUS_CODES.get(statuses.get(n, "kept"), 0) for n in order]


def style_table() -> dict:
    """Colours the browser uses: fill per node kind, (border, fill) per diff status."""
    return {"kind": KIND_FILL, "status": {STATUS_CODES[s]: list(v) for s, v in STATUS_STYLE.items()},
            "names": {v: k for k, v in STATUS_CODES.items()}}


def to_json(payload: dict) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


__all__ = ["STATUS_CODES", "node_lines", "onnx_names_of", "snapshot_view", "status_codes", "style_table",
           "to_json", "type_text"]
