"""Page "Graph & passes": a model through a pipeline, pass by pass, like Compiler Explorer."""

from __future__ import annotations

import functools
import hashlib

import pandas as pd
import streamlit as st

from app import state
from app.cache import (
    RunKey,
    graph_kernel,
    pipeline_run,
    run_graphs,
    save_upload,
    script_diff,
    script_text,
)
from app.components import legend_html, side_by_side_html, table_html, time_bars_html
from app.graph_view import graph_view
from app.layout import ROW_MARKER_PX, columns_px, side_column_css, sized_columns
from app.uploads import display_name
from explorer.errors import ExplorerError
from explorer.models import DEFAULT_MODEL, ZOO, example_names
from explorer.passes import PASS_CATALOG, PIPELINES

VIEWS = ["Graph", "TVMScript", "Counts & time"]
_SHARE = 0.34  # of the page's width, for the pass list beside the views (ResNet-18's needs about 400 px)


def choose_model() -> RunKey | None:
    """Sidebar: model source, model, shapes, pipeline. Returns what to run (None: nothing yet)."""
    sb = st.sidebar
    sb.header("Model")
    source = sb.radio("Source", ["Zoo", "ONNX example", "ONNX file"], key=state.MODEL_SOURCE, horizontal=True)
    if source == "Zoo":
        names = list(ZOO)
        model = sb.selectbox("Model", names, index=names.index(DEFAULT_MODEL), key=state.MODEL_NAME,
                             format_func=lambda n: f"{ZOO[n].title} ({n})")
        sb.caption(ZOO[model].description)
    elif source == "ONNX example":
        examples = example_names()
        picked = sb.selectbox("Example (ships with the onnx package)", examples, key=state.EXAMPLE_NAME)
        model = f"example:{picked}" if picked else ""
    else:
        upload = sb.file_uploader("Upload an .onnx file", type=["onnx"], key=state.ONNX_UPLOAD)
        path = sb.text_input("...or a path on this machine", key=state.ONNX_PATH, placeholder="/path/to/model.onnx")
        try:
            model = save_upload(upload.getvalue(), upload.name) if upload is not None else path.strip()
        except ExplorerError as err:  # too large, or no private folder to keep it in
            sb.error(str(err))
            return None
    shapes = sb.text_input("Input shapes (for symbolic dims)", key=state.SHAPES,
                           placeholder="input:1x3x224x224 or batch=1",
                           help="Fix symbolic or unknown input dimensions: NAME:1x3x224x224 for an input, "
                                "DIM=1 for a named dimension; separate several with commas.")
    sb.header("Pipeline")
    options = list(PIPELINES) + ["custom"]
    # the title's first words (its details in brackets were cut at the sidebar's width; the caption says them)
    pipeline = sb.selectbox("Pipeline", options, key=state.PIPELINE,
                            format_func=lambda n: PIPELINES[n].title.split(" (")[0] if n in PIPELINES
                            else "Custom list of passes")
    passes: tuple[str, ...] = ()
    if pipeline == "custom":
        chosen = sb.multiselect("Passes, in order", list(PASS_CATALOG), key=state.CUSTOM_PASSES,
                                default=["FoldBatchnormToConv2D", "LegalizeOps", "AnnotateTIROpPattern",
                                         "FoldConstant", "FuseOps", "FuseTIR"])
        passes = tuple(chosen)
        if not passes:
            sb.info("Pick at least one pass.")
            return None
    else:
        sb.caption(f"**{PIPELINES[pipeline].title}**: {PIPELINES[pipeline].description}")
    if not model:
        return None
    return RunKey(model=model, shapes=shapes.strip(), pipeline=pipeline, passes=passes)


def load_run(key: RunKey | None):
    """Run ``key``; on a bad model or pipeline, say why and keep showing the last good run."""
    if key is not None:
        try:
            run = pipeline_run(key)
            state.write(state.LOADED, key)
            return key, run
        except ExplorerError as err:
            st.error(f"**{display_name(key.model)}**: {err}")
    previous = state.read(state.LOADED)
    if previous is None:
        st.info("Choose a model in the sidebar.")
        st.stop()
    if key is not None:
        st.caption(f"Still showing {display_name(previous.model)} through {previous.pipeline}.")
    return previous, pipeline_run(previous)


def _label(run, index: int) -> str:
    """``#12 FuseOps · 1.2 ms · changed``: whether the pass changed the module said in a word."""
    if index < 0:
        return "input module"
    s = run.snapshots[index]
    return f"#{index} {'  ' * (s.depth - 1)}{s.name} · {s.seconds * 1000:.1f} ms · " \
        + ("changed" if s.changed else "no change")


def run_keys(key: RunKey) -> dict[str, str]:
    """Widget keys of the pass pickers for one run. They change with the run: a picker kept
    across models would keep showing the labels (timings) of the model before."""
    token = hashlib.sha1(repr(key).encode()).hexdigest()[:10]
    return {"snapshot": f"{state.SNAPSHOT}_{token}", "table": f"{state.PASS_TABLE}_{token}",
            "compare": f"{state.COMPARE_WITH}_{token}"}


