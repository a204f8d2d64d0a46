"""Graphs named after the model: ONNX node names through import and passes, what each node
becomes, the layout the browser draws, and the payload it receives."""

from __future__ import annotations

import json

import pytest

from explorer.graph.layout import _layered, layout
from explorer.graph.lineage import Lineage
from explorer.graph.onnx_names import OnnxSources, onnx_sources, traced_from_onnx
from explorer.graph.run_views import RunGraphs
from explorer.graph.viewdata import STATUS_CODES, shorten
from explorer.passes import run_pipeline


@pytest.fixture(scope="module")
def tiny_loaded():
    from explorer.models import import_onnx
    from tests.conftest import tiny_cnn

    return import_onnx(tiny_cnn())


@pytest.fixture(scope="module")
def tiny_graphs(tiny_loaded):
    return RunGraphs(run_pipeline(tiny_loaded.mod, "tuning"), onnx_sources(tiny_loaded))


def _nodes(payload: str) -> list[dict]:
    return json.loads(payload)["nodes"]


def test_every_binding_of_the_import_has_its_onnx_node(tiny_loaded):
    sources = onnx_sources(tiny_loaded)
    names = {(n.name, n.op_type) for n in sources.by_var.values()}
    assert names == {("conv1", "Conv"), ("bn1", "BatchNormalization"), ("relu1", "Relu"),
                     ("pool", "GlobalAveragePool"), ("flatten", "Flatten"), ("fc", "Gemm")}
    conv = next(n for n in sources.by_var.values() if n.name == "conv1")
    assert conv.attrs["pads"] == "[1, 1, 1, 1]"


def test_traced_import_is_the_plain_import_and_names_it_at_once(tiny_loaded):
    import tvm_ffi
    from tvm.relax.frontend.onnx import from_onnx

    from tests.conftest import tiny_cnn

    model = tiny_cnn()
    shapes, dtypes = {"input": [1, 3, 16, 16]}, {"input": "float32"}
    traced = traced_from_onnx(model, shape_dict=shapes, dtype_dict=dtypes)
    assert tvm_ffi.structural_equal(traced, from_onnx(tiny_cnn(), shape_dict=shapes, dtype_dict=dtypes))

    class Loaded:  # what the import step keeps: the module it returned
        mod, onnx_model, info = traced, None, tiny_loaded.info

    assert len(onnx_sources(Loaded())) == len(onnx_sources(tiny_loaded)) > 0


def test_models_without_onnx_have_no_names(tiny_loaded):
    from explorer.kernels import builtin_kernel
    from explorer.workload import kernel_module

    class Loaded:  # a module built in Relax, never imported from ONNX
        mod, onnx_model, info = kernel_module(builtin_kernel("matmul", M=8, N=8, K=8)), None, tiny_loaded.info

    assert len(onnx_sources(Loaded())) == 0


def test_resnet18_kernels_after_fusion_know_their_model_nodes(resnet18):
    run = run_pipeline(resnet18.mod, "tuning")
    graphs = RunGraphs(run, onnx_sources(resnet18))
    final = graphs.lineage.final
    nodes = _nodes(graphs.payload(final))
    block = next(n for n in nodes if n["d"]["op"].startswith("fused_") and any(
        x[0] == "layer1.0.relu2" for x in n["d"].get("onnx", [])))
    assert {x[0] for x in block["d"]["onnx"]} == {"layer1.0.bn2", "layer1.0.add", "layer1.0.relu2"}
    assert block["t"][0] == "layer1.0.bn2 +2"
    # the input graph's conv knows the kernel it becomes, and is titled by its ONNX name
    first = _nodes(graphs.payload(-1))
    conv = next(n for n in first if n["t"][0] == "layer3.0.conv1")
    assert conv["d"]["op"] == "relax.nn.conv2d" and conv["d"]["attrs"]["strides"] == "(2, 2)"
    assert conv["d"]["becomes"] and conv["d"]["becomes"][0].startswith("conv2d")
    assert graphs.kernel(final, conv["d"]["becomes"][0]) is not None


def test_lineage_reuses_unchanged_snapshots(tiny_graphs):
    lin: Lineage = tiny_graphs.lineage
    run = tiny_graphs.run
    unchanged = [s.index for s in run.snapshots if not s.changed and not s.composite]
    assert unchanged
    for i in unchanged:
        assert lin.representative(i) == lin.representative(run.input_index(i))
    assert lin.origins(lin.final)  # every snapshot resolves to one computed graph


def test_payload_lays_out_every_node_and_edge(tiny_graphs):
    run = tiny_graphs.run
    fuse = run.find("FuseOps").index
    view = json.loads(tiny_graphs.payload(fuse))
    g = tiny_graphs.lineage.graph(fuse)
    assert len(view["nodes"]) == g.number_of_nodes() and len(view["edges"]) == g.number_of_edges()
    assert view["clusters"] and all(c[0].startswith("fused_") for c in view["clusters"])
    for n in view["nodes"]:
        assert 0 <= n["x"] <= view["w"] + 1 and 0 <= n["y"] <= view["h"] + 1 and n["w"] > 0
    assert all(path.startswith("M") for _, _, path in view["edges"])
    _, sa, summary = tiny_graphs.statuses(run.input_index(fuse), fuse)
    assert len(sa) == g.number_of_nodes() and STATUS_CODES["fused"] in sa and "fused" in summary


