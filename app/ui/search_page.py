"""Page "Search": sketches, then evolutionary search jobs (MetaSchedule), watched live."""

from __future__ import annotations

import streamlit as st

from app import state
from app.components import table_html
from app.layout import sized_columns
from app.precision_picker import precision_picker
from app.records import db_path
from app.target_picker import target_picker
from explorer.errors import ExplorerError
from explorer.kernels import BUILTINS
from explorer.models import ZOO
from store import Store, StoreError

EXAMPLES = ["matmul:M=256,N=256,K=256", "conv2d_nchw", "dense_bias_relu:M=32", "small_cnn", "resnet18"]


def start_form(store: Store) -> None:
    from search.job_spec import JobSpec
    from search.entry import prepare, start
    from search.params import UNLIMITED_TRIALS, SearchParams

    target = target_picker("search_target", cpu_only=True)
    precision = precision_picker(state.SEARCH_PRECISION, target) if target is not None else "fp32"
    with st.form("start_search"):
        st.markdown("**Start a search** (it runs as its own process: close the tab, it goes on)")
        c1, c2, c3 = st.columns([4, 1, 1])
        workload = c1.text_input("Workload", "matmul:M=256,N=256,K=256", key="search_workload",
                                 help="A kernel spec (" + ", ".join(list(BUILTINS)[:4]) + ", ... with :P=V), "
                                      "a model's fused kernel (resnet18/fused_transpose_conv2d_add_relu) or a whole model ("
                                      + ", ".join(ZOO) + ")")
        trials = c2.number_input("Trials", 0, 100000, 64, key="search_trials",
                                 help="0: no trial limit (the minutes decide)")
        minutes = c3.number_input("Minutes", 0.0, 24 * 60.0, 0.0, step=1.0, key="search_minutes",
                                  help="A time budget: the search stops after the batch in progress once it is "
                                       "spent (schedx tune --minutes); 0: none")
        shapes = st.text_input("Shapes (a model's symbolic dims)", "", key="search_shapes",
                               placeholder="input:1x3x224x224 or batch=1")
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
            if not trials and not minutes:
                st.error("Give the search a budget: trials, minutes or both.")
                return
            try:
                params = SearchParams(trials=int(trials) or UNLIMITED_TRIALS, minutes=float(minutes), per_batch=int(per_batch), population=int(population),
                                      generations=int(generations), mutate_prob=float(mutate), eps_greedy=float(eps),
                                      seed=int(seed))
                spec = JobSpec(workload=workload.strip(), target=target.spec, params=params,
                               shapes=shapes.strip() or None, rpc_tracker=tracker.strip() or None,
                               rpc_key=key.strip() or None, precision=precision)
                with st.spinner("Checking the workload and target…"):
                    valid = prepare(spec)  # the same checks as the CLI: a bad spec never becomes a job
                job = start(store, valid)
                state.write(state.SEARCH_JOB, job.id)
                state.write(state.JOB_PICK, job.id)  # the picker follows the job just started
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
                state.write(state.SKETCHES, (spec, generate_sketches(kernel, host_target())))
            except ExplorerError as err:
                st.error(str(err))
        found = state.read(state.SKETCHES)
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
                state.write(state.OPENED, (kernel.info.spec, [s.to_dict() for s in steps]))
                st.switch_page("ui/schedule.py")


def _job_label(j) -> str:
    """What never changes about a job (its status and trials are live in the header below: a
    picker's label is not redrawn while it is closed, so it would show them stale)."""
    from search.job_spec import JobSpec

    spec = JobSpec.from_dict(j.params)
    at = f" · {spec.precision}" if spec.precision != "fp32" else ""
    return f"#{j.id} · {spec.workload}{at} · started {j.created[:16].replace('T', ' ')} UTC"


def _read(path: str):
    """The jobs (dead processes marked failed), the chosen one, its records and the task names."""
    from search.jobs import refresh

    with Store(path) as store:
        jobs = refresh(store)
        if not jobs:
            return jobs, None, [], {}
        ids = [j.id for j in reversed(jobs)]
        chosen = state.read(state.SEARCH_JOB)
        if state.read(state.JOB_PICK) not in ids:
            state.forget(state.JOB_PICK)
        job_id = st.selectbox("Job", ids, index=ids.index(chosen) if chosen in ids else 0,
                              format_func=lambda i: _job_label(next(j for j in jobs if j.id == i)), key=state.JOB_PICK)
        state.write(state.SEARCH_JOB, job_id)
        job = next(j for j in jobs if j.id == job_id)  # the same read as the picker's label
        return jobs, job, store.records(job_id=job_id, order="id"), {w.key: w.name for w in store.workloads()}


def _header(path: str, job, spec, progress) -> None:
    from search.jobs import job_elapsed_s, job_eta_s, stop_job

    running = job.status == "running"
    st.caption(f"{spec.workload} for `{spec.target}`" + (f" (shapes {spec.shapes})" if spec.shapes else "")
               + (f" at precision **{spec.precision}** (the kernels an export at {spec.precision} builds)"
                  if spec.precision != "fp32" else "")
               + (f", measured through {spec.rpc_tracker} ({spec.rpc_key})" if spec.rpc_tracker else ""))
    c = st.columns(5)
    c[0].metric("status", job.status)
    c[1].metric("trials", spec.params.budget(progress.trials, progress.total))
    c[2].metric("best GFLOPS", f"{progress.best_gflops:.1f}" if progress.best_gflops else "-")
    elapsed, eta = job_elapsed_s(job), job_eta_s(job, progress)
    c[3].metric("elapsed", "-" if elapsed is None else f"{elapsed:.0f} s")
    c[4].metric("ETA", "-" if eta is None else f"{eta:.0f} s")
    if running and progress.phase == "confirm":
        st.progress(progress.confirm_done / max(1, progress.confirm_total),
                    text=f"Confirmation round: {progress.confirm_done} of {progress.confirm_total} tasks' fastest "
                         "schedules timed again, in turns with the default (cold)")
    if running and st.button("Stop this job", key=f"stop_{job.id}"):
        with Store(path) as store:
            stopped = stop_job(store, job.id)
        st.toast(f"Job {job.id} {stopped.status}: what it measured stays in the database")
        st.rerun()
    if job.error:
        st.error(f"{job.status}: {job.error}")
    if progress.failures:
        st.warning("Failed candidates by reason: " + "; ".join(
            f"{n} {outcome} (e.g. {progress.reasons.get(outcome, '')[:120]})" for outcome, n in
            sorted(progress.failures.items(), key=lambda kv: -kv[1])))


