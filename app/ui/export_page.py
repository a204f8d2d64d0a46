"""Page "Export": build the chosen schedules into a library a plain TVM runtime loads, verify it,
download it.

Choose a workload (zoo model or kernel spec), a target (this CPU, a named CPU, a CUDA
architecture) and a database; every kernel of the workload is listed with its best record for
that target preselected, and any pick can be changed to another record or to the default
schedule. A model builds in fp32 or, where the target has the instructions, in bf16 (its weight
products; the kernels and records listed are then the bf16 ones). Build writes the bundle to a
temporary folder, verifies it (fresh process and layer by layer on CPU, thread binding and nvcc on
CUDA; a bf16 bundle at its stated tolerance) and offers it as a zip.
"""

from __future__ import annotations

import tempfile

import streamlit as st

from app import state
from app.in_model_picker import in_model_picker
from app.precision_picker import precision_picker
from app.state import ExportKeys as K
from app.target_picker import target_picker
from explorer.errors import ExplorerError
from explorer.models import ZOO
from explorer.target import target_choices
from export import zip_bundle

DEFAULT = "default schedule"


def sidebar():
    """The workload spec, shapes, target (None while invalid), precision and database path chosen
    in the sidebar."""
    from app.records import db_path

    sb = st.sidebar
    sb.header("Workload")
    source = sb.radio("Source", ["Model", "Kernel"], key=K.SOURCE, horizontal=True)
    shapes = None
    if source == "Model":
        names = list(ZOO)
        spec = sb.selectbox("Model", names, index=names.index("small_cnn"), key=K.MODEL,
                            format_func=lambda n: f"{ZOO[n].title} ({n})")
        other = sb.text_input("or any model", "", key=K.MODEL + "_spec", placeholder="model.onnx, example:densenet121",
                              help="an .onnx path (an uploaded file's path is shown on the Graph & passes page), "
                                   "example:NAME, or a zoo name; empty: the zoo model above").strip()
        spec = other or spec
        shapes = sb.text_input("Shapes (symbolic dims)", "", key=K.MODEL + "_shapes",
                               placeholder="input:1x3x224x224").strip() or None
    else:
        spec = sb.text_input("Kernel spec", "matmul:M=256,N=256,K=256", key=K.KERNEL,
                             help="a built-in with shapes, or MODEL/FUSED_KERNEL (see `schedx kernels`)")
    sb.header("Target")
    with sb:
        target = target_picker(K.TARGET_KIND, choices=target_choices())
        precision = precision_picker(K.PRECISION, target, kind="model" if source == "Model" else "kernel",
                                     what=spec) if target is not None else "fp32"
    sb.header("Records")
    db = sb.text_input("Database", db_path(), key=K.DB_INPUT)
    return spec, shapes, target, precision, db


def load(spec: str, shapes: str | None = None, target=None, precision: str = "fp32"):
    """The workload as built at ``precision`` for ``target`` (bf16: its bf16 kernels, whose records a
    search at bf16 made; int8: its QDQ model, quantized once and cached) and its tasks, loaded once
    per session (fusing ResNet-18 takes seconds); the export builds that workload as it is."""
    from explorer.workload import load_workload
    from explorer.workload.fusion import own_pipeline_target
    from export import workload_tasks

    memo = state.kept(K.WORKLOADS, dict)
    if (spec, shapes, "fp32", None) not in memo:
        with st.spinner(f"Loading {spec} and fusing its kernels..."):
            workload = load_workload(spec, shapes)
            memo[(spec, shapes, "fp32", None)] = (workload, workload_tasks(workload))
    # another CPU than this machine's, or a device, has tasks of its own (explorer.workload.Workload.for_target)
    key = (spec, shapes, precision, getattr(own_pipeline_target(target), "key", None))
    if key not in memo:
        from explorer.precision import for_precision

        workload = memo[(spec, shapes, "fp32", None)][0]
        doing = "Quantizing" if precision == "int8" else "Rewriting"
        with st.spinner(f"{doing} {spec} at {precision} and fusing its kernels..."):
            built = for_precision(workload, target, precision)[0].for_target(target)
            memo[key] = (built, workload_tasks(built))
    return memo[key]


