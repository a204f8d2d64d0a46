"""One small draw function per figure, fed by plain data computed in the rooms below (the sweep,
the profile, the search's series): compute there, test there, draw here."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from search.charts import batch_groups, failed

_MARGIN = dict(l=10, r=10, t=50, b=10)
TITLE_CHARS = 36  # a title's line: under 300 px at 14 px, what half of the page has at 1100 px, less the toolbar
_TITLE_PX, _LINE_PX = 14, 20


def framed(fig: go.Figure, title: str, *, height: int, **layout) -> go.Figure:
    """``fig`` with ``title`` (wrapped to lines of :data:`TITLE_CHARS`, the top margin sized to
    them) and Plotly's toolbar upright along the right edge, in a margin of its own: across the
    top it ran over the titles (issue 52). A legend laid flat (``legend_orientation="h"``) goes
    under the plot, in a bottom margin sized to its entries (two a row): at -0.1 it covered the
    axis and the plot."""
    import math
    import textwrap

    lines = textwrap.wrap(title, TITLE_CHARS) or [""]
    # the title is centred in the top margin (Plotly misplaces a title of several lines anchored
    # at the top or the bottom: measured, it ran off the figure or into the plot)
    # (it puts the first line at the margin's middle and the others under it: measured in chromium)
    top = max(24 + _LINE_PX * len(lines), 38 * len(lines) - 10)
    margin = {**_MARGIN, "t": top, "r": 44, **layout.pop("margin", {})}
    extra = top - _MARGIN["t"]
    if layout.pop("legend_orientation", None) == "h":
        entries = sum(1 for t in fig.data if t.showlegend is not False and t.name) + bool(layout.get("legend"))
        rows = math.ceil(entries / 2)
        margin["b"] = 52 + 20 * rows
        extra += 20 * rows
        layout["legend"] = {"orientation": "h", "x": 0, "xanchor": "left", "y": 0, "yref": "container",
                            "yanchor": "bottom", **{k: v for k, v in layout.get("legend", {}).items() if k != "y"}}
    fig.update_layout(title=dict(text="<br>".join(lines), font=dict(size=_TITLE_PX), x=0, xref="container",
                                 xanchor="left", yref="container", pad=dict(l=10)),
                      height=height + extra, margin=margin, modebar=dict(orientation="v"), **layout)
    return fig


def sweep_figure(sweep) -> go.Figure:
    """Latency and throughput against batch size, TVM beside ONNX Runtime (an export.sweep.Sweep)."""
    pts = sweep.points
    batches = [p.batch for p in pts]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("latency (ms)", "throughput (samples/s)"))
    for name, attr, color in (("TVM", "tvm", "#2563eb"), ("ONNX Runtime", "ort", "#f97316")):
        lat = [getattr(p, f"{attr}_s") for p in pts]
        if not any(v is not None for v in lat):
            continue
        fig.add_scatter(x=batches, y=[v * 1e3 if v else None for v in lat], name=name, mode="lines+markers",
                        line=dict(color=color), row=1, col=1)
        fig.add_scatter(x=batches, y=[getattr(p, f"{attr}_throughput") for p in pts], name=name, showlegend=False,
                        mode="lines+markers", line=dict(color=color), row=1, col=2)
    fig.update_xaxes(title_text="batch", type="log", tickvals=batches)
    return framed(fig, f"{sweep.workload} on {sweep.target}, {sweep.threads} thread(s)", height=380,
                  legend_orientation="h")


def profile_figure(profile, top: int = 15) -> go.Figure:
    """Time per fused kernel (a horizontal bar each, coloured by where its schedule came from)."""
    rows = list(reversed(profile.top(top)))
    colors = {"record": "#16a34a", "default": "#9ca3af", "failed": "#dc2626"}
    cells = [k.cells(profile.kernels_s) for k in rows]
    # a kernel below the instrument's resolution: its bar is the most it took, drawn faint
    fig = go.Figure(go.Bar(
        y=[k.task.split("/")[-1] for k in rows], x=[k.upper_s * 1e3 for k in rows], orientation="h",
        marker_color=[colors.get(k.schedule, "#9ca3af") for k in rows],
        marker_opacity=[1.0 if k.resolved else 0.35 for k in rows],
        customdata=[[c["ms"], c["share"], c["GFLOPS"], k.calls, k.schedule] for k, c in zip(rows, cells)],
        hovertemplate="%{y}<br>%{customdata[0]} ms (%{customdata[1]})<br>%{customdata[2]} GFLOPS, "
                      "x%{customdata[3]}<br>schedule: %{customdata[4]}<extra></extra>"))
    return framed(fig, f"time per kernel (ms per run): {profile.workload} on {profile.target}",
                  height=max(300, 24 * len(rows) + 80), xaxis_title="ms")


def ort_nodes_figure(profile, top: int = 15) -> go.Figure:
    """ONNX Runtime's slowest nodes, for comparison with :func:`profile_figure`."""
    rows = list(reversed(profile.ort[:top]))
    fig = go.Figure(go.Bar(y=[f"{n.node} ({n.op_type})" for n in rows], x=[n.seconds * 1e3 for n in rows],
                           orientation="h", marker_color="#f97316"))
    return framed(fig, "ONNX Runtime: time per node (ms per run)", height=max(300, 24 * len(rows) + 80),
                  xaxis_title="ms")




