"""The Leaderboard's three charts as Vega-Lite specifications (built with Altair).

Vega-Lite rather than Plotly here, measured: in a new browser tab Streamlit's Plotly bundle
(4.7 MB of JavaScript) took 1.3-1.9 s to compile before a chart appeared, on every tab, while a
Vega-Lite chart drew 0.3-0.4 s after the page's text. The Leaderboard is the page users open in
tabs to compare, so it draws with the lighter library. Data in: the plain rows of ``store.plots``.
"""

from __future__ import annotations

import altair as alt

from store.plots import BESIDE_PRODUCTS, PRODUCTS

SOURCE_COLOURS = {"manual": "#2563eb", "search": "#f97316", "import": "#64748b", "default": "#a3a3a3"}


def _source_colour(title: str = "source") -> alt.Color:
    return alt.Color("source:N", title=title,
                      scale=alt.Scale(domain=list(SOURCE_COLOURS), range=list(SOURCE_COLOURS.values())))


def gflops_chart(rows: list[dict]) -> alt.Chart:
    """Best GFLOPS per workload, one bar per source side by side; the record id in the tooltip."""
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("workload:N", title=None, axis=alt.Axis(labelAngle=-30, labelLimit=260)),
        xOffset=alt.XOffset("source:N", sort=list(SOURCE_COLOURS)),
        y=alt.Y("gflops:Q", title="GFLOPS (best)"),
        color=_source_colour(),
        tooltip=[alt.Tooltip("workload:N"), alt.Tooltip("gflops:Q", title="GFLOPS", format=".2f"),
                 alt.Tooltip("source:N"), alt.Tooltip("id:Q", title="record"),
                 alt.Tooltip("target:N"), alt.Tooltip("hardware:N")],
    ).properties(height=380)


def history_chart(series: dict) -> alt.LayerChart:
    """One workload's measurements in time order (points by source) under the best-so-far step line."""
    label = "GFLOPS" if series["metric"] == "gflops" else "median ms"
    time = alt.X("created:T", title="measured")
    line = alt.Chart(alt.Data(values=series["best_so_far"])).mark_line(
        interpolate="step-after", color="#16a34a").encode(x=time, y=alt.Y("value:Q", title=label))
    points = alt.Chart(alt.Data(values=series["points"])).mark_point(filled=True, size=45).encode(
        x=time, y=alt.Y("value:Q", title=label), color=_source_colour(),
        tooltip=[alt.Tooltip("value:Q", title=label, format=".3f"), alt.Tooltip("source:N"),
                 alt.Tooltip("id:Q", title="record"), alt.Tooltip("created:T", format="%Y-%m-%d %H:%M:%S")])
    return alt.layer(line, points).properties(height=360)


def roofline_chart(data: dict) -> alt.LayerChart:
    """The roofline of the measured peaks (log-log) with one point per record."""
    x = alt.X("intensity:Q", title="arithmetic intensity (FLOP/byte)", scale=alt.Scale(type="log"))
    y = alt.Y("gflops:Q", title="GFLOPS", scale=alt.Scale(type="log"))
    ceiling = alt.Chart(alt.Data(values=data["ceiling"])).mark_line(color="#475569").encode(x=x, y=y)
    # a hollow point: its GFLOPS count largely element-wise ops beside its products (store.plots.roofline), which run on
    # other vector units than the FMAs whose peak the ceiling is: above it, it is no figure of theirs
    points = alt.Chart(alt.Data(values=data["points"])).mark_point(size=60).encode(
        x=x, y=y, color=_source_colour(),
        fill=alt.condition(alt.datum.counted == BESIDE_PRODUCTS, alt.value("transparent"), _source_colour()),
        shape=alt.Shape("counted:N", title="FLOPs counted",
                        scale=alt.Scale(domain=[PRODUCTS, BESIDE_PRODUCTS], range=["circle", "diamond"])),
        tooltip=[alt.Tooltip("workload:N"), alt.Tooltip("intensity:Q", title="FLOP/byte", format=".1f"),
                 alt.Tooltip("gflops:Q", title="GFLOPS", format=".2f"), alt.Tooltip("source:N"),
                 alt.Tooltip("counted:N", title="FLOPs counted")])
    return alt.layer(ceiling, points).properties(height=380)
