"""Operator graph -> Graphviz DOT, with fused groups as clusters and diff statuses as colours.

The DOT text is rendered in the browser by Streamlit (no ``dot`` binary needed) and written as
``.dot`` files by the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping

import graphviz
import networkx as nx

KIND_FILL = {"input": "#dbeafe", "output": "#dcfce7", "op": "#ffffff", "kernel": "#fef9c3",
             "call": "#f3e8ff", "constant": "#f1f5f9"}
STATUS_STYLE = {  # (border colour, fill) per diff status; "kept" keeps the kind's colours
    "added": ("#15803d", "#bbf7d0"),
    "removed": ("#b91c1c", "#fecaca"),
    "changed": ("#c2410c", "#fed7aa"),
    "fused": ("#1d4ed8", "#bfdbfe"),
    "merged": ("#7e22ce", "#e9d5ff"),
    "lowered": ("#0f766e", "#ccfbf1"),
}
DTYPE_SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "int32": "i32",
               "int64": "i64", "uint8": "u8", "bool": "bool", "float64": "f64"}


def fmt_bytes(n: int) -> str:
    """``n`` bytes for a reader: ``512 B``, ``1.5 KB``, ``3.2 MB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def node_label(data: Mapping) -> str:
    """Two or three lines: what is called, the output shape and dtype, collapsed constants."""
    lines = [data["label"] if data["kind"] != "input" else f"input {data['var']}"]
    shape, dtype = data.get("shape"), data.get("dtype")
    if shape is not None:
        lines.append("x".join(map(str, shape)) + (f" {DTYPE_SHORT.get(dtype, dtype)}" if dtype else ""))
    if data.get("const_count"):
        lines.append(f"+{data['const_count']} const ({fmt_bytes(data['const_bytes'])})")
    return "\n".join(lines)


def to_dot(g: nx.DiGraph, *, statuses: Mapping[str, str] | None = None, title: str = "",
           highlight: str | None = None) -> str:
    """DOT source for ``g``; ``statuses`` (from a :class:`GraphDiff`) colours nodes."""
    statuses = statuses or {}
    dot = graphviz.Digraph(graph_attr={"rankdir": "TB", "fontname": "Helvetica", "fontsize": "11",
                                       "label": title, "labelloc": "t", "nodesep": "0.25",
                                       "ranksep": "0.3"},
                           node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica",
                                      "fontsize": "10", "margin": "0.08,0.04", "height": "0.3"},
                           edge_attr={"arrowsize": "0.6", "color": "#64748b"})
    groups: dict[tuple[str, int], list[str]] = {}
    for n in sorted(g.nodes, key=lambda n: g.nodes[n]["order"]):
        groups.setdefault((g.nodes[n]["group"], g.nodes[n]["group_call"]), []).append(n)
    for (group, call), members in groups.items():
        target = dot
        sub = None
        if group:
            sub = graphviz.Digraph(name=f"cluster_{group}_{call}", graph_attr={
                "label": group, "style": "rounded,dashed", "color": "#2563eb", "fontcolor": "#1e40af",
                "fontsize": "9"})
            target = sub
        for n in members:
            d = g.nodes[n]
            attrs = {"fillcolor": KIND_FILL.get(d["kind"], "#ffffff"), "color": "#94a3b8",
                     "tooltip": f"{d['op']} ({d['var']})" if d["var"] else d["op"]}
            status = statuses.get(n, "kept")
            if status in STATUS_STYLE:
                attrs["color"], attrs["fillcolor"] = STATUS_STYLE[status]
                attrs["penwidth"] = "2"
            if n == highlight:
                attrs["penwidth"] = "3"
                attrs["color"] = "#dc2626"
            target.node(n, node_label(d), **attrs)
        if sub is not None:
            dot.subgraph(sub)
    for u, v in g.edges:
        dot.edge(u, v)
    return dot.source


def dot_available() -> bool:
    """True when Graphviz's ``dot`` program is installed (needed for SVG, not for DOT text)."""
    import shutil

    return shutil.which("dot") is not None


def to_svg(dot_source: str) -> str:
    """Lay out DOT with Graphviz's ``dot`` and return the SVG text (without the XML prolog).

    Laying out once on the server and caching the SVG is much faster for the browser than
    laying out in JavaScript on every switch."""
    from explorer.errors import ExplorerError

    if not dot_available():
        raise ExplorerError("Graphviz's `dot` program is not installed (apt-get install graphviz)")
    svg = graphviz.Source(dot_source).pipe(format="svg", engine="dot", encoding="utf-8")
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg
