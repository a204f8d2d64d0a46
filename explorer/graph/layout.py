"""Where to draw each node and edge: Graphviz's ``dot`` lays the graph out once on the server and
the browser draws it (:mod:`explorer.graph.viewdata`), so a 1000-node graph needs no paging and
changing colours (another diff) never lays it out again.

``dot -Tjson0`` gives node centres and sizes, edge splines and cluster boxes in points with y up;
:class:`GraphLayout` holds them with y down, as SVG wants. Without ``dot`` a plain layered layout
(longest path from the inputs, straight edges) keeps the page working.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import graphviz
import networkx as nx

from explorer.graph.dot import dot_available

FONT_SIZE = 10  # points; the browser draws labels at this size, dot sizes nodes for it
CHAR_WIDTH = 0.6 * FONT_SIZE  # an estimate for Helvetica, used by the fallback layout only


@dataclass(frozen=True)
class GraphLayout:
    """Positions in points, y down: ``nodes[id] = (cx, cy, w, h)``, ``edges`` as
    ``(tail, head, svg path)``, ``clusters`` as ``(label, x, y, w, h)``."""

    width: float
    height: float
    nodes: dict[str, tuple[float, float, float, float]]
    edges: tuple[tuple[str, str, str], ...]
    clusters: tuple[tuple[str, float, float, float, float], ...]
    engine: str  # "dot" or "layers"


def _dot_source(g: nx.DiGraph, lines: Mapping[str, Sequence[str]]) -> str:
    dot = graphviz.Digraph(graph_attr={"rankdir": "TB", "nodesep": "0.25", "ranksep": "0.35", "fontsize": "9",
                                       "fontname": "Helvetica"},
                           node_attr={"shape": "box", "fontname": "Helvetica", "fontsize": str(FONT_SIZE),
                                      "margin": "0.1,0.05", "height": "0.3"})
    groups: dict[tuple[str, int], list[str]] = {}
    for n in sorted(g.nodes, key=lambda n: g.nodes[n]["order"]):
        groups.setdefault((g.nodes[n]["group"], g.nodes[n]["group_call"]), []).append(n)
    for (group, call), members in groups.items():
        target = graphviz.Digraph(name=f"cluster_{group}_{call}", graph_attr={"label": group}) if group else dot
        for n in members:
            target.node(n, "\n".join(lines[n]))
        if group:
            dot.subgraph(target)
    for u, v in g.edges:
        dot.edge(u, v)
    return dot.source


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def _edge_path(pos: str, height: float) -> str:
    """``e,x,y p0 p1 p2 p3 ...`` (a B-spline, y up) -> an SVG path ending at the arrow tip."""
    end = None
    points = []
    for part in pos.split():
        if part.startswith("e,"):
            end = _floats(part[2:])
        elif not part.startswith("s,"):
            points.append(_floats(part))
    if not points:
        return ""

    def fmt(p: list[float]) -> str:
        return f"{p[0]:.1f},{height - p[1]:.1f}"

    d = "M" + fmt(points[0])
    for k in range(1, len(points) - 2, 3):
        d += "C" + " ".join(fmt(p) for p in points[k:k + 3])
    if end is not None:
        d += "L" + fmt(end)
    return d


def _from_dot(g: nx.DiGraph, lines: Mapping[str, Sequence[str]]) -> GraphLayout:
    raw = graphviz.Source(_dot_source(g, lines)).pipe(format="json0", engine="dot", encoding="utf-8")
    data = json.loads(raw)
    x0, _, x1, y1 = _floats(data["bb"])
    height = y1
    nodes: dict[str, tuple[float, float, float, float]] = {}
    clusters = []
    gvid_name: dict[int, str] = {}
    for obj in data.get("objects", []):
        if "nodes" in obj or obj.get("name", "").startswith("cluster_"):
            if "bb" in obj:
                bx0, by0, bx1, by1 = _floats(obj["bb"])
                clusters.append((obj.get("label", ""), round(bx0, 1), round(height - by1, 1), round(bx1 - bx0, 1),
                                 round(by1 - by0, 1)))
            continue
        gvid_name[obj["_gvid"]] = obj["name"]
        x, y = _floats(obj["pos"])
        nodes[obj["name"]] = (round(x, 1), round(height - y, 1), round(float(obj["width"]) * 72, 1),
                              round(float(obj["height"]) * 72, 1))
    edges = tuple((gvid_name[e["tail"]], gvid_name[e["head"]], _edge_path(e.get("pos", ""), height))
                  for e in data.get("edges", []) if e["tail"] in gvid_name and e["head"] in gvid_name)
    return GraphLayout(width=round(x1 - x0, 1), height=round(height, 1), nodes=nodes, edges=edges,
                       clusters=tuple(clusters), engine="dot")


def _layered(g: nx.DiGraph, lines: Mapping[str, Sequence[str]]) -> GraphLayout:
    """Longest-path layers top to bottom, nodes in binding order within a layer."""
    layer: dict[str, int] = {}
    for n in nx.topological_sort(g):
        layer[n] = max((layer[p] + 1 for p in g.predecessors(n)), default=0)
    rows: dict[int, list[str]] = {}
    for n in sorted(g.nodes, key=lambda n: g.nodes[n]["order"]):
        rows.setdefault(layer[n], []).append(n)
    size = {n: (max(len(t) for t in lines[n]) * CHAR_WIDTH + 16, len(lines[n]) * FONT_SIZE * 1.25 + 8) for n in g.nodes}
    widths = {r: sum(size[n][0] for n in ns) + 20 * (len(ns) - 1) for r, ns in rows.items()}
    total_w = max(widths.values(), default=0) + 20
    nodes: dict[str, tuple[float, float, float, float]] = {}
    y = 10.0
    for r in sorted(rows):
        x = (total_w - widths[r]) / 2
        row_h = max(size[n][1] for n in rows[r])
        for n in rows[r]:
            w, h = size[n]
            nodes[n] = (round(x + w / 2, 1), round(y + row_h / 2, 1), round(w, 1), round(h, 1))
            x += w + 20
        y += row_h + 30
    edges = []
    for u, v in g.edges:
        ux, uy, _, uh = nodes[u]
        vx, vy, _, vh = nodes[v]
        edges.append((u, v, f"M{ux:.1f},{uy + uh / 2:.1f}L{vx:.1f},{vy - vh / 2:.1f}"))
    clusters = []
    members: dict[tuple[str, int], list[str]] = {}
    for n, d in g.nodes(data=True):
        if d["group"]:
            members.setdefault((d["group"], d["group_call"]), []).append(n)
    for (group, _), ns in members.items():
        xs0 = min(nodes[n][0] - nodes[n][2] / 2 for n in ns) - 6
        xs1 = max(nodes[n][0] + nodes[n][2] / 2 for n in ns) + 6
        ys0 = min(nodes[n][1] - nodes[n][3] / 2 for n in ns) - 14
        ys1 = max(nodes[n][1] + nodes[n][3] / 2 for n in ns) + 6
        clusters.append((group, round(xs0, 1), round(ys0, 1), round(xs1 - xs0, 1), round(ys1 - ys0, 1)))
    return GraphLayout(width=round(total_w, 1), height=round(y, 1), nodes=nodes, edges=tuple(edges),
                       clusters=tuple(clusters), engine="layers")


def layout(g: nx.DiGraph, lines: Mapping[str, Sequence[str]]) -> GraphLayout:
    """Lay out ``g`` whose node ``n`` shows the text ``lines[n]`` (one entry per line)."""
    if g.number_of_nodes() == 0:
        return GraphLayout(0, 0, {}, (), (), "none")
    if dot_available():
        try:
            return _from_dot(g, lines)
        except (graphviz.backend.ExecutableNotFound, graphviz.backend.CalledProcessError, ValueError, KeyError):
            pass  # a graph dot refuses (or output it does not give) is still drawn, in layers
    return _layered(g, lines)


__all__ = ["FONT_SIZE", "GraphLayout", "layout"]
