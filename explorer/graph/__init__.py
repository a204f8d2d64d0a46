"""Relax graphs as networkx, their diff, where their nodes came from (the model's ONNX nodes,
through every pass: ``explorer.graph.onnx_names``, ``explorer.graph.lineage``), their layout and
what the browser draws (``explorer.graph.run_views``)."""

from explorer.graph.diff import GraphDiff, diff_graphs
from explorer.graph.dot import to_dot
from explorer.graph.extract import op_family, relax_graph

__all__ = ["GraphDiff", "diff_graphs", "op_family", "relax_graph", "to_dot"]
