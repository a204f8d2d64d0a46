"""The Graph & passes page on its own under Streamlit's AppTest: it reacts to its inputs, names
graph nodes after the model, labels passes of the model shown, and keeps each view cheap."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

PAGES = Path(__file__).resolve().parent.parent / "app" / "ui"


def _graph(at: AppTest) -> dict | None:
    """What the graph component shows (both payloads parsed), or None when it is not drawn. A
    payload is sent once per session: later runs send its key, resolved here as a browser does."""
    found = at.get("bidi_component")
    if not found:
        return None
    data = json.loads(found[0].proto.json)
    cache = _PAYLOADS.setdefault(id(at), {})
    for side in ("before", "after"):
        sent = data[side]
        assert sent["key"] in at.session_state["graphs_sent"]  # the page's record of what the browser holds
        if "json" in sent:
            cache[sent["key"]] = json.loads(sent["json"])
    if any(data[side]["key"] not in cache for side in ("before", "after")):
        at.session_state["graphs_sent"] = set()  # what the browser's "need" does: send them again
        return _graph(at.run())
    for side in ("before", "after"):
        data[side] = cache[data[side]["key"]]
    return data


_PAYLOADS: dict[int, dict[str, dict]] = {}


def _picker(at: AppTest, label: str):
    return next(s for s in at.selectbox if s.label == label)


def _page(name: str) -> AppTest:
    return AppTest.from_file(str(PAGES / name), default_timeout=180)


def _view(at: AppTest, name: str) -> None:
    at.session_state["view_tab"] = name
    at.run()


def test_passes_page_defaults_to_resnet18_fuseops_with_model_names():
    at = _page("passes.py").run()
    assert not at.exception and not at.error
    assert "resnet18" in at.caption[0].value
    snap = _picker(at, "After pass")
    assert "FuseOps" in snap.format_func(snap.value)
    data = _graph(at)
    assert data is not None and "FuseOps" in data["titles"][1]
    after = data["after"]
    assert len(after["nodes"]) >= 60 and after["clusters"]  # fused groups drawn as clusters
    titles = {n["t"][0] for n in after["nodes"]}
    assert {"layer1.0.conv1", "layer4.1.relu2"} <= titles  # the model's own names, not conv2d1 ...
    assert not any(t.startswith("conv2d") for t in titles)
    assert len(data["sa"]) == len(after["nodes"]) and "fused" in data["summary"]


def test_no_paging_widget_whatever_the_size():
    at = _page("passes.py").run()
    labels = [w.label for w in at.number_input] + [w.label for w in at.text_input]
    assert not any("First node" in label or "Focus" in label for label in labels)


def test_switching_snapshots_and_diff_styles():
    at = _page("passes.py").run()
    snap = _picker(at, "After pass")
    legal = next(o for o in snap.options if "LegalizeOps" in o)
    snap.select(legal).run()
    assert not at.exception
    assert "lowered to kernels" in _graph(at)["summary"]
    _view(at, "TVMScript")
    assert _graph(at) is None  # one view at a time: the graph is not sent with the script
    at.radio(key="diff_style").set_value("Side by side").run()
    assert not at.exception
    at.radio(key="diff_style").set_value("Full text after").run()
    assert at.code and "T.prim_func" in at.code[0].value
    at.radio(key="diff_style").set_value("Side by side").run()
    _view(at, "Graph")  # another view and back: the diff style stays as chosen (it reset to Unified)
    _view(at, "TVMScript")
    assert at.radio(key="diff_style").value == "Side by side"


def test_switching_model_relabels_the_pass_pickers():
    """Issue 12, item 8: the pickers showed the previous model's timings after a model switch."""
    at = _page("passes.py").run()
    before_keys = {s.label: s.key for s in at.selectbox}
    at.sidebar.selectbox(key="model_name").set_value("small_cnn").run()
    assert not at.exception and "small_cnn" in at.caption[0].value
    after_keys = {s.label: s.key for s in at.selectbox}
    assert after_keys["After pass"] != before_keys["After pass"]
    assert after_keys["Compare with"] != before_keys["Compare with"]
    snap = _picker(at, "After pass")
    data = _graph(at)
    assert snap.format_func(snap.value).split("(")[0].split()[-1] in data["titles"][1]
    assert snap.format_func(snap.value).strip() in data["titles"][1]  # same pass, same timing


