"""One small draw function per figure, fed by plain data computed in the rooms below (the sweep,
the profile, the search's series): compute there, test there, draw here."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

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
    fig = go.Figure(go.Bar(
        y=[k.task.split("/")[-1] for k in rows], x=[k.seconds * 1e3 for k in rows], orientation="h",
        marker_color=[colors.get(k.schedule, "#9ca3af") for k in rows],
        customdata=[[k.share * 100, k.gflops or 0, k.calls, k.schedule] for k in rows],
        hovertemplate="%{y}<br>%{x:.3f} ms (%{customdata[0]:.1f}%)<br>%{customdata[1]:.1f} GFLOPS, "
                      "x%{customdata[2]}<br>schedule: %{customdata[3]}<extra></extra>"))
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


__all__ = ["ort_nodes_figure", "profile_figure", "sweep_figure"]