def test_payload_is_computed_once_per_distinct_module(tiny_graphs):
    run = tiny_graphs.run
    dce = [s.index for s in run.main_passes() if not s.changed][-1]
    assert tiny_graphs.payload(dce) is tiny_graphs.payload(run.input_index(dce))


def test_layout_without_dot_is_layered(tiny_graphs):
    g = tiny_graphs.lineage.graph(tiny_graphs.run.find("FuseOps").index)
    lines = {n: ["x" * 10, "y"] for n in g.nodes}
    fallback = _layered(g, lines)
    assert set(fallback.nodes) == set(g.nodes) and fallback.engine == "layers"
    for u, v in g.edges:  # a consumer sits below its producer
        assert fallback.nodes[v][1] > fallback.nodes[u][1]
    assert layout(g, lines).nodes.keys() == fallback.nodes.keys()


def test_a_graph_of_1000_nodes_is_laid_out_whole(tmp_path):
    from explorer.models import load_model
    from tests.big_onnx import save_residual_chain

    loaded = load_model(save_residual_chain(tmp_path / "chain.onnx", 250))
    run = run_pipeline(loaded.mod, passes=["LegalizeOps"], isolate=False)
    graphs = RunGraphs(run, onnx_sources(loaded))
    nodes = _nodes(graphs.payload(-1))
    assert len(nodes) >= 1000
    assert {n["t"][0] for n in nodes} >= {"block0.conv", "block249.add"}


def test_shorten_keeps_both_ends():
    assert shorten("encoder.layer.0.attention.self.query.matmul", 20) == "encoder.la…ry.matmul"
    assert shorten("short", 20) == "short"
    assert OnnxSources({}).of("lv") is None


def test_fused_kernels_of_a_transformer_keep_every_model_node():
    """BERT-like encoder through the CPU backend pipeline: each fused kernel stands for the matmul
    and the bias add it fused (matching "the k-th matmul" alone once gave the query's matmul to
    the attention context's kernel)."""
    from explorer.models import load_model

    loaded = load_model("bert_encoder")
    graphs = RunGraphs(run_pipeline(loaded.mod, "cpu-backend"), onnx_sources(loaded))
    nodes = _nodes(graphs.payload(graphs.lineage.final))
    by_names = {frozenset(x[0] for x in n["d"].get("onnx", [])): n["d"]["op"] for n in nodes}
    query = "encoder.layer.0.attention.self.query"
    assert by_names[frozenset({query, query + ".matmul"})].startswith("fused_matmul")
    assert by_names[frozenset({"encoder.layer.0.attention.self.context"})].startswith("matmul")


def test_names_survive_batch_norm_folding(tiny_loaded):
    """FoldBatchnormToConv2D turns the batch_norm into an add fed by a weight computation: the
    add stands for the batch_norm, and the fused kernel at the end for conv1, bn1 and relu1."""
    run = run_pipeline(tiny_loaded.mod, passes=["FoldBatchnormToConv2D", "FoldConstant", "LegalizeOps",
                                                "AnnotateTIROpPattern", "FuseOps", "FuseTIR"], isolate=False)
    assert run.error is None
    graphs = RunGraphs(run, onnx_sources(tiny_loaded))
    folded = run.find("FoldBatchnormToConv2D").index
    add = next(n for n in _nodes(graphs.payload(folded)) if n["t"][0] == "bn1")
    assert add["d"]["op"] == "relax.add"
    assert "changed" in graphs.statuses(-1, folded)[2]
    final = _nodes(graphs.payload(graphs.lineage.final))
    conv = next(n for n in final if n["d"]["op"].startswith("fused_conv2d"))
    assert [x[0] for x in conv["d"]["onnx"]] == ["conv1", "bn1", "relu1"]


def _matches(node: dict, query: str) -> bool:
    """The browser's match (assets/graph_view.js, runSearch)."""
    q, g = query.lower(), node["g"]
    return q in node["s"] or bool(g) and (g.startswith(q) or g.removeprefix("fused_").startswith(q))


def test_a_search_for_an_operator_counts_each_model_node_once_before_and_after_every_pass(resnet18):
    """Issue 29: "Conv" counted 109 before and 211 after a pass, as every node a Conv became (its
    bias add, the layout's transposes) and every node of a group FuseOps named after a conv
    matched. One node stands for each ONNX node and each fused call now: ResNet-18's 20
    convolutions are 20 matches in every snapshot, its 17 ReLUs 17, a model node's own name
    finds one node, and every fused group its name."""
    run = run_pipeline(resnet18.mod, "inference")  # NHWC: the layout conversion adds transposes
    graphs = RunGraphs(run, onnx_sources(resnet18))
    counts: dict[str, dict] = {}
    for index in [-1, *range(len(run.snapshots))]:
        nodes = _nodes(graphs.payload(index))
        name = f"{index} {run.snapshots[index].name}" if index >= 0 else "input"
        counts[name] = {q: sum(_matches(n, q) for n in nodes) for q in ("Conv", "relu")}
        assert sum(_matches(n, "layer2.0.conv1") for n in nodes) == 1, name
        groups = {n["d"]["group"].lower() for n in nodes if n["d"].get("group")}
        assert {n["g"] for n in nodes if n["g"]} == groups, name  # each fused group found by its name
    assert {tuple(c.values()) for c in counts.values()} == {(20, 17)}, counts
