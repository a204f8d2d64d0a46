"""Relax graphs as networkx, their diff, DOT rendering and views for large graphs."""

from explorer.graph.diff import GraphDiff, diff_graphs
from explorer.graph.dot import to_dot
from explorer.graph.extract import op_family, relax_graph
from explorer.graph.view import find_nodes, focus, window

__all__ = ["GraphDiff", "diff_graphs", "find_nodes", "focus", "op_family", "relax_graph", "to_dot", "window"]