def history_figure(series, task: str | None = None) -> go.Figure:
    """Optuna's optimization history: every candidate by trial and the best so far. ``task``:
    that task's candidates by its own trial number; None: every task's best so far by trial."""
    fig = go.Figure()
    if task is not None:
        pts = series.task_points.get(task, [])
        ok = [(n, g) for n, g, _ in pts if g is not None]
        fig.add_scatter(x=[n for n, _ in ok], y=[g for _, g in ok], mode="markers", name="candidate",
                        marker=dict(size=6, color="#2563eb", opacity=0.7))
        bad = [n for n, _, status in pts if failed(status)]
        if bad:
            fig.add_scatter(x=bad, y=[0] * len(bad), mode="markers", name="failed",
                            marker=dict(size=7, color="#dc2626", symbol="x"))
        best, xs, ys = 0.0, [], []
        for n, g in ok:
            best = max(best, g)
            xs.append(n)
            ys.append(best)
        fig.add_scatter(x=xs, y=ys, mode="lines", name="best so far", line_shape="hv", line=dict(color="#16a34a"))
        title = f"{task.split('/')[-1]}: GFLOPS by trial"
    else:
        for name, (xs, ys) in series.best_so_far.items():
            fig.add_scatter(x=xs, y=ys, mode="lines", name=name.split("/")[-1][:30], line_shape="hv")
        title = "best so far (GFLOPS) by trial, per task"
    return framed(fig, title, height=340, xaxis_title="trial", yaxis_title="GFLOPS", legend_orientation="h")


def candidates_figure(series) -> go.Figure:
    """Measured GFLOPS of every candidate of the job, failures at 0."""
    fig = go.Figure()
    ok = [pt for pt in series.points if pt[2] is not None]
    fig.add_scatter(x=[pt[0] for pt in ok], y=[pt[2] for pt in ok], mode="markers", name="measured",
                    marker=dict(size=5, color="#2563eb"))
    bad = [pt for pt in series.points if failed(pt[3])]
    if bad:
        fig.add_scatter(x=[pt[0] for pt in bad], y=[0] * len(bad), mode="markers", name="failed",
                        marker=dict(size=7, color="#dc2626", symbol="x"))
    return framed(fig, "measured GFLOPS of every candidate", height=340, xaxis_title="trial")


def cost_model_figure(series) -> go.Figure:
    """The cost model's predicted score against the measured GFLOPS, a colour per batch (or per
    group of batches: :func:`search.charts.batch_groups`), as categories in the legend."""
    import plotly.colors

    fig = go.Figure()
    palette = plotly.colors.qualitative.Safe
    for n, (label, points) in enumerate(batch_groups(series.predicted)):
        fig.add_scatter(x=[p for p, _ in points], y=[m for _, m in points], mode="markers", name=label,
                        marker=dict(size=7, color=palette[n % len(palette)]))
    corr = [c for _, c in series.batch_corr if c is not None]
    title = "cost model: predicted score vs measured GFLOPS"
    return framed(fig, f"{title} (last batch rank corr. {corr[-1]:.2f})" if corr else title, height=340,
                  xaxis_title="predicted score", yaxis_title="GFLOPS", legend_orientation="h",
                  legend={"title": {"text": "batch"}})


def trials_per_task_figure(series) -> go.Figure:
    """Trials the task scheduler gave each task over time (stacked)."""
    import pandas as pd

    fig = go.Figure()
    for task, (times, cum) in series.trials_over_time.items():
        fig.add_scatter(x=pd.to_datetime(times, format="ISO8601"), y=cum, mode="lines", name=task.split("/")[-1][:30],
                        stackgroup="trials")
    title = "trials over time" if len(series.trials_over_time) == 1 else "trials given to each task over time"
    return framed(fig, title, height=340, legend_orientation="h")


def task_bests_figure(series) -> go.Figure:
    """Best GFLOPS per task (bars) with the trials each got (hover)."""
    rows = [r for r in series.task_rows() if r["best GFLOPS"] is not None]
    fig = go.Figure(go.Bar(x=[r["task"].split("/")[-1][:30] for r in rows], y=[r["best GFLOPS"] for r in rows],
                           customdata=[[r["trials"], r["failed"]] for r in rows], marker_color="#2563eb",
                           hovertemplate="%{x}<br>%{y:.1f} GFLOPS<br>%{customdata[0]} trials, "
                                         "%{customdata[1]} failed<extra></extra>"))
    return framed(fig, "best GFLOPS per task", height=340)


__all__ = ["candidates_figure", "framed", "cost_model_figure", "history_figure", "ort_nodes_figure", "profile_figure",
           "sweep_figure", "task_bests_figure", "trials_per_task_figure"]
