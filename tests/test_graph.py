"""Relax -> networkx extraction, graph diff and DOT on a model whose graph we know by heart."""

from __future__ import annotations

import networkx as nx
import pytest

from explorer.graph import diff_graphs, op_family, relax_graph, to_dot
from explorer.passes import run_pipeline


@pytest.fixture(scope="module")
def tuning_run(tiny_module):
    return run_pipeline(tiny_module, "tuning")


def test_input_graph_of_the_tiny_cnn(tiny_module):
    g = relax_graph(tiny_module)
    # input, conv2d, batch_norm, relu, mean, reshape, permute_dims, matmul, add, output
    assert (g.number_of_nodes(), g.number_of_edges()) == (10, 9)
    ops = [d["op"] for _, d in sorted(g.nodes(data=True), key=lambda x: x[1]["order"])]
    assert ops[0] == "input" and ops[-1] == "output" and "relax.nn.conv2d" in ops
    assert nx.is_directed_acyclic_graph(g)
    conv = next(n for n, d in g.nodes(data=True) if d["op"] == "relax.nn.conv2d")
    assert g.nodes[conv]["shape"] == (1, 8, 16, 16) and g.nodes[conv]["dtype"] == "float32"
    assert g.nodes[conv]["const_count"] == 1 and g.nodes[conv]["const_bytes"] == 8 * 3 * 3 * 3 * 4


def test_constants_can_be_shown(tiny_module):
    g = relax_graph(tiny_module, show_constants=True)
    assert sum(1 for _, d in g.nodes(data=True) if d["kind"] == "constant") == 7


def test_fuseops_groups_and_fusetir_kernels(tuning_run):
    after_fuse = tuning_run.graph(tuning_run.find("FuseOps").index)
    groups = {d["group"] for _, d in after_fuse.nodes(data=True) if d["group"]}
    assert groups and all(g.startswith("fused_") for g in groups)
    after_tir = tuning_run.graph(tuning_run.find("FuseTIR").index)
    assert {d["op"] for _, d in after_tir.nodes(data=True)} >= groups
    assert after_tir.number_of_nodes() < after_fuse.number_of_nodes()
    assert not any(d["group"] for _, d in after_tir.nodes(data=True))


def test_diff_across_legalize_fuse_and_fusetir(tuning_run):
    r = tuning_run
    legal = r.find("LegalizeOps").index
    d = diff_graphs(r.graph(-1), r.graph(legal))
    assert d.counts().get("after.lowered", 0) >= 6
    fuse = r.find("FuseOps").index
    d = diff_graphs(r.graph(r.input_index(fuse)), r.graph(fuse))
    fused = [n for n, s in d.after.items() if s == "fused"]
    assert fused and all(r.graph(fuse).nodes[n]["group"] for n in fused)
    assert "before.removed" not in d.counts()
    tir = r.find("FuseTIR").index
    d = diff_graphs(r.graph(fuse), r.graph(tir))
    assert d.counts()["before.merged"] == len(fused)
    merged_after = {r.graph(tir).nodes[n]["op"] for n, s in d.after.items() if s == "merged"}
    assert all(op.startswith("fused_") for op in merged_after)


def test_diff_of_identical_graphs_is_all_kept(tiny_module):
    g = relax_graph(tiny_module)
    d = diff_graphs(g, g)
    assert not d.changed and set(d.before.values()) == {"kept"}


def test_dot_has_clusters_and_status_colours(tuning_run):
    r = tuning_run
    fuse = r.find("FuseOps").index
    g = r.graph(fuse)
    d = diff_graphs(r.graph(r.input_index(fuse)), g)
    dot = to_dot(g, statuses=d.after, title="after FuseOps")
    assert "subgraph cluster_fused_" in dot and "#bfdbfe" in dot  # fused fill colour
    assert dot.count("->") == g.number_of_edges()


def test_op_family():
    assert op_family("relax.nn.conv2d") == "conv2d"
    assert op_family("conv2d12") == "conv2d"
    assert op_family("fused_conv2d_add_relu3") == "fused_conv2d_add_relu"


def test_diff_summary_names_each_change_once(tuning_run):
    r = tuning_run
    fuse, tir = r.find("FuseOps").index, r.find("FuseTIR").index
    d = diff_graphs(r.graph(fuse), r.graph(tir))
    summary = d.summary()
    assert summary.count("merged") == 1
    assert f"{d.counts()['before.merged']} nodes merged into {d.counts()['after.merged']} kernels" in summary
    assert diff_graphs(r.graph(-1), r.graph(-1)).summary() == "no node changed"
    legal = diff_graphs(r.graph(-1), r.graph(r.find("LegalizeOps").index)).summary()
    assert "lowered to kernels" in legal and "removed" not in legal and "added" not in legal


def test_diff_follows_dataflow_when_a_pass_drops_a_node():
    """Matching "the k-th add" alone pairs every later add wrongly once one is dropped; matching
    along the dataflow keeps the later ones paired with themselves."""
    def chain(ops, drop=None):
        g = nx.DiGraph()
        prev = None
        for k, op in enumerate(ops):
            if k == drop:
                continue
            n = f"n{k}"
            g.add_node(n, kind="op", op=op, family=op_family(op), label=op, shape=(k,), dtype="float32", var=f"v{k}",
                       group="", group_call=0, order=k, const_count=0, const_bytes=0)
            if prev is not None:
                g.add_edge(prev, n)
            prev = n
        return g

    ops = ["relax.add", "relax.multiply", "relax.add", "relax.add", "relax.add"]
    before, after = chain(ops), chain(ops, drop=2)
    d = diff_graphs(before, after)
    assert d.before["n2"] == "removed"
    assert dict(d.pairs)["n3"] == "n3" and dict(d.pairs)["n4"] == "n4"
    assert set(d.after.values()) == {"kept"}
