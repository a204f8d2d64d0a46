"""Page "Profile": where a built model spends its time (per fused kernel, beside ONNX Runtime's
per-node profile), then put effort where the time goes: open a hot kernel in the Schedule page or
start a search on it. Also the batch-size sweep and int8 quantization of the same model."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app import state
from app.charts import ort_nodes_figure, profile_figure, sweep_figure
from app.in_model_picker import in_model_picker
from app.layout import sized_columns
from app.records import db_path
from app.state import ProfileKeys as P
from app.target_picker import host_caption, target_picker
from explorer.errors import ExplorerError
from explorer.models import ZOO
from store import StoreError

KEY = P.PREFIX


def sidebar():
    """The model spec, its --shapes, and the target (None while invalid)."""
    sb = st.sidebar
    sb.header("Model")
    names = list(ZOO)
    pick = sb.selectbox("Zoo model", names, index=names.index("small_cnn"), key=KEY + "zoo",
                        format_func=lambda n: f"{ZOO[n].title} ({n})")
    spec = sb.text_input("or any model spec", "", key=KEY + "spec", placeholder="example:densenet121, model.onnx",
                         help="a zoo name, example:NAME or an .onnx path; empty: the zoo model above").strip() or pick
    shapes = sb.text_input("Shapes (symbolic dims)", "", key=KEY + "shapes", placeholder="input:1x3x224x224").strip()
    sb.header("Target")
    with sb:
        target = target_picker(KEY + "target", cpu_only=True, runnable=True)
    return spec, shapes or None, target


def _kernel_spec(spec: str, task_name: str) -> str:
    """The profiled kernel as a spec that loads it: by the model as the user named it (a path stays a path), as
    ``schedx profile``'s tune lines name it (:func:`explorer.kernels.fused_kernel_spec`)."""
    from explorer.kernels import fused_kernel_spec

    return fused_kernel_spec(spec, task_name) or task_name


def _open_in_schedule(spec: str, shapes: str | None, task_name: str) -> None:
    from explorer.workload import load_kernel

    kernel = load_kernel(_kernel_spec(spec, task_name), shapes=shapes)
    state.write(state.GRAPH_KERNEL, kernel)  # the Schedule page offers it at the top of its sidebar
    state.write(state.USE_GRAPH_KERNEL, True)
    st.switch_page("ui/schedule.py")


def _start_search(spec: str, task_name: str, target, shapes: str | None, trials: int) -> None:
    from search.entry import prepare, start
    from search.job_spec import JobSpec
    from search.params import SearchParams
    from store import Store

    valid = prepare(JobSpec(workload=_kernel_spec(spec, task_name), target=target.spec,
                            params=SearchParams(trials=trials), shapes=shapes))
    with Store(db_path()) as store:
        job = start(store, valid)
    state.write(state.SEARCH_JOB, job.id)
    state.write(state.JOB_PICK, job.id)
    st.toast(f"Started search job {job.id} on {task_name.split('/')[-1]} ({trials} trials): see the Search page")


