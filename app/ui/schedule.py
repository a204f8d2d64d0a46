"""Page "Schedule": apply TensorIR schedule primitives by hand, see code and loops change, measure."""

from __future__ import annotations

import json

import streamlit as st

from app import state
from app.cache import fused_kernels, machine_peaks
from app.components import code_with_marks, roofline_figure, side_by_side_html, table_html, tiling_figure
from app.precision_picker import precision_picker
from app.records import best_known, open_requested_record, save_measurement
from app.target_picker import target_picker
from explorer.errors import ExplorerError
from explorer.kernels import BUILTINS, Kernel, builtin_kernel, kernel_model, make_kernel, parse_spec
from explorer.workload import load_kernel
from explorer.models import ZOO
from explorer.schedule.choices import all_loops, block_choices, parse_factors, parse_value
from explorer.schedule.isa_check import isa_refusal, targets_with
from explorer.schedule.primitives import PRIMITIVES, Param
from explorer.schedule.session import ScheduleSession
from explorer.schedule.steps import ScheduleError, StepsFileError, Step, dump_steps, parse_steps, steps_from_json
from explorer.schedule.views import changed_lines, loop_nest, main_block, nest_text
from explorer.target import host_target
from search.decisions import schedule_name


def choose_kernel() -> Kernel | None:
    sb = st.sidebar
    sb.header("Kernel")
    handed = state.read(state.GRAPH_KERNEL)  # a kernel opened from the Graph & passes page
    if handed is not None and sb.toggle(_handed_label(handed), key=state.USE_GRAPH_KERNEL):
        return handed
    source = sb.radio("Source", ["Built-in", "From a model"], key=state.KERNEL_SOURCE, horizontal=True)
    try:
        if source == "Built-in":
            name = sb.selectbox("Operator", list(BUILTINS), key=state.KERNEL_NAME,
                                format_func=lambda n: f"{BUILTINS[n].title} ({n})")
            entry = BUILTINS[name]
            sb.caption(entry.summary)
            params = {}
            cols = sb.columns(3)
            for i, (p, default) in enumerate(entry.defaults.items()):
                params[p] = int(cols[i % 3].number_input(p, min_value=0 if p == "pad" else 1, value=default,
                                                         step=1, key=state.param_key(name, p)))
            return builtin_kernel(name, **params)
        model = sb.selectbox("Model", list(ZOO), key=state.KERNEL_MODEL, format_func=lambda n: ZOO[n].title)
        with sb:  # bf16: the kernels of the model as `schedx export --precision bf16` builds it
            precision = precision_picker(state.SCHEDULE_PRECISION, host_target(), what=model)
        kernels = fused_kernels(model, precision)
        pick = sb.selectbox("Fused kernel (most FLOPs first)", list(kernels), key=state.KERNEL_FUSED,
                            format_func=lambda n: n.split("/", 1)[1])
        sb.caption(f"{kernels[pick].info.flops / 1e6:.1f} MFLOP, called {kernels[pick].info.params['calls']} "
                   "time(s) per inference")
        return kernels[pick]
    except ExplorerError as err:
        sb.error(str(err))
        return None


def _handed_label(kernel: Kernel) -> str:
    """The sidebar toggle of a kernel another page handed over: a record's from the Leaderboard
    (named by its workload), else a fused kernel from the graph (by its spec)."""
    if kernel.info.source.startswith("record:"):
        return f"From the leaderboard: {kernel.info.title}"
    return f"From the graph: {kernel.info.spec}"


def session_for(kernel: Kernel) -> ScheduleSession:
    sessions = state.kept(state.SCHEDULE_SESSIONS, dict)
    if kernel.info.spec not in sessions:
        sessions[kernel.info.spec] = ScheduleSession(kernel.func)
    return sessions[kernel.info.spec]


