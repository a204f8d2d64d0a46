"""Page "Search": sketches, then evolutionary search jobs (MetaSchedule), watched live."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app import state
from app.records import db_path
from app.target_picker import target_picker
from explorer.errors import ExplorerError
from explorer.kernels import BUILTINS
from explorer.models import ZOO
from store import Store, StoreError

EXAMPLES = ["matmul:M=256,N=256,K=256", "conv2d_nchw", "dense_bias_relu:M=32", "small_cnn", "resnet18"]


def start_form(store: Store) -> None:
    from search.job_spec import JobSpec
    from search.jobs import start_job
    from search.params import SearchParams

    target = target_picker("search_target", cpu_only=True)
    with st.form("start_search"):
        st.markdown("**Start a search** (it runs as its own process: close the tab, it goes on)")
        c1, c2 = st.columns([2, 1])
        workload = c1.text_input("Workload", "matmul:M=256,N=256,K=256", key="search_workload",
                                 help="A kernel spec (" + ", ".join(list(BUILTINS)[:4]) + ", ... with :P=V), "
                                      "a model's fused kernel (resnet18/fused_conv2d_add_relu) or a whole model ("
                                      + ", ".join(ZOO) + ")")
        trials = c2.number_input("Trials", 1, 100000, 64, key="search_trials")
        c = st.columns(4)
        per_batch = c[0].number_input("Per batch", 1, 512, 16, key="search_per_batch")
        population = c[1].number_input("Population", 2, 4096, 256, key="search_population")
        generations = c[2].number_input("Generations", 0, 20, 3, key="search_generations")
        seed = c[3].number_input("Seed", 0, 2**31 - 1, 0, key="search_seed")
        c = st.columns(4)
        mutate = c[0].slider("Mutation prob.", 0.0, 1.0, 0.85, key="search_mutate")
        eps = c[1].slider("Eps-greedy", 0.0, 1.0, 0.05, key="search_eps")
        tracker = c[2].text_input("RPC tracker (optional)", key="search_tracker", placeholder="127.0.0.1:9190")
        key = c[3].text_input("RPC key", key="search_rpc_key")
        if st.form_submit_button("Start search", type="primary"):
            if target is None:
                st.error("Choose a valid target above first.")
                return
            try:
                params = SearchParams(trials=int(trials), per_batch=int(per_batch), population=int(population),
                                      generations=int(generations), mutate_prob=float(mutate), eps_greedy=float(eps),
                                      seed=int(seed))
                spec = JobSpec(workload=workload.strip(), target=target.spec, params=params,
                               rpc_tracker=tracker.strip() or None, rpc_key=key.strip() or None)
                with st.spinner("Checking the workload and target…"):
                    prepared = spec.validate()  # the same parser as the CLI: a bad spec never becomes a job
                    if prepared[2] is not None:
                        from search.rpc import check_tracker

                        check_tracker(prepared[2])
                job = start_job(store, spec)
                st.session_state[state.SEARCH_JOB] = job.id
                st.session_state["job_pick"] = job.id  # the picker follows the job just started
                st.toast(f"Started job {job.id}")
            except (ExplorerError, StoreError) as err:
                st.error(str(err))


def sketches_panel() -> None:
    from explorer.workload import load_kernel
    from explorer.target import host_target
    from search.sketches import generate_sketches, sample_schedule

    with st.expander("Sketches: the design spaces the schedule rules generate (Ansor's sketch generation)"):
        spec = st.text_input("Kernel", "matmul:M=256,N=256,K=256", key="sketch_kernel")
        if st.button("Generate sketches", key="gen_sketches"):
            try:
                kernel = load_kernel(spec)
                st.session_state[state.SKETCHES] = (spec, generate_sketches(kernel, host_target()))
            except ExplorerError as err:
                st.error(str(err))
        found = st.session_state.get(state.SKETCHES)
        if not found:
            return
        spec, sketches = found
        st.caption(f"{len(sketches)} sketches for {spec}; ?N is a sampled value (N: this sketch's decision)")
        for sk in sketches:
            st.markdown(f"**Sketch {sk.index}** · rules: {', '.join(sk.rules) or '-'} · {sk.decisions} open decisions")
            st.code("\n".join(s.describe() for s in sk.open_steps), language=None)
            if st.button(f"Sample a schedule from sketch {sk.index} and open it", key=f"sample_{sk.index}"):
                kernel = load_kernel(spec)
                steps = sample_schedule(kernel, sk, host_target(), seed=sk.index)
                st.session_state[state.OPENED] = (kernel.info.spec, [s.to_dict() for s in steps])
                st.switch_page("ui/schedule.py")


def _job_label(j) -> str:
    from search.job_spec import JobProgress, JobSpec

    p, spec = JobProgress.from_dict(j.progress), JobSpec.from_dict(j.params)
    return (f"#{j.id} {j.status} · {spec.workload} · {p.trials}/{p.total or spec.params.trials} trials"
            + (f" · best {p.best_gflops:.1f} GFLOPS" if p.best_gflops else ""))


@st.fragment(run_every=2.0)
def live(path: str) -> None:
    """Jobs and the chosen job's progress, re-read from the database every 2 s."""
    from search.charts import job_series
    from search.jobs import refresh, stop_job

    try:
        with Store(path) as store:
            jobs = refresh(store)
            if not jobs:
                st.info("No search yet. Start one above, or from a shell: `schedx tune matmul --trials 64`.")
                return
            ids = [j.id for j in reversed(jobs)]
            chosen = st.session_state.get(state.SEARCH_JOB)
            job_id = st.selectbox("Job", ids, index=ids.index(chosen) if chosen in ids else 0,
                                  format_func=lambda i: _job_label(next(j for j in jobs if j.id == i)), key="job_pick")
            st.session_state[state.SEARCH_JOB] = job_id
            job = next(j for j in jobs if j.id == job_id)  # the same read as the picker's label
            records = store.records(job_id=job_id, order="id")
            names = {w.key: w.name for w in store.workloads()}
    except StoreError as err:
        st.error(str(err))
        return
    from search.job_spec import JobProgress, JobSpec

    p, spec = JobProgress.from_dict(job.progress), JobSpec.from_dict(job.params)
    running = job.status == "running"
    st.caption(f"{spec.workload} for `{spec.target}`" + (f" (shapes {spec.shapes})" if spec.shapes else "")
               + (f", measured through {spec.rpc_tracker} ({spec.rpc_key})" if spec.rpc_tracker else ""))
    c = st.columns(5)
    c[0].metric("status", job.status)
    c[1].metric("trials", f"{p.trials}/{p.total or spec.params.trials}")
    c[2].metric("best GFLOPS", f"{p.best_gflops:.1f}" if p.best_gflops else "-")
    c[3].metric("elapsed", f"{p.elapsed_s:.0f} s")
    c[4].metric("ETA", f"{p.eta_s:.0f} s" if running and p.eta_s is not None else "-")
    if running and st.button("Stop this job", key=f"stop_{job_id}"):
        with Store(path) as store:
            stopped = stop_job(store, job_id)
        st.toast(f"Job {job_id} {stopped.status}: what it measured stays in the database")
        st.rerun()
    if job.error:
        st.error(f"{job.status}: {job.error}")
    if p.failures:
        st.warning("Failed candidates by reason: " + "; ".join(
            f"{n} {outcome} (e.g. {p.reasons.get(outcome, '')[:120]})" for outcome, n in
            sorted(p.failures.items(), key=lambda kv: -kv[1])))
    if not records:
        st.caption("No batch measured yet.")
        return
    series = job_series(records, names, spec.params.per_batch)
    left, right = st.columns(2)
    fig = go.Figure()
    for task, (xs, ys) in series.best_so_far.items():
        fig.add_scatter(x=xs, y=ys, mode="lines", name=task.split("/")[-1][:30], line_shape="hv")
    fig.update_layout(title="Best so far (GFLOPS) vs trials", height=320, margin=dict(l=10, r=10, t=40, b=10),
                      xaxis_title="trial", legend_orientation="h")
    left.plotly_chart(fig, width="stretch")
    ok = [pt for pt in series.points if pt[2] is not None]
    fig = go.Figure()
    fig.add_scatter(x=[pt[0] for pt in ok], y=[pt[2] for pt in ok], mode="markers", name="measured",
                    marker=dict(size=5, color="#2563eb"))
    bad = [pt for pt in series.points if pt[2] is None]
    if bad:
        fig.add_scatter(x=[pt[0] for pt in bad], y=[0] * len(bad), mode="markers", name="failed",
                        marker=dict(size=7, color="#dc2626", symbol="x"))
    fig.update_layout(title="Measured GFLOPS of every candidate", height=320, margin=dict(l=10, r=10, t=40, b=10),
                      xaxis_title="trial")
    right.plotly_chart(fig, width="stretch")
    left, right = st.columns(2)
    if series.predicted:
        fig = go.Figure()
        fig.add_scatter(x=[q[0] for q in series.predicted], y=[q[1] for q in series.predicted], mode="markers",
                        marker=dict(color=[q[2] for q in series.predicted], colorscale="Viridis", showscale=True,
                                    colorbar=dict(title="batch")), name="candidates")
        corr = [c for _, c in series.batch_corr if c is not None]
        fig.update_layout(title=f"Cost model: predicted score vs measured GFLOPS (last batch rank corr. "
                                f"{corr[-1]:.2f})" if corr else "Cost model: predicted score vs measured GFLOPS",
                          height=320, margin=dict(l=10, r=10, t=40, b=10), xaxis_title="predicted score",
                          yaxis_title="GFLOPS")
        left.plotly_chart(fig, width="stretch")
    fig = go.Figure()
    for task, (times, cum) in series.trials_over_time.items():
        fig.add_scatter(x=pd.to_datetime(times, format="ISO8601"), y=cum, mode="lines", name=task.split("/")[-1][:30],
                        stackgroup="trials")
    fig.update_layout(title="Trials given to each task over time", height=320, margin=dict(l=10, r=10, t=40, b=10),
                      legend_orientation="h")
    right.plotly_chart(fig, width="stretch")
    if series.failures:
        st.markdown(f"**Failed candidates ({len(series.failures)})**")
        st.dataframe(pd.DataFrame([{"record": r.id, "status": r.status, "error": r.error[:200],
                                    "steps": "; ".join(f"{s['primitive']}" for s in r.steps)[:200]}
                                   for r in series.failures]), hide_index=True, width="stretch")


def main() -> None:
    st.title("Search")
    path = db_path()
    st.caption(f"Database: `{path}` (change it on the Leaderboard page). Evolutionary search with MetaSchedule's "
               "XGBoost cost model; every batch lands in the leaderboard.")
    from app.target_picker import host_caption

    st.caption(host_caption())
    try:
        store = Store(path)
    except StoreError as err:
        st.error(str(err))
        st.stop()
    start_form(store)
    sketches_panel()
    live(path)


main()