def profile_tab(spec: str, shapes: str | None, target) -> None:
    from export.entry import ProfileSpec, run_profile

    runs = st.number_input("Profiled runs", 1, 200, 10, key=KEY + "runs")
    in_model, recheck = in_model_picker(P.IN_MODEL, P.RECHECK, runs_here=True)  # the page profiles here only
    if st.button("Profile", type="primary", key=KEY + "run"):
        try:
            with st.spinner(f"Building {spec} for {target.label} with the records `schedx export` ships and timing "
                            "every kernel in a fresh process…"):
                db = Path(db_path()).expanduser()  # the records and the in-model decision an export ships
                result = run_profile(ProfileSpec(workload=spec, shapes=shapes, target=target, db=str(db),
                                                 use_records=db.is_file(), runs=int(runs),
                                                 check_in_model=in_model, recheck=recheck)).profile
            state.write(P.RESULT, (spec, shapes, target.key, result))
        except (ExplorerError, StoreError) as err:
            st.error(str(err))
            return
    found = state.read(P.RESULT)
    if found is None or found[:3] != (spec, shapes, target.key):
        st.caption("Builds the model as `schedx export` would (records applied, defaults elsewhere), then times "
                   "every kernel call in a fresh process.")
        return
    result = found[3]
    from export.profile import tiers_text

    if result.busy:
        st.warning(result.busy_note)
    cols = st.columns(5)
    cols[0].metric("TVM per run", f"{result.end_to_end_s * 1e3:.2f} ms",
                   help=f"a plain run's median; the rows below add up to {(result.kernels_s + result.other_s) * 1e3:.3f}"
                        f" ms with the instrument's own cost ({result.instrument_s * 1e6:.2f} us per call) taken out")
    cols[1].metric("ONNX Runtime", f"{result.ort_s * 1e3:.2f} ms" if result.ort_s else "-")
    cols[2].metric("TVM / ORT", f"{result.end_to_end_s / result.ort_s:.2f}x" if result.ort_s else "-")
    cols[3].metric("kernels with records", f"{sum(k.schedule == 'record' for k in result.kernels)}/"
                                           f"{len(result.kernels)}")
    headroom = result.headroom_s
    cols[4].metric("headroom", "-" if headroom is None else f"{headroom * 1e3:.3g} ms",
                   help="what the kernels would save together if each ran at its roofline (the FLOP peak, or the "
                        f"bandwidth of where its bytes fit where it binds them: {tiers_text(result)}): about the most "
                        "a search or a hand-written schedule can take off this model on this machine (an estimate)")
    # each kernel's % peak and roofline are against its instruction family's peak (bf16/int8 units apart)
    st.caption(result.peaks_text())
    if result.openvino:  # OpenVINO f32 and its default precision (bf16 on AMX / AVX512-BF16 CPUs)
        cols = st.columns(2 * len(result.openvino))
        for i, a in enumerate(result.openvino):
            cols[2 * i].metric(a.row.name, f"{a.row.median_s * 1e3:.2f} ms", help=a.row.note)
            cols[2 * i + 1].metric(f"TVM / {a.row.name}", f"{a.versus.ratio:.2f}x "
                                                           f"({a.versus.low:.2f}-{a.versus.high:.2f})",
                                   help=f"ratio of medians with its 95% CI: {a.versus.text()} (timed one after the "
                                        "other, not in alternated rounds: `schedx bench` alternates them)")
        errors = [f"{a.row.name} {a.row.error.text()}" for a in result.openvino if a.row.error]
        if errors:  # an anchor whose outputs would fail schedx's own check is not like for like
            st.caption("OpenVINO's outputs by schedx's verification rule: " + "; ".join(errors))
    left, right = st.columns(2)
    left.plotly_chart(profile_figure(result), width="stretch", key=KEY + "fig")
    if result.ort:
        right.plotly_chart(ort_nodes_figure(result), width="stretch", key=KEY + "ort")
    # a kernel faster than the instrument can resolve shows bounds ("< 0.0018" ms, "≥ 9.1" GFLOPS), never 0
    mixed = {k.family for k in result.kernels} != {"fp32"}  # a precision column where the model mixes them
    order = ["kernel", "ms", "share", "calls", "GFLOPS", "% peak", "% roofline", *(["precision"] if mixed else []),
             "schedule"]
    # the kernel's name without its model's (every row's: the page names the model), so the columns fit
    rows = [{"kernel": k.task.split("/", 1)[-1], **k.cells(result.kernels_s), "calls": k.calls, "precision": k.family,
             "schedule": f"record {k.record_id}" if k.schedule == "record" else k.schedule} for k in result.kernels]
    rows = [{c: r.get(c) for c in order} for r in rows]  # each column as wide as its values (app/layout.py)
    st.dataframe(rows, hide_index=True, width="stretch", column_order=order, column_config=sized_columns(rows))
    st.markdown("**Hot kernels**: open one in the Schedule page, or search it.")
    trials = st.number_input("Trials per search", 8, 100000, 200, key=KEY + "trials")
    for i, k in enumerate(result.top(3)):
        c = st.columns([3, 1.3, 1.1])
        cells = k.cells(result.kernels_s)
        c[0].write(f"{k.task} · {cells['ms']} ms ({cells['share']}) · {k.schedule}")
        if c[1].button("Open in Schedule", key=f"{KEY}open_{i}"):
            _open_in_schedule(spec, shapes, k.task)
        if c[2].button("Search it", key=f"{KEY}tune_{i}"):
            try:
                _start_search(spec, k.task, target, shapes, int(trials))
            except (ExplorerError, StoreError) as err:
                st.error(str(err))
    for note in result.notes:
        st.caption(note)