def _param_widget(param: Param, session: ScheduleSession, prim: str, container):
    """One input for one argument, offering only what exists in the current schedule."""
    key = state.step_arg_key(prim, param.name)
    choices = block_choices(session.schedule)
    loops = all_loops(choices)
    labels = {lp.ref: lp.label for lp in loops}
    if param.kind == "block":
        names = [b.name for b in choices]
        return container.selectbox(param.name, names, key=key, help=param.help or None,
                                   format_func=lambda n: f"{n} [{next(b.iters for b in choices if b.name == n)}]")
    if param.kind == "loop":
        refs = list(labels)
        if any(p.kind == "factors" for p in PRIMITIVES[prim].params):  # a loop of one iteration has nothing to split
            refs = [lp.ref for lp in loops if lp.extent is None or lp.extent > 1]
            if not refs:
                container.caption("Every loop has one iteration: nothing to split.")
        return container.selectbox(param.name, refs, key=key, format_func=labels.get, help=param.help or None)
    if param.kind == "loops":
        return container.multiselect(param.name + " (in order)", list(labels), key=key, format_func=labels.get,
                                     help=param.help or None)
    if param.kind == "target":
        options = [b.name for b in choices] + list(labels)
        return container.selectbox(param.name, options, key=key, format_func=lambda r: labels.get(r, f"block {r}"))
    if param.kind == "factors":
        loop = next((lp for lp in loops if lp.ref == state.read(state.step_arg_key(prim, "loop"))), None)
        text = container.text_input(param.name, "None, 32", key=key, help="comma-separated; one may be None (inferred)"
                                    + (f". {loop.ref} has {loop.extent} iterations; exact factors: "
                                       f"{', '.join(map(str, _divisors(loop.extent))) or 'none (a prime)'}"
                                       if loop is not None and loop.extent else ""))
        try:
            return parse_factors(text)
        except ValueError:
            return text  # validation reports it with the step
    if param.kind == "int":
        return int(container.number_input(param.name, value=int(param.default or 0), step=1, key=key))
    if param.kind == "bool":
        return container.checkbox(param.name, value=bool(param.default), key=key)
    if param.kind == "choice":
        opts = list(param.choices)
        return container.selectbox(param.name, opts, index=opts.index(param.default) if param.default in opts else 0,
                                   key=key)
    if param.kind == "buffer":
        block = state.read(state.step_arg_key(prim, "block")) or (choices[0].name if choices else "")
        b = next((c for c in choices if c.name == block), None)
        opts = ([f"read:{i}" for i in range(len(b.reads))] + [f"write:{i}" for i in range(len(b.writes))]) if b else []
        names = {f"read:{i}": f"read:{i} ({n})" for i, n in enumerate(b.reads)} if b else {}
        names.update({f"write:{i}": f"write:{i} ({n})" for i, n in enumerate(b.writes)} if b else {})
        return container.selectbox(param.name, opts, key=key, format_func=lambda o: names.get(o, o))
    if param.kind == "value":
        return parse_value(container.text_input(param.name, "16", key=key))
    return container.text_input(param.name, key=key, help=param.help or None,
                                 placeholder="lambda i, j: (j, i)" if param.kind == "index_map" else "")


def _divisors(n: int) -> list[int]:
    """The factors that split ``n`` iterations evenly (neither 1 nor ``n``)."""
    return [d for d in range(2, n) if n % d == 0][:24]


def step_form(session: ScheduleSession) -> None:
    st.subheader("Next step")
    # the name in the picker, what it does under it (a summary of up to 1000 px was cut in it)
    prim = st.selectbox("Primitive", list(PRIMITIVES), key=state.PRIMITIVE)
    st.caption(PRIMITIVES[prim].summary)
    args = {}
    for param in PRIMITIVES[prim].params:
        args[param.name] = _param_widget(param, session, prim, st)
    if st.button("Apply", type="primary", key="apply_step"):
        try:
            session.apply(Step(prim, args))
            state.forget(state.STEP_ERROR)
        except (ScheduleError, StepsFileError) as err:
            state.write(state.STEP_ERROR, (str(err), getattr(err, "tvm_message", "")))
        st.rerun()
    error = state.read(state.STEP_ERROR)
    if not error and session.cursor and session.last_note:
        st.info(f"Applied. Note: {session.last_note}")
    if error:
        st.error(f"Not applied, the schedule is unchanged. {error[0]}")
        if error[1]:
            with st.expander("TVM's full message"):
                st.code(error[1], language=None)


