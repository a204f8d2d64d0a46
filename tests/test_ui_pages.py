"""Every page runs on its own under Streamlit's AppTest; the main page reacts to its inputs."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

PAGES = Path(__file__).resolve().parent.parent / "app" / "ui"


def _graphs(at: AppTest) -> int:
    """Graphs drawn: inline SVG laid out by `dot`, or graphviz charts when `dot` is missing."""
    return sum(1 for m in at.markdown if "schedx-graph" in m.value and "<svg" in m.value) \
        + len(at.get("graphviz_chart"))


def _page(name: str) -> AppTest:
    return AppTest.from_file(str(PAGES / name), default_timeout=180)


def test_passes_page_defaults_to_resnet18_fuseops():
    at = _page("passes.py").run()
    assert not at.exception and not at.error
    assert "resnet18" in at.caption[0].value and "Tuning" in at.caption[0].value
    snap = at.selectbox(key="snapshot")
    assert "FuseOps" in snap.options[snap.index]
    assert _graphs(at) == 2
    assert any("fused" in c.value for c in at.caption)


def test_switching_snapshots_and_diff_styles():
    at = _page("passes.py").run()
    snap = at.selectbox(key="snapshot")
    legal = next(o for o in snap.options if "LegalizeOps" in o)
    snap.select(legal).run()
    assert not at.exception
    assert any("lowered" in c.value for c in at.caption)
    at.session_state["view_tab"] = "TVMScript"  # tabs are lazy: open the TVMScript one
    at.run()
    at.radio(key="diff_style").set_value("Side by side").run()
    assert not at.exception
    at.radio(key="diff_style").set_value("Full text after").run()
    assert at.code and "T.prim_func" in at.code[0].value


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
    assert _graphs(at) == 2


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
    assert str(path) in at.caption[0].value


def test_counts_tab_draws_time_per_pass():
    at = _page("passes.py").run()
    at.session_state["view_tab"] = "Counts & time"
    at.run()
    assert not at.exception
    assert at.get("plotly_chart") and len(at.dataframe) >= 3  # pass list, counts, calls