def _pick_row(keys: dict[str, str], shown_indices: list[int]) -> None:
    """Pass-list row clicked: make it the snapshot shown (runs before the page reruns)."""
    rows = state.read(keys["table"]).selection.rows
    if rows:
        state.write(keys["snapshot"], shown_indices[rows[0]])


def pass_rows(shown) -> list[dict]:
    """The pass list's rows: each pass's name (indented by its depth), time, and whether it
    changed the module, in a word."""
    return [{"pass": "\u2003" * (s.depth - 1) + s.name, "ms": round(s.seconds * 1000, 2),
             "changed": "yes" if s.changed else "no"} for s in shown]


def pass_columns(rows: list[dict]) -> dict:
    """The pass list's columns, each as wide as its content (app/layout.py)."""
    top = max((r["ms"] for r in rows), default=0)
    return sized_columns(rows, {
        "pass": st.column_config.TextColumn("pass"),
        "ms": st.column_config.NumberColumn("ms", format="%.1f",
                                            help=f"time of the pass; the slowest took {top:.1f} ms"),
        "changed": st.column_config.TextColumn("changed",
                                               help="yes: the pass changed the module; no: it left it as it was")})


def pass_table(shown, rows: list[dict], columns: dict, keys: dict[str, str]) -> None:
    """The pass list, Compiler Explorer style: click a row to see the module after that pass.
    Name, time and whether it changed the module, each column as wide as its content; where the
    page is too narrow for it beside the views, it folds away and the "After pass" picker above
    stays (:func:`app.layout.side_column_css`)."""
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", height=min(640, 38 + 35 * len(rows)),
                 key=keys["table"], on_select=functools.partial(_pick_row, keys, [s.index for s in shown]),
                 selection_mode="single-row", column_config=columns)


def snapshot_pickers(run, keys: dict[str, str]) -> tuple[int, int, list]:
    c1, c2, c3 = st.columns([2, 1, 1])
    show_nested = c2.toggle("Nested passes", key=state.SHOW_NESTED,
                            help="Also list wrappers (Sequential) and passes run inside other passes.")
    hide_noop = c3.toggle("Hide no-op passes", key=state.HIDE_NOOP, value=False)
    shown = list(run.snapshots) if show_nested else run.main_passes()
    if hide_noop:
        shown = [s for s in shown if s.changed]
    if not shown:
        st.warning("No pass of this pipeline changed the module.")
        st.stop()
    indices = [s.index for s in shown]
    if state.read(keys["snapshot"]) not in indices:
        fuse = run.find("FuseOps")
        state.write(keys["snapshot"], fuse.index if fuse is not None and fuse.index in indices else indices[0])
    after = c1.selectbox("After pass", indices, key=keys["snapshot"], format_func=lambda i: _label(run, i))
    received = run.input_index(after)
    compare_opts = [received] + [i for i in [-1] + [s.index for s in run.snapshots] if i != received]
    before = st.selectbox("Compare with", compare_opts, key=f"{keys['compare']}_{after}",
                          format_func=lambda i: ("what this pass received: " if i == received else "") + _label(run, i))
    return before, after, shown


def graph_tab(key: RunKey, run, before: int, after: int) -> None:
    """Both graphs side by side, each fitting its panel, whatever their size: pan, zoom, fit,
    minimap, search and node details run in the browser (app/graph_view.py)."""
    graphs = run_graphs(key)
    with st.spinner("Laying out the graphs..."):
        payload_b, payload_a = graphs.payload(before), graphs.payload(after)
    st.html(legend_html())  # st.html: no markdown parser (rehype-raw) loaded and run for it
    statuses = graphs.statuses(before, after)
    token = run_keys(key)["snapshot"]
    opened = graph_view((f"{token}:{graphs.representative(before)}", payload_b),
                        (f"{token}:{graphs.representative(after)}", payload_a), statuses,
                        (f"Before · {_label(run, before)}", f"After · {_label(run, after)}"), key=state.GRAPH_VIEW)
    st.caption(f"Diff: {statuses[2]}. Drag to pan, wheel to zoom, double-click to fit; click a node for its "
               "attributes, the model nodes it came from and the kernel it becomes.")
    if opened:
        open_kernel(key, opened)


def open_kernel(key: RunKey, request: dict) -> None:
    """A kernel clicked in the graph: hand it to the Schedule page and go there."""
    try:
        kernel = graph_kernel(key, int(request["index"]), str(request["name"]))
    except (KeyError, ValueError, ExplorerError) as err:
        st.error(f"Could not open {request.get('name')}: {err}")
        return
    state.write(state.GRAPH_KERNEL, kernel)
    state.write(state.USE_GRAPH_KERNEL, True)
    try:
        st.switch_page("ui/schedule.py")
    except Exception:  # noqa: BLE001 - this page running alone (tests) has no navigation to switch in
        st.info(f"{kernel.info.spec} is ready in the Schedule page: open it from the navigation.")