def history(session: ScheduleSession, kernel: Kernel) -> None:
    st.subheader(f"Steps ({session.cursor} of {len(session.history)})")
    c1, c2, c3 = st.columns(3)
    if c1.button("Undo", disabled=session.cursor == 0, key="undo", width="stretch"):
        session.undo()
        st.rerun()
    if c2.button("Redo", disabled=session.cursor >= len(session.history), key="redo", width="stretch"):
        session.redo()
        st.rerun()
    if c3.button("Reset", disabled=not session.history, key="reset", width="stretch"):
        session.reset()
        st.rerun()
    lines = ["0. (unscheduled)"] + [f"{'' if i < session.cursor else '~~'}{i + 1}. `{s.describe()}`"
                                    f"{'' if i < session.cursor else '~~'}" for i, s in enumerate(session.history)]
    st.markdown("\n".join(f"- {ln}" for ln in lines))
    if session.history:
        state.write(state.JUMP, session.cursor)  # the slider always shows where the session is
        st.select_slider("Jump to step", list(range(len(session.history) + 1)), key=state.JUMP,
                         on_change=lambda: session.jump(state.read(state.JUMP)))
    with st.expander("Save or load the steps"):  # folded: the code below starts higher on the page
        d1, d2 = st.columns(2)
        d1.download_button("Steps (JSON)", json.dumps({"kernel": kernel.info.spec,
                                                       "steps": [s.to_dict() for s in session.steps]}, indent=2),
                           file_name=f"{kernel.info.name.replace('/', '_')}.steps.json", mime="application/json",
                           width="stretch")
        d2.download_button("Python (trace)", "\n".join(session.schedule.trace.as_python()),
                           file_name=f"{kernel.info.name.replace('/', '_')}_schedule.py", width="stretch")
        upload = st.file_uploader("Load steps (JSON)", type=["json"], key=f"steps_upload_{kernel.info.spec}")
        if upload is not None and st.button("Replace steps with the file", key="load_steps"):
            try:
                steps = parse_steps(upload.getvalue(), upload.name)  # bounded: size, steps, UTF-8, nesting
                trial = ScheduleSession(kernel.func)
                trial.apply_all(steps)
                state.kept(state.SCHEDULE_SESSIONS, dict)[kernel.info.spec] = trial
                state.forget(state.STEP_ERROR)
            except (ExplorerError, ValueError) as err:
                state.write(state.STEP_ERROR, (f"steps file refused: {err}", ""))
            st.rerun()


def _other_targets(session: ScheduleSession) -> tuple[str, ...]:
    """Targets worth comparing the code for: those with the instructions the schedule uses where this
    CPU lacks them (a record made on an AMX machine: its code, compile only), an older vector width
    here, another architecture."""
    host = host_target()
    return tuple(dict.fromkeys((*targets_with(session.mod, host), *host.neighbours)))


def views(session: ScheduleSession, target) -> None:
    from app.code_views import code_tabs

    func = session.mod["main"]
    code_tab, tir_tab, ll_tab, asm_tab, nest_tab, tiling_tab = st.tabs(
        ["TVMScript", "Lowered TIR", "LLVM IR", "Assembly", "Loop nest", "Tiling"])
    if target is not None:
        code_tabs(session, target, (tir_tab, ll_tab, asm_tab))
    with code_tab:
        script = session.mod.script()
        before = session.schedule_at(session.cursor - 1).mod.script() if session.cursor else script
        marks = changed_lines(before, script) if session.cursor else []
        st.caption(f"{len(marks)} lines changed by the last step" if session.cursor else "Unscheduled kernel")
        if session.cursor and st.toggle("Before and after the last step, side by side", key="script_sbs"):
            st.html(side_by_side_html(before, script))
        else:
            st.html(code_with_marks(script, marks))
    with nest_tab:
        st.code(nest_text(loop_nest(func)), language=None)
    with tiling_tab:
        names = [b.name for b in block_choices(session.schedule)]
        main = main_block(func)
        block = st.selectbox("Block", names, index=names.index(main) if main in names else 0, key="tiling_block")
        st.plotly_chart(tiling_figure(func, block), width="stretch")