def sweep_tab(spec: str, target) -> None:
    from export.entry import SweepSpec, run_sweep

    c = st.columns(3)
    batches = c[0].text_input("Batch sizes", "1,2,4,8", key=KEY + "batches")
    trials = c[1].number_input("Tune each shape (trials, 0: records only)", 0, 100000, 0, key=KEY + "sweep_trials")
    runs = c[2].number_input("Timed runs per point", 1, 1000, 20, key=KEY + "sweep_runs")
    if st.button("Sweep", key=KEY + "sweep"):
        try:
            sizes = sorted({int(b) for b in batches.split(",") if b.strip()})
            if not sizes or min(sizes) < 1:
                raise ValueError
        except ValueError:
            st.error(f"Batch sizes are whole numbers separated by commas, e.g. 1,2,4,8 (got {batches!r})")
            return
        bar = st.progress(0.0, text="starting")
        try:
            result = run_sweep(SweepSpec(workload=spec, batches=tuple(sizes), target=target, db=db_path(),
                                         trials=int(trials), runs=int(runs)),
                               progress=lambda stage, frac: bar.progress(min(1.0, frac), text=stage))
            state.write(P.SWEEP_RESULT, (spec, target.key, result))
        except (ExplorerError, StoreError) as err:
            st.error(str(err))
        bar.empty()
    found = state.read(P.SWEEP_RESULT)
    if found is not None and found[:2] == (spec, target.key):
        st.plotly_chart(sweep_figure(found[2]), width="stretch", key=KEY + "sweep_fig")
        st.dataframe([p.to_dict() for p in found[2].points], hide_index=True, width="stretch")
        for note in found[2].notes:
            st.caption(note)


def quantize_tab(spec: str, shapes: str | None) -> None:
    from explorer.models import model_onnx
    from explorer.models.quantize import quantize_model

    c = st.columns(3)
    calibrate = c[0].number_input("Calibration samples", 1, 1000, 16, key=KEY + "calib")
    evaluate = c[1].number_input("Held-out samples", 1, 1000, 8, key=KEY + "eval")
    activations = c[2].selectbox("Activations", ["uint8", "int8"], key=KEY + "acts")
    if st.button("Quantize to int8 (QDQ)", key=KEY + "quantize"):
        try:
            with st.spinner("Calibrating with ONNX Runtime's quantizer, then timing both models…"):
                qdq, report = quantize_model(model_onnx(spec)[0], shapes=shapes, calibrate=int(calibrate),
                                             eval_samples=int(evaluate), activations=activations)
            state.write(P.QDQ, (spec, qdq.SerializeToString(), report))
        except ExplorerError as err:
            st.error(str(err))
            return
    found = state.read(P.QDQ)
    if found is None or found[0] != spec:
        return
    _, data, report = found
    cols = st.columns(4)
    cols[0].metric("size", f"{report.int8_bytes / 1e6:.1f} MB", f"{report.size_ratio:.2f}x smaller")
    cols[1].metric("ONNX Runtime latency", f"{report.int8_ms:.2f} ms", f"{report.speedup:.2f}x vs float "
                   f"{report.float_ms:.2f} ms")
    cols[2].metric("max relative error", f"{report.max_rel_error:.1%}")
    cols[3].metric("top-1 agreement", "-" if report.top1_agreement is None else f"{report.top1_agreement:.0%}")
    for note in report.notes:
        st.caption(note)
    st.download_button("Download the int8 model (.onnx)", data, file_name=f"{spec.split('/')[-1]}-int8.onnx",
                       key=KEY + "qdq_download")


def main() -> None:
    st.title("Profile")
    st.caption("Search first, then profile, then put human effort where the time goes. " + host_caption())
    spec, shapes, target = sidebar()
    if target is None:
        st.info("Choose a target this machine runs in the sidebar.")
        return
    profile, batch, quant = st.tabs(["Time per kernel", "Batch sweep", "int8"])
    with profile:
        profile_tab(spec, shapes, target)
    with batch:
        sweep_tab(spec, target)
    with quant:
        quantize_tab(spec, shapes)


main()