def script_tab(key: RunKey, run, before: int, after: int) -> None:
    diffs = script_diff(key, before, after)
    changed = [d for d in diffs if d.status != "same"]
    st.caption(f"{len(changed)} of {len(diffs)} functions differ: "
               + ", ".join(f"{d.name} ({d.status}, +{d.added}/-{d.removed})" for d in changed[:12])
               + (" ..." if len(changed) > 12 else ""))
    styles = ["Unified", "Side by side", "Full text after"]
    # the choice outlives the radio: Streamlit drops a widget's state in a run that does not draw it
    # (another view), which reset it to Unified
    kept = state.read(state.DIFF_STYLE_KEPT, styles[0])
    style = st.radio("Diff style", styles, index=styles.index(kept) if kept in styles else 0, horizontal=True,
                     key=state.DIFF_STYLE)
    state.write(state.DIFF_STYLE_KEPT, style)
    if style == "Full text after":
        st.code(script_text(key, after), language="python", line_numbers=True)
        return
    if not changed:
        st.info("The module text is identical.")
        return
    from explorer.passes.textdiff import split_functions

    before_fns = split_functions(script_text(key, before)) if style == "Side by side" else {}
    after_fns = split_functions(script_text(key, after)) if style == "Side by side" else {}
    for d in changed[:40]:
        with st.expander(f"{d.name}: {d.status} (+{d.added} / -{d.removed})", expanded=len(changed) <= 3):
            if style == "Unified":
                st.code(d.unified, language="diff")
            else:
                st.html(side_by_side_html(before_fns.get(d.name, ""), after_fns.get(d.name, "")))


def counts_tab(run, before: int, after: int) -> None:
    cb = run.input_counts if before < 0 else run.snapshots[before].counts
    ca = run.input_counts if after < 0 else run.snapshots[after].counts
    fields = {"relax_functions": "Relax functions", "fused_functions": "fused functions (FuseOps)",
              "prim_funcs": "PrimFuncs (TIR kernels)", "bindings": "bindings", "constants": "constants",
              "constant_bytes": "constants (MB)", "activation_bytes": "activations, no reuse (MB)",
              "planned_bytes": "planned storage (MB)"}

    def value(counts, field):
        v = getattr(counts, field)
        return None if v is None else round(v / 2**20, 2) if field.endswith("_bytes") else v

    rows = [{"count": label, "before": value(cb, f), "after": value(ca, f)} for f, label in fields.items()]
    for r in rows:
        r["delta"] = round((r["after"] or 0) - (r["before"] or 0), 2)
    c1, c2 = st.columns(2)  # plain HTML tables: the Counts view opens without starting a grid widget
    c1.html(table_html(rows))
    ops = sorted(set(cb.calls) | set(ca.calls))
    c2.html(table_html([{"call": o, "before": cb.calls.get(o, 0), "after": ca.calls.get(o, 0)} for o in ops]))
    shown = run.main_passes()
    st.html(time_bars_html([(f"#{s.index} {s.name}", s.seconds * 1000, s.changed) for s in shown],
                           "Time per pass (grey: changed nothing)"))


def main() -> None:
    st.title("Graph & passes")
    key, run = load_run(choose_model())
    st.caption(f"**{display_name(key.model)}** through **{run.title}**: {len(run.snapshots)} passes in "
               f"{run.seconds * 1000:.0f} ms (snapshots {run.capture_seconds * 1000:.0f} ms)")
    if run.error:
        st.warning(f"The pipeline stopped at **{run.failed_pass}**: {run.error}. Snapshots up to it are shown.")
    if not run.snapshots:
        st.stop()
    explore(key, run)


@st.fragment
def explore(key: RunKey, run) -> None:
    """Everything below the model choice. A fragment: picking another snapshot reruns only this."""
    keys = run_keys(key)
    before, after, shown = snapshot_pickers(run, keys)
    rows = pass_rows(shown)
    columns = pass_columns(rows)
    # the list beside the views where it fits whole, else folded away (the picker above stays)
    need = columns_px(columns) + ROW_MARKER_PX + 2  # the rows' checkboxes, the frame
    st.html(side_column_css(state.PASSES_LAYOUT, state.PASS_LIST, state.PASS_VIEWS, need_px=need, share=_SHARE))
    with st.container(key=state.PASSES_LAYOUT):
        left, right = st.columns([_SHARE, 1 - _SHARE])
    with left, st.container(key=state.PASS_LIST):
        st.markdown(f"**Passes** ({len(shown)} of {len(run.snapshots)})")
        pass_table(shown, rows, columns, keys)
    with right, st.container(key=state.PASS_VIEWS):
        # One view at a time: only it runs and is sent, which keeps switching snapshots quick (a
        # segmented control costs the browser less than lazy tabs on every switch).
        view = st.segmented_control("View", VIEWS, key=state.VIEW_TAB, default=VIEWS[0], label_visibility="collapsed")
        if view == "TVMScript":
            script_tab(key, run, before, after)
        elif view == "Counts & time":
            counts_tab(run, before, after)
        else:
            graph_tab(key, run, before, after)

main()