def _known_percent(gflops: float, peak: float | None, kernel) -> float | None:
    """A record's GFLOPS as a % of the peak, blank above 100 where the kernel's FLOPs are largely element-wise work
    beside its products (:mod:`explorer.workload.product_flops`: such a count runs beside the FMA units)."""
    if not peak:
        return None
    percent = 100 * gflops / peak
    if percent > 100:
        import tvm

        from explorer.workload.product_flops import beside_products

        if beside_products(tvm.IRModule({"main": kernel.func})):
            return None
    return round(percent, 1)


def measure_panel(session: ScheduleSession, kernel: Kernel, target) -> None:
    from explorer.measure import measure

    st.subheader("Build & measure")
    why = "choose a valid target" if target is None else target.why_not_here()
    if why:
        st.caption(f"Measuring needs a target this machine runs ({why}); the code views still show the target's code.")
    refused = "" if why else isa_refusal(session.mod, target)  # building would abort LLVM, and this page with it
    if refused:
        st.error(f"Cannot build or measure this schedule here: {refused}")
    store = state.kept(state.MEASUREMENTS, dict).setdefault(kernel.info.spec, {"history": []})
    if st.button("Build & measure", type="primary", key="measure", disabled=bool(why or refused)):
        peaks = machine_peaks()
        with st.spinner(f"Building for {target.label}, verifying and timing in a separate process..."):
            try:
                if store.get("naive_target") != target.key:
                    store["naive"], store["naive_target"] = measure(kernel, peaks=peaks, target=target), target.key
                    save_measurement(kernel, None, store["naive"])
                result = measure(kernel, session.mod, peaks=peaks, target=target)
            except ExplorerError as err:  # e.g. too large for the free memory: refused before anything ran
                st.error(str(err))
                return
        store["history"].append((dump_steps(session.steps), result))
        store["last"] = result
        record_id = save_measurement(kernel, session, result)
        if record_id is not None:
            st.toast(f"Saved to the leaderboard as record {record_id}")
    result = store.get("last")
    if result is None:
        st.caption(f"{kernel.info.flops / 1e9:.3f} GFLOP per run; results are verified against "
                   f"{'numpy' if kernel.reference else 'the unscheduled kernel'} before they are timed.")
        return
    st.caption(f"Last measurement built for **{_target_label(result.target)}**")
    if not result.ok:
        st.error(f"{result.status}: {result.error}")
    else:
        m = st.columns(4)
        m[0].metric("median", f"{result.median_s * 1e3:.3f} ms", help=f"{result.number} runs x {len(result.latencies)}")
        m[1].metric("GFLOPS", f"{result.gflops:.1f}")
        fam = "" if result.peak_family == "fp32" else f"{result.peak_family} "  # its instruction family's peak
        unit = "GOPS" if result.peak_family == "int8" else "GFLOPS"
        m[2].metric(f"% of {fam}peak", f"{result.percent_of_peak:.1f}%" if result.percent_of_peak else "-",
                    help=result.peak_note or f"calibrated {fam}peak {result.peak_gflops or 0:.0f} {unit} here")
        m[3].metric("verified", "yes" if result.verified else "no", help=f"max error {result.max_rel_error:.1e}")
    rows = []
    naive = store.get("naive")
    ok_hist = [r for _, r in store["history"] if r.ok]
    best = max(ok_hist, key=lambda r: r.gflops) if ok_hist else None
    for label, r in (("current", result), ("naive", naive), ("best this session", best)):
        if r is not None:
            rows.append({"schedule": label, "status": r.status, "median ms": round(r.median_s * 1e3, 3) if r.ok else None,
                         "GFLOPS": round(r.gflops, 2) if r.ok else None,
                         "% peak": round(r.percent_of_peak, 1) if r.ok else None})
    known = best_known(kernel, result.target)
    if known is not None and known.gflops:
        rows.append({"schedule": f"best known (record {known.id}, {schedule_name(known)})", "status": known.status,
                     "median ms": round(known.median_s * 1e3, 3), "GFLOPS": round(known.gflops, 2),
                     "% peak": _known_percent(known.gflops, result.peak_gflops, kernel)})
    table, chart = st.columns([1, 1])
    # a few rows: a plain table, every column whole at any width (a grid hid "% peak" at 1600 px)
    table.html(table_html(rows))
    if result.ok and result.peak_gbps:
        chart.plotly_chart(roofline_figure(result, naive), width="stretch")