def choices_for(tasks, target, db: str):
    """Each task's records for the target from the database (none when the file does not exist)."""
    from pathlib import Path

    from export.choose import TaskChoice, open_store, task_choices
    from store import StoreError

    path = Path(db).expanduser()
    if not db or not path.is_file():
        st.caption(f"No database at `{db}`: every kernel gets the default schedule.")
        return [TaskChoice(t) for t in tasks]
    try:
        store = open_store(path)
        try:
            return task_choices(store, tasks, target)
        finally:
            store.close()
    except (ExplorerError, StoreError) as err:
        st.warning(f"Records not read: {err}")
        return [TaskChoice(t) for t in tasks]


def _record_label(r) -> str:
    median = f"{r.median_s * 1e3:.3f} ms" if r.median_s else "?"
    gflops = f", {r.gflops:.1f} GFLOPS" if r.gflops else ""
    return f"record {r.id} ({r.source}, {median}{gflops})"


def task_table(choices, target) -> dict:
    """The kernels with their preselected record; returns the picks (task name -> record id or None)."""
    from export.schedules import shares

    share = shares([c.task for c in choices])
    with_records = [c for c in choices if c.candidates]
    st.subheader(f"Kernels ({len(choices)}, {len(with_records)} with records)")
    picks: dict = {}
    for c in with_records:
        options = [r.id for r in c.candidates] + [None]
        labels = {r.id: _record_label(r) for r in c.candidates}
        picks[c.task.name] = st.selectbox(
            f"{c.task.name} ({share[c.task.name]:.1%} of FLOPs, x{c.task.calls})", options, key=K.PICK + c.task.name,
            format_func=lambda v, labels=labels: labels.get(v, DEFAULT))
    default = target.default_schedule
    rows = [{"kernel": c.task.name, "calls": c.task.calls, "MFLOP": round(c.task.flops / 1e6, 3),
             "share": f"{share[c.task.name]:.1%}",
             "schedule": (f"record {picks[c.task.name]}" if picks.get(c.task.name) is not None else default)}
            for c in choices]
    st.dataframe(rows, hide_index=True, width="stretch")
    return picks


def build(workload, target, choices, picks: dict, *, in_model: bool = False, db: str | None = None,
          recheck: bool = False, precision: str = "fp32") -> None:
    """Export the picks at ``precision``; the in-model decision the database ``db`` keeps for them
    is reused (``recheck``: taken again), as `schedx export` does."""
    from export.choose import schedules_for
    from export.entry import ExportSpec, run_export

    bar = st.progress(0.0, text="starting")
    folder = tempfile.mkdtemp(prefix="schedx-export-")
    try:
        spec = ExportSpec(workload=workload, target=target, schedules=schedules_for(choices, picks),
                          out_dir=f"{folder}/{workload.name.replace('/', '_')}-{target.arch}", check_in_model=in_model,
                          db=db, recheck=recheck, precision=precision)
        done = run_export(spec, progress=lambda stage, frac: bar.progress(frac, text=stage))
        report = done.report
        state.write(K.RESULT, {"key": (workload.spec, target.spec, precision), "report": report,
                               "zip": zip_bundle(report.folder), "error": "", "in_model": done.shipped.summary()})
    except ExplorerError as err:
        state.write(K.RESULT, {"key": (workload.spec, target.spec, precision), "report": None, "zip": b"",
                               "error": str(err)})
    bar.empty()


