"""One small draw function per figure, fed by plain data computed in the rooms below (the sweep,
the profile, the search's series): compute there, test there, draw here."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from search.charts import failed

_MARGIN = dict(l=10, r=10, t=50, b=10)


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
    fig.update_layout(title=f"{sweep.workload} on {sweep.target}, {sweep.threads} thread(s)", height=380,
                      margin=_MARGIN, legend_orientation="h")
    return fig


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
    fig.update_layout(title=f"time per kernel (ms per run): {profile.workload} on {profile.target}",
                      height=max(300, 24 * len(rows) + 80), margin=_MARGIN, xaxis_title="ms")
    return fig


def ort_nodes_figure(profile, top: int = 15) -> go.Figure:
    """ONNX Runtime's slowest nodes, for comparison with :func:`profile_figure`."""
    rows = list(reversed(profile.ort[:top]))
    fig = go.Figure(go.Bar(y=[f"{n.node} ({n.op_type})" for n in rows], x=[n.seconds * 1e3 for n in rows],
                           orientation="h", marker_color="#f97316"))
    fig.update_layout(title="ONNX Runtime: time per node (ms per run)", height=max(300, 24 * len(rows) + 80),
                      margin=_MARGIN, xaxis_title="ms")
    return fig




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
    fig.update_layout(title=title, height=340, margin=_MARGIN, xaxis_title="trial", yaxis_title="GFLOPS",
                      legend_orientation="h")
    return fig


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
    fig.update_layout(title="measured GFLOPS of every candidate", height=340, margin=_MARGIN, xaxis_title="trial")
    return fig


def cost_model_figure(series) -> go.Figure:
    """The cost model's predicted score against the measured GFLOPS, coloured by batch."""
    fig = go.Figure()
    fig.add_scatter(x=[q[0] for q in series.predicted], y=[q[1] for q in series.predicted], mode="markers",
                    marker=dict(color=[q[2] for q in series.predicted], colorscale="Viridis", showscale=True,
                                colorbar=dict(title="batch")), name="candidates")
    corr = [c for _, c in series.batch_corr if c is not None]
    title = "cost model: predicted score vs measured GFLOPS"
    fig.update_layout(title=f"{title} (last batch rank corr. {corr[-1]:.2f})" if corr else title, height=340,
                      margin=_MARGIN, xaxis_title="predicted score", yaxis_title="GFLOPS")
    return fig


def trials_per_task_figure(series) -> go.Figure:
    """Trials the task scheduler gave each task over time (stacked)."""
    import pandas as pd

    fig = go.Figure()
    for task, (times, cum) in series.trials_over_time.items():
        fig.add_scatter(x=pd.to_datetime(times, format="ISO8601"), y=cum, mode="lines", name=task.split("/")[-1][:30],
                        stackgroup="trials")
    title = "trials over time" if len(series.trials_over_time) == 1 else "trials given to each task over time"
    fig.update_layout(title=title, height=340, margin=_MARGIN, legend_orientation="h")
    return fig


def task_bests_figure(series) -> go.Figure:
    """Best GFLOPS per task (bars) with the trials each got (hover)."""
    rows = [r for r in series.task_rows() if r["best GFLOPS"] is not None]
    fig = go.Figure(go.Bar(x=[r["task"].split("/")[-1][:30] for r in rows], y=[r["best GFLOPS"] for r in rows],
                           customdata=[[r["trials"], r["failed"]] for r in rows], marker_color="#2563eb",
                           hovertemplate="%{x}<br>%{y:.1f} GFLOPS<br>%{customdata[0]} trials, "
                                         "%{customdata[1]} failed<extra></extra>"))
    fig.update_layout(title="best GFLOPS per task", height=340, margin=_MARGIN)
    return fig


__all__ = ["candidates_figure", "cost_model_figure", "history_figure", "ort_nodes_figure", "profile_figure",
           "sweep_figure", "task_bests_figure", "trials_per_task_figure"]
