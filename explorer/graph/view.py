"""Ways to keep a large graph readable: a neighbourhood around one node, or a window of the
topological order."""

from __future__ import annotations

import networkx as nx


def focus(g: nx.DiGraph, center: str, radius: int = 3) -> nx.DiGraph:
    """The nodes within ``radius`` edges of ``center`` (either direction), as a subgraph copy."""
    if center not in g:
        raise KeyError(f"no node {center!r} in the graph")
    near = nx.single_source_shortest_path_length(g.to_undirected(as_view=True), center, cutoff=radius)
    return g.subgraph(near).copy()


def window(g: nx.DiGraph, start: int, count: int) -> nx.DiGraph:
    """Nodes ``start .. start+count-1`` in topological (binding) order, as a subgraph copy."""
    ordered = sorted(g.nodes, key=lambda n: g.nodes[n]["order"])
    return g.subgraph(ordered[max(0, start): max(0, start) + max(1, count)]).copy()


def find_nodes(g: nx.DiGraph, text: str) -> list[str]:
    """Nodes whose op, variable or group contains ``text`` (case-insensitive), in order."""
    t = text.lower()
    hits = [n for n, d in g.nodes(data=True)
            if t in d["op"].lower() or t in d["var"].lower() or t in d["group"].lower()]
    return sorted(hits, key=lambda n: g.nodes[n]["order"])