def _charts(series) -> str | None:
    """The job's charts; returns the task they show (None: all tasks)."""
    from app import charts

    tasks = list(series.task_points)
    one = tasks[0] if len(tasks) == 1 else None
    if one is None:
        picked = st.selectbox("Task", ["all tasks"] + tasks, key="search_task_pick",
                              format_func=lambda t: t if t == "all tasks" else t.split("/")[-1])
        one = None if picked == "all tasks" else picked
    left, right = st.columns(2)
    left.plotly_chart(charts.history_figure(series, one), width="stretch")
    if len(tasks) == 1:  # the left chart has every candidate already: the right one shows the pace
        right.plotly_chart(charts.trials_per_task_figure(series), width="stretch")
    else:
        right.plotly_chart(charts.candidates_figure(series) if one is None else charts.task_bests_figure(series),
                           width="stretch")
    left, right = st.columns(2)
    if series.predicted:
        left.plotly_chart(charts.cost_model_figure(series), width="stretch")
    if len(tasks) > 1:
        right.plotly_chart(charts.trials_per_task_figure(series), width="stretch")
        rows = series.task_rows()
        st.dataframe(rows, hide_index=True, width="stretch", column_config=sized_columns(rows, {
            "best GFLOPS": st.column_config.NumberColumn(format="%.1f")}))
    if series.failures:
        st.markdown(f"**Failed candidates ({len(series.failures)})**: " + ", ".join(
            f"{n} {status}" for status, n in series.failure_counts.items()))
        # plain HTML: a reason is a sentence, and wraps there (a grid cut it at its column's width)
        st.html(table_html([{"record": r.id, "status": r.status, "error": r.error[:300]} for r in series.failures]))
    return one


def _trials(records, names: dict, task: str | None) -> None:
    """The decisions of the best schedules (of ``task``, else the task with the most trials)
    beside the default's, and the trial table."""
    from app.components import decisions_html
    from search.charts import trial_rows
    from search.decisions import decision_view

    if task is None:
        counts: dict = {}
        for r in records:
            counts[r.workload_key] = counts.get(r.workload_key, 0) + 1
        key = max(counts, key=counts.get) if counts else None
    else:
        key = next((k for k, n in names.items() if n == task), None)
    mine = [r for r in records if r.workload_key == key]
    view = decision_view(mine, k=4)
    if view.schedules:
        st.markdown(f"**Decisions of the fastest schedules** of {names.get(key, key).split('/')[-1]}: "
                    + ("the default first (what an export uses without a record), then the fastest others; a "
                       "choice that differs from the default's is highlighted. " if view.has_default else
                       "the default schedule was not timed, so there is nothing to read them against. ")
                    + "Tiles are a loop's factors, outer to inner (loop N: the N-th loop of the kernel's main "
                      "block; * the rest of the loop); - a choice the schedule does not make.")
        st.html(decisions_html(view))
    rows = trial_rows(records, names)
    with st.expander(f"Every trial of this job ({len(records)})"):
        st.dataframe(rows, hide_index=True, width="stretch", column_config=sized_columns(rows, {
            "ms": st.column_config.NumberColumn(format="%.4f"),
            "GFLOPS": st.column_config.NumberColumn(format="%.1f")}))


def _history(jobs) -> None:
    from search.job_spec import JobProgress, JobSpec
    from store.records import target_short

    with st.expander(f"All jobs ({len(jobs)})"):
        rows = []
        for j in reversed(jobs):
            p, spec = JobProgress.from_dict(j.progress), JobSpec.from_dict(j.params)
            rows.append({"job": j.id, "status": j.status, "workload": spec.workload,
                         "target": target_short(spec.target), "trials": p.trials,
                         "best GFLOPS": None if p.best_gflops is None else round(p.best_gflops, 1),
                         "failed": p.failed, "started": j.created[:16].replace("T", " "), "error": j.error[:80]})
        st.dataframe(rows, hide_index=True, width="stretch", column_config=sized_columns(rows, {
            "best GFLOPS": st.column_config.NumberColumn(format="%.1f")}))


@st.fragment(run_every=2.0)
def live(path: str) -> None:
    """Jobs and the chosen job's progress, re-read from the database every 2 s."""
    from search.charts import job_series
    from search.job_spec import JobProgress, JobSpec

    try:
        jobs, job, records, names = _read(path)
    except StoreError as err:
        st.error(str(err))
        return
    if job is None:
        st.info("No search yet. Start one above, or from a shell: `schedx tune matmul --trials 64`.")
        return
    spec = JobSpec.from_dict(job.params)
    _header(path, job, spec, JobProgress.from_dict(job.progress))
    if records:
        shown = _charts(job_series(records, names, spec.params.per_batch))
        _trials(records, names, shown)
    else:
        st.caption("No batch measured yet.")
    _history(jobs)


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