def results(result: dict) -> None:
    if result["error"]:
        st.error(f"Export failed: {result['error']}")
        return
    report = result["report"]
    m = report.manifest
    verdict = st.success if report.verified else (st.error if not report.ok else st.warning)
    verdict(f"{m['workload']['name']} for {m['target']['label']}, built in {report.seconds['build']:.1f} s "
            f"({report.seconds['total']:.1f} s with checks). {report.verdict}")
    if result.get("in_model"):  # the in-model decision applied: kept in the database, or taken now
        st.info(result["in_model"])
    precision_note(m.get("precision"))
    listed = set((m.get("precision") or {}).get("kept_fp32", ()))  # (a line the precision note shows already)
    for w in report.warnings:
        if w not in listed:
            st.warning(w)
    v = report.verification
    if v is not None and v.status != "skipped":
        cols = st.columns(4)
        cols[0].metric("verified", "yes" if v.ok else ("no" if v.status == "failed" else "error"))
        cols[1].metric("max abs error", "-" if v.max_abs_error is None else f"{v.max_abs_error:.2e}")
        cols[2].metric("max rel error", "-" if v.max_rel_error is None else f"{v.max_rel_error:.2e}")
        cols[3].metric("first inference", "-" if v.first_s is None else f"{v.first_s * 1e3:.2f} ms",
                       help="in a fresh process that loads only the bundle")
        st.caption(v.summary())
    if report.layers is not None:
        (st.info if report.layers.ok else st.error)("Layer by layer: " + report.layers.summary())
        if report.layers.layers:
            with st.expander(f"Every layer ({len(report.layers.layers)})"):
                st.dataframe([r.to_dict() for r in report.layers.layers], hide_index=True, width="stretch")
    elif v is not None:
        st.info(v.summary())
    if report.cuda is not None:
        (st.info if report.cuda.ok else st.error)("CUDA: " + report.cuda.summary())
    if report.elf is not None:
        (st.info if report.elf.ok else st.error)("Library: " + report.elf.summary())
    name = report.folder.name
    if not report.ok:
        st.error("This bundle failed a check: it is not offered for download. Fix the schedule (or pick the "
                 "default for the failing kernels) and build again.")
    else:
        label = "" if report.verified else " (built, not run on this machine)"
        st.download_button(f"Download {name}.zip ({len(result['zip']) / 1024:.0f} KB){label}", result["zip"],
                           file_name=f"{name}.zip", mime="application/zip", key=K.DOWNLOAD,
                           type="primary" if report.verified else "secondary")
    with st.expander("manifest.json"):
        st.json(m, expanded=False)


def precision_note(precision: dict | None) -> None:
    """The precision the bundle was built at: at bf16, what was computed in bf16, what stayed fp32
    and the tolerance it was verified at; at int8, what quantizing cost against the float model,
    beside the verdict (against ONNX Runtime running the int8 model)."""
    if not precision or precision["name"] == "fp32":
        st.caption("Precision: fp32, as the model is written.")
        return
    kept = "\n".join(f"- {line}" for line in precision["kept_fp32"])
    if precision.get("quantization"):
        from explorer.models.int8_precision import summary

        st.info(f"**Precision: int8**: {summary(precision['quantization'])}. The verdict is against ONNX Runtime "
                f"running the int8 model (what was built), within a few of its outputs' quantization steps. "
                f"Kept in float:\n{kept}")
        return
    st.info(f"**Precision: {precision['name']}**: {precision['converted_products']} product(s) with constant weights "
            f"computed in {precision['name']} with fp32 accumulation; verified against fp32 at "
            f"{precision['tolerance']:g} x each output's largest magnitude. Kept in fp32:\n{kept}")


def main() -> None:
    st.title("Export")
    st.caption("A library a plain TVM runtime loads (`tvm.runtime.load_module` + `tvm.runtime.vm.VirtualMachine`), "
               "its parameters in a separate file, a manifest with hashes, verified before you download it.")
    spec, shapes, target, precision, db = sidebar()
    if target is None:
        st.info("Choose a valid target in the sidebar.")
        return
    try:
        workload, tasks = load(spec, shapes, target, precision)
    except ExplorerError as err:
        st.error(str(err))
        return
    choices = choices_for(tasks, target, db)
    picks = task_table(choices, target)
    in_model, recheck = in_model_picker(K.IN_MODEL, K.RECHECK, runs_here=target.runs_here,
                                        has_records=any(c.candidates for c in choices))
    if st.button("Build & verify", type="primary", key=K.BUILD):
        build(workload, target, choices, picks, in_model=in_model, recheck=recheck, db=db or None,
              precision=precision)
    result = state.read(K.RESULT)
    if result is not None and result["key"] == (workload.spec, target.spec, precision):
        results(result)


main()