def test_diff_summary_names_each_kind_of_change_once():
    """Issue 12, item 8: the summary read "18 merged, 47 merged"."""
    at = _page("passes.py").run()
    snap = _picker(at, "After pass")
    snap.select(next(o for o in snap.options if "FuseTIR" in o)).run()
    summary = _graph(at)["summary"]
    assert "nodes merged into" in summary and summary.count("merged") == 1
    assert any(summary in c.value for c in at.caption)


def test_custom_pipeline_on_small_cnn():
    at = _page("passes.py").run()
    at.sidebar.selectbox(key="model_name").set_value("small_cnn").run()
    at.sidebar.selectbox(key="pipeline").set_value("custom").run()
    assert not at.exception and not at.error
    assert "Custom" in at.caption[0].value


def test_bad_file_keeps_the_previous_model(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx model at all")
    at = _page("passes.py").run()
    at.sidebar.radio(key="model_source").set_value("ONNX file").run()
    at.sidebar.text_input(key="onnx_path").input(str(bad)).run()
    assert at.error and "not a readable ONNX model" in at.error[0].value
    assert any("Still showing resnet18" in c.value for c in at.caption)
    assert _graph(at) is not None


def test_symbolic_file_asks_for_shapes_then_loads(tmp_path):
    import onnx

    from tests.conftest import tiny_cnn

    path = tmp_path / "sym.onnx"
    onnx.save(tiny_cnn(batch="N"), path)
    at = _page("passes.py").run()
    at.sidebar.radio(key="model_source").set_value("ONNX file").run()
    at.sidebar.text_input(key="onnx_path").input(str(path)).run()
    assert at.error and "symbolic" in at.error[0].value
    at.sidebar.text_input(key="shapes").input("N=1").run()
    assert not at.error
    assert "**sym.onnx**" in at.caption[0].value and str(path.parent) not in at.caption[0].value
    titles = {n["t"][0] for n in _graph(at)["before"]["nodes"]}
    assert {"conv1", "fc"} <= titles


def test_counts_tab_draws_time_per_pass_without_a_chart_library():
    at = _page("passes.py").run()
    _view(at, "Counts & time")
    assert not at.exception
    assert not at.get("plotly_chart")  # plotly.js took seconds to load on first open
    assert len(at.dataframe) == 1  # the pass list only: the counts are plain HTML tables
    html = [h.proto.body for h in at.get("html")]
    tables = [h for h in html if "sx-table" in h]
    assert len(tables) == 2 and "PrimFuncs (TIR kernels)" in tables[0] and "conv2d" in tables[1]
    bars = [h for h in html if "sx-bars" in h]
    assert bars and "FuseOps" in bars[0]


def test_each_graph_is_sent_once_per_session():
    """Switching back to a pass sends keys, not graphs (the browser keeps what it received)."""
    at = _page("passes.py").run()
    first = json.loads(at.get("bidi_component")[0].proto.json)
    assert "json" in first["before"] and "json" in first["after"]
    snap = _picker(at, "After pass")
    fuse = snap.format_func(snap.value)
    snap.select(next(o for o in snap.options if "FuseLayoutIntoConv" in o)).run()
    data = json.loads(at.get("bidi_component")[0].proto.json)
    assert "json" not in data["before"] and "json" in data["after"]  # the pass after FuseOps got what FuseOps made
    _picker(at, "After pass").select(fuse).run()
    data = json.loads(at.get("bidi_component")[0].proto.json)
    assert "json" not in data["before"] and "json" not in data["after"]
