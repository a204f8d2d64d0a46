"""Every Streamlit cache of the app, in one module; library functions stay uncached.

A model spec plus pipeline identifies a run; the :class:`PipelineRun` keeps its own scripts and
graphs, so switching snapshots reads from memory and never runs a pass again.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from explorer.graph import diff_graphs, to_dot
from explorer.graph.dot import to_svg
from explorer.models import LoadedModel, load_model
from explorer.passes import PipelineRun, run_pipeline
from explorer.textdiff import diff_scripts


@dataclass(frozen=True)
class RunKey:
    """What identifies a pipeline run in the UI: the model spec, its shapes, the pipeline."""

    model: str
    shapes: str
    pipeline: str
    passes: tuple[str, ...]


@st.cache_resource(max_entries=8, show_spinner="Importing the model...")
def loaded_model(model: str, shapes: str) -> LoadedModel:
    return load_model(model, shapes or None)


@st.cache_resource(max_entries=8, show_spinner="Running the pipeline and taking snapshots...")
def pipeline_run(key: RunKey) -> PipelineRun:
    loaded = loaded_model(key.model, key.shapes)
    if key.passes:
        return run_pipeline(loaded.mod, passes=list(key.passes))
    return run_pipeline(loaded.mod, key.pipeline)


def save_upload(data: bytes, filename: str) -> str:
    """Keep an uploaded ONNX file on disk under its content hash and return the path, so it
    becomes a model spec like any file path."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "schedx-uploads"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{digest}-{Path(filename).name}"
    if not path.exists():
        path.write_bytes(data)
    return str(path)


@st.cache_data(max_entries=256, show_spinner=False)
def graph_dots(key: RunKey, before: int, after: int, focus_text: str, radius: int, start: int,
               limit: int) -> tuple[str, str, dict, int]:
    """DOT for the graphs before and after, coloured by their diff, plus the diff counts and
    the size of the larger graph. A focus text or a window keeps big graphs readable."""
    from explorer.graph import find_nodes, focus, window

    run = pipeline_run(key)
    gb, ga = run.graph(before), run.graph(after)
    diff = diff_graphs(gb, ga)
    size = max(gb.number_of_nodes(), ga.number_of_nodes())
    views = []
    for g in (gb, ga):
        if focus_text:
            hits = find_nodes(g, focus_text)
            view = focus(g, hits[0], radius) if hits else g.subgraph([]).copy()
        elif g.number_of_nodes() > limit:
            view = window(g, start, limit)
        else:
            view = g
        views.append(view)
    return (to_dot(views[0], statuses=diff.before), to_dot(views[1], statuses=diff.after), diff.counts(), size)


@st.cache_data(max_entries=256, show_spinner=False)
def svg_of(dot: str) -> str:
    return to_svg(dot)


@st.cache_data(max_entries=256, show_spinner=False)
def script_diff(key: RunKey, before: int, after: int):
    run = pipeline_run(key)
    return diff_scripts(run.script(before), run.script(after))


@st.cache_data(max_entries=64, show_spinner=False)
def script_text(key: RunKey, index: int) -> str:
    return pipeline_run(key).script(index)


__all__ = ["RunKey", "graph_dots", "svg_of", "loaded_model", "pipeline_run", "save_upload", "script_diff",
           "script_text"]


@st.cache_resource(max_entries=4, show_spinner="Extracting the model's fused kernels...")
def fused_kernels(model: str) -> dict:
    from explorer.workload import model_kernels

    return {k.name: k for k in model_kernels(loaded_model(model, ""))}


@st.cache_resource(show_spinner="Calibrating this machine's peak FLOP/s and bandwidth (once)...")
def machine_peaks():
    from explorer.measure import calibration

    return calibration()