def _target_label(key: str) -> str:
    """A measurement's target in words (its label), not the canonical JSON records carry."""
    from explorer.target import TargetError, parse_target
    from store.records import target_short

    try:
        return parse_target(key).label
    except TargetError:
        return target_short(key)


def open_record_into_session() -> None:
    """A record sent by the Leaderboard: select its kernel in the sidebar and load its steps."""
    opened = open_requested_record()
    if opened is None:
        return
    spec, steps = opened
    try:
        model = kernel_model(spec)
        if model is not None:
            state.write(state.KERNEL_SOURCE, "From a model")
            state.write(state.KERNEL_MODEL, model)
            state.write(state.KERNEL_FUSED, spec)
            kernel = fused_kernels(model)[spec]
        elif not spec.startswith("record:"):
            name, params = parse_spec(spec)
            state.write(state.KERNEL_SOURCE, "Built-in")
            state.write(state.KERNEL_NAME, name)
            for p, v in params.items():
                if p != "dtype":
                    state.write(state.param_key(name, p), v)
            kernel = load_kernel(spec)
        else:  # a search task's or an imported record's kernel: its own module, handed to the sidebar
            name, func = state.kept(state.RECORD_KERNELS, dict)[spec]
            kernel = make_kernel(func, name=name, title=f"{name} ({spec})", source=spec, spec=spec, params={})
            state.write(state.GRAPH_KERNEL, kernel)
            state.write(state.USE_GRAPH_KERNEL, True)
        session = ScheduleSession(kernel.func)
        session.apply_all(steps_from_json(steps))
        state.kept(state.SCHEDULE_SESSIONS, dict)[kernel.info.spec] = session
        st.success(f"Opened the record's {len(steps)} steps on {kernel.info.spec}.")
    except (ExplorerError, KeyError) as err:
        st.error(f"Could not open the record: {err}")


def main() -> None:
    st.title("Schedule")
    open_record_into_session()
    kernel = choose_kernel()
    if kernel is None:
        st.info("Pick a kernel in the sidebar.")
        st.stop()
    session = session_for(kernel)
    info = kernel.info
    st.caption(f"**{info.spec}** · {info.flops / 1e9:.3f} GFLOP · arithmetic intensity "
               f"{info.arithmetic_intensity:.1f} FLOP/byte · " + ", ".join(
                   f"{b.name}{' (out)' if b.is_output else ''} {'x'.join(map(str, b.shape))} {b.dtype}"
                   for b in info.buffers))
    # the step form and the steps side by side, then the code over the whole width (the source and
    # assembly panes side by side were 300 px each beside the form), then the measurements
    form, steps = st.columns([1, 1.3], gap="large")
    with form:
        step_form(session)
    with steps:
        history(session, kernel)
    target = target_picker("schedule_target", cpu_only=True, choices=_other_targets(session))
    views(session, target)
    measure_panel(session, kernel, target)


main()
