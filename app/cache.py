"""Every Streamlit cache of the app, in one module; library functions stay uncached.

A model spec plus pipeline identifies a run; the :class:`PipelineRun` keeps its own scripts and
graphs, so switching snapshots reads from memory and never runs a pass again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import streamlit as st

from explorer.graph.onnx_names import onnx_sources
from explorer.graph.run_views import RunGraphs
from explorer.kernels import Kernel
from explorer.models import LoadedModel, load_model
from explorer.passes import PipelineRun, run_pipeline
from explorer.passes.textdiff import diff_scripts


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
    """Keep an uploaded ONNX file on disk and return the path, so it becomes a model spec like any
    file path: in a private folder of this user and UI process, created without following links,
    size-bounded, removed when the UI ends (see :mod:`app.uploads`); :class:`app.uploads.UploadError`
    (a ModelLoadError) when it cannot be kept."""
    from app.uploads import save_upload as keep

    return keep(data, filename)


@st.cache_resource(max_entries=8, show_spinner=False)
def run_graphs(key: RunKey) -> RunGraphs:
    """The drawable graphs of a run, named after the model's ONNX nodes. The first snapshots a
    user opens are laid out in a background thread while the page draws the default one."""
    run = pipeline_run(key)
    graphs = RunGraphs(run, onnx_sources(loaded_model(key.model, key.shapes)))
    likely = [s.index for s in run.main_passes() if s.changed]
    likely += [run.input_index(i) for i in likely]
    threading.Thread(target=graphs.warm, args=(list(dict.fromkeys(likely)),), daemon=True,
                     name="schedx-warm-graphs").start()
    return graphs


def _is_final(graphs, index: int) -> bool:
    """Whether snapshot ``index`` holds the task pipeline's kernels: its result, or a snapshot
    before the last pass, which only marks the kernels' weights (FuseTIR, DeadCodeElimination)."""
    final = graphs.lineage.final
    if graphs.representative(index) == final:
        return True
    import tvm_ffi

    from explorer.passes.weight_buffers import mark_weights

    return bool(tvm_ffi.structural_equal(mark_weights(graphs.run.module(index)), graphs.run.module(final)))


@st.cache_resource(max_entries=32, show_spinner=False)
def graph_kernel(key: RunKey, index: int, name: str) -> Kernel:
    """PrimFunc ``name`` after snapshot ``index`` as a kernel for the Schedule page. At the end of
    the task pipeline (the one search and export use) it is the model's task of that name (the
    Schedule page and the leaderboard know it so); elsewhere it is named after the pipeline and
    the pass."""
    from explorer.kernels.kernel import make_kernel

    graphs = run_graphs(key)
    run = graphs.run
    model = loaded_model(key.model, key.shapes).name
    calls = sum(1 for _, d in graphs.lineage.graph(index).nodes(data=True) if d["op"] == name)
    from explorer.passes.pipelines import TASK_PIPELINE

    if not key.passes and key.pipeline == TASK_PIPELINE and _is_final(graphs, index):
        from explorer.workload.task import module_tasks

        for task in module_tasks(run.module(graphs.lineage.final), model):
            if name in task.funcs:
                return make_kernel(task.mod["main"], name=task.name, title=task.name.split("/", 1)[1],
                                   source=f"model:{model}", spec=task.name,
                                   params={"calls": task.calls, "funcs": list(task.funcs)})
    where = run.snapshots[index].name if index >= 0 else "input"
    spec = f"{model}/{name}@{key.pipeline}.{index}.{where}"
    return make_kernel(graphs.kernel(index, name), name=spec, title=name, source=f"model:{model}", spec=spec,
                       params={"calls": max(calls, 1)})


@st.cache_data(max_entries=256, show_spinner=False)
def script_diff(key: RunKey, before: int, after: int):
    run = pipeline_run(key)
    return diff_scripts(run.script(before), run.script(after))


@st.cache_data(max_entries=64, show_spinner=False)
def script_text(key: RunKey, index: int) -> str:
    return pipeline_run(key).script(index)


__all__ = ["RunKey", "graph_kernel", "loaded_model", "pipeline_run", "run_graphs", "save_upload", "script_diff",
           "script_text"]


@st.cache_resource(max_entries=4, show_spinner="Extracting the model's fused kernels...")
def fused_kernels(model: str, precision: str = "fp32") -> dict:
    """The model's fused kernels as built at ``precision`` (bf16: its weight products rewritten,
    :func:`explorer.precision.bf16_module`; int8: those of its QDQ model, quantized as `schedx export
    --precision int8` quantizes it, :func:`explorer.precision.for_precision`; the caller checked
    the target)."""
    import dataclasses

    from explorer.workload import model_kernels

    if precision == "int8":
        from explorer.precision import for_precision
        from explorer.target import host_target
        from explorer.workload import load_workload

        model = for_precision(load_workload(model), host_target(), "int8")[0].spec  # the cached QDQ model
    loaded = loaded_model(model, "")
    if precision == "bf16":
        from explorer.precision import bf16_module

        loaded = dataclasses.replace(loaded, mod=bf16_module(loaded.mod)[0])
    return {k.name: k for k in model_kernels(loaded)}


# a minute at most: a calibration measured again on a quiet machine, or raised by a kernel, shows
@st.cache_resource(show_spinner="Calibrating this machine's peak FLOP/s and bandwidth...", ttl=60)
def machine_peaks():
    from explorer.measure import calibration

    return calibration()
