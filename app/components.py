"""Small rendering helpers shared by pages: HTML for a side-by-side diff, the graph legend."""

from __future__ import annotations

import html

from explorer.graph.dot import STATUS_STYLE
from explorer.passes.textdiff import inline_changes, side_by_side

_ROW_BG = {"equal": "", "replace": "#fef3c7", "delete": "#fee2e2", "insert": "#dcfce7", "skip": "#f1f5f9"}

# A fixed layout of four columns (number, text, number, text) whose text wraps: both sides stay
# on screen whatever the line length (TVMScript lines run to hundreds of characters).
_TABLE_CSS = """
<style>
div.sbs-wrap {max-height: 720px; overflow-y: auto; overflow-x: hidden; border: 1px solid #e2e8f0; border-radius: 6px;}
table.sbs {border-collapse: collapse; table-layout: fixed; width: 100%; font-family: ui-monospace, Menlo, monospace;
           font-size: 12px; line-height: 1.4;}
table.sbs col.no {width: 3.2em;}
table.sbs td {padding: 0 6px; vertical-align: top; border-bottom: 1px solid #f1f5f9;}
table.sbs td.text {white-space: pre-wrap; overflow-wrap: anywhere; word-break: break-word;}
table.sbs td.no {color: #94a3b8; text-align: right; user-select: none;}
table.sbs td.text + td.no {border-left: 1px solid #e2e8f0;}
table.sbs mark.del {background: #fca5a5; padding: 0;}
table.sbs mark.ins {background: #86efac; padding: 0;}
</style>
"""


def _marked(runs: list[tuple[str, bool]], cls: str) -> str:
    return "".join(f'<mark class="{cls}">{html.escape(t)}</mark>' if changed else html.escape(t) for t, changed in runs)


def side_by_side_html(before: str, after: str, context: int = 3) -> str:
    """An HTML table of two texts side by side that fits its container: lines wrap, changed lines
    are tinted, the changed characters of a replaced line marked, equal runs cut."""
    rows = []
    for r in side_by_side(before, after, context):
        bg = _ROW_BG.get(r.tag, "")
        style = f' style="background:{bg}"' if bg else ""
        if r.tag == "skip":
            rows.append(f'<tr{style}><td class="no">…</td><td class="text"></td><td class="no">…</td><td class="text"></td></tr>')
            continue
        if r.tag == "replace" and r.left_no and r.right_no:
            left_runs, right_runs = inline_changes(r.left, r.right)
            left, right = _marked(left_runs, "del"), _marked(right_runs, "ins")
        else:
            left, right = html.escape(r.left), html.escape(r.right)
        rows.append(f"<tr{style}><td class='no'>{r.left_no or ''}</td><td class='text'>{left}</td>"
                    f"<td class='no'>{r.right_no or ''}</td><td class='text'>{right}</td></tr>")
    cols = '<colgroup><col class="no"><col><col class="no"><col></colgroup>'
    return _TABLE_CSS + f'<div class="sbs-wrap"><table class="sbs">{cols}' + "".join(rows) + "</table></div>"


def table_html(rows: list[dict], *, max_height: int = 320) -> str:
    """A plain HTML table of ``rows`` (dicts with the same keys): numbers right-aligned, no grid
    widget to start in the browser."""
    if not rows:
        return ""
    cols = list(rows[0])
    head = "".join(f'<th style="text-align:left;padding:2px 8px;border-bottom:1px solid #cbd5e1">{html.escape(c)}</th>'
                   for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = r[c]
            num = isinstance(v, (int, float))
            cells.append(f'<td style="padding:1px 8px;border-bottom:1px solid #f1f5f9;overflow-wrap:anywhere;'
                         f'text-align:{"right" if num else "left"}">{"" if v is None else html.escape(str(v))}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="sx-table" style="max-height:{max_height}px;overflow:auto"><table style="border-collapse:collapse;'
            f'width:100%;font-size:13px"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def time_bars_html(rows: list[tuple[str, float, bool]], title: str) -> str:
    """Horizontal bars, one per (label, milliseconds, changed), in plain HTML: no chart library
    to load, so the Counts tab opens at once."""
    top = max((ms for _, ms, _ in rows), default=0) or 1
    out = [f'<div class="sx-bars"><div style="font-weight:600;margin-bottom:4px">{html.escape(title)}</div>']
    for label, ms, changed in rows:
        colour = "#2563eb" if changed else "#cbd5e1"
        out.append(
            '<div style="display:flex;align-items:center;gap:8px;font-size:12px;line-height:18px">'
            f'<span style="flex:0 0 220px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap">{html.escape(label)}</span>'
            f'<span style="flex:1 1 auto;background:#f8fafc"><span style="display:block;height:12px;'
            f'width:{100 * ms / top:.1f}%;background:{colour}"></span></span>'
            f'<span style="flex:0 0 70px;text-align:right;font-family:ui-monospace,monospace">{ms:.1f} ms</span></div>')
    out.append("</div>")
    return "".join(out)


def legend_html() -> str:
    """Coloured chips explaining the diff statuses in the graph view."""
    chips = []
    meaning = {"added": "new after", "removed": "gone after", "changed": "shape, dtype or op changed",
               "fused": "moved into a fused group", "merged": "group became one kernel",
               "lowered": "operator became a TIR kernel"}
    for status, (border, fill) in STATUS_STYLE.items():
        chips.append(f'<span style="border:1.5px solid {border};background:{fill};border-radius:4px;'
                     f'padding:0 5px;margin-right:5px;font-size:11px;white-space:nowrap">{status}: {meaning[status]}</span>')
    # a flex row that wraps: the chips take as many lines as the width needs (st.html keeps inline
    # content on one line: at 1100 px the last chip ran 148 px past the page)
    return '<div style="display:flex;flex-wrap:wrap;row-gap:2px;line-height:20px">' + "".join(chips) + "</div>"


def coming_next(title: str, what: str, steps: list[str]) -> None:
    """A page whose feature is not built yet: says what it will do, shows no made-up data."""
    import streamlit as st

    st.title(title)
    st.info("Not built yet. " + what)
    st.markdown("\n".join(f"- {s}" for s in steps))
    st.caption("Meanwhile, the Graph & passes page and `schedx passes` work on every model.")


_CODE_CSS = """
<style>
div.sx-code {overflow: auto; max-height: 720px; border: 1px solid #e2e8f0; border-radius: 6px;}
div.sx-code pre {margin: 0; font-family: ui-monospace, Menlo, monospace; font-size: 12px; line-height: 1.45;}
div.sx-code span.ln {display: inline-block; width: 3.2em; color: #94a3b8; text-align: right; margin-right: 1em;
                     user-select: none;}
div.sx-code span.hl {background: #fef08a; display: inline-block; min-width: 100%;}
</style>
"""


LONG_LINE = 90  # characters: a longer line shows whole on hover (its pane scrolls sideways)


def code_with_marks(text: str, marked: list[int]) -> str:
    """TVMScript as HTML with the given (1-based) lines highlighted: what the last step changed.
    The pane scrolls sideways; a line longer than :data:`LONG_LINE` shows whole on hover."""
    marked_set = set(marked)
    lines = []
    for no, line in enumerate(text.splitlines(), 1):
        body = html.escape(line) or " "
        row = f'<span class="ln">{no}</span>{body}'
        tip = f' title="{html.escape(line.strip(), quote=True)}"' if len(line) > LONG_LINE else ""
        if no in marked_set:
            lines.append(f'<span class="hl"{tip}>{row}</span>')
        else:
            lines.append(f"<span{tip}>{row}</span>" if tip else row)
    return _CODE_CSS + '<div class="sx-code"><pre>' + "\n".join(lines) + "</pre></div>"


_DECISIONS_CSS = """<style>
div.sx-decisions {overflow-x: auto;}
table.sx-dec {border-collapse: collapse; font-size: 13px; line-height: 1.35;}
table.sx-dec th, table.sx-dec td {padding: 3px 8px; border-bottom: 1px solid #e2e8f0; text-align: left;
  vertical-align: top; overflow-wrap: anywhere;}
table.sx-dec thead th {font-weight: 600; max-width: 13em;}
table.sx-dec th.name {color: #475569; font-weight: 400; white-space: nowrap;}
table.sx-dec td.v {font-family: ui-monospace, Menlo, monospace; font-size: 12px;}
table.sx-dec .default {background: #f1f5f9;}
table.sx-dec td.diff {background: #fef3c7; font-weight: 600;}
table.sx-dec .speed {color: #475569; font-weight: 400; font-size: 12px;}
</style>"""


def decisions_html(view) -> str:
    """A :class:`search.decisions.DecisionView` as a table: a column per schedule (the default
    first, shaded), a row per choice (tiles, unrolling, compute locations); a winner's choice that
    differs from the default's is highlighted."""
    head = ['<th class="name">schedule</th>']
    speed = ['<th class="name">speed</th>']
    for n, s in enumerate(view.schedules):
        cls = ' class="default"' if view.has_default and n == 0 else ""
        head.append(f"<th{cls}>{html.escape(s.title)}</th>")
        versus = f" · {s.vs_default:.2f}x the default" if s.vs_default is not None and n else ""
        speed.append(f'<th{cls}><span class="speed">{s.gflops:.1f} GFLOPS{versus}</span></th>')
    body = []
    for name in view.names:
        cells = [f'<th class="name">{html.escape(name)}</th>']
        for n in range(len(view.schedules)):
            classes = ["v"] + (["default"] if view.has_default and n == 0 else []) + \
                (["diff"] if view.differs(n, name) else [])
            value = html.escape(view.value(n, name))
            if value.startswith("["):  # a tile's factors stay on one line
                value = value.replace(" ", "&nbsp;")
            cells.append(f'<td class="{" ".join(classes)}">{value}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (_DECISIONS_CSS + '<div class="sx-decisions"><table class="sx-dec"><thead><tr>' + "".join(head)
            + "</tr><tr>" + "".join(speed) + "</tr></thead><tbody>" + "".join(body) + "</tbody></table></div>")


KIND_COLOURS = {"serial": "#94a3b8", "parallel": "#2563eb", "vectorized": "#16a34a", "unrolled": "#d97706"}


def tiling_figure(func, block: str):
    """How each axis of ``block`` is cut into loops: one bar per axis, one segment per loop, width
    proportional to log2(extent), so the factors of an axis read left (outer) to right (inner)."""
    import math

    import plotly.graph_objects as go

    from explorer.schedule.views import tiling

    axes = tiling(func, block)
    fig = go.Figure()
    shown: set[str] = set()
    for ax in axes:
        row = f"{ax.axis} ({ax.iter_type}, {ax.extent})"
        for name, extent, kind in ax.loops:
            colour = KIND_COLOURS.get(kind, "#7c3aed")
            legend = kind if kind in KIND_COLOURS else "thread"
            fig.add_bar(y=[row], x=[max(math.log2(max(extent, 1)), 0.35)], orientation="h", name=legend,
                        legendgroup=legend, showlegend=legend not in shown, marker_color=colour,
                        marker_line_color="white", marker_line_width=2,
                        text=f"{name} ×{extent}", textposition="inside", insidetextanchor="middle",
                        hovertemplate=f"{name}: extent {extent}, {kind}<extra></extra>")
            shown.add(legend)
    from app.charts import framed

    return framed(fig, f"Tiling of block {block} (outer → inner; width ∝ log2 extent)",
                  height=90 + 60 * max(1, len(axes)), barmode="stack", xaxis=dict(visible=False),
                  yaxis=dict(autorange="reversed"), legend_orientation="h")


def roofline_figure(result, naive=None):
    """The roofline of this machine (measured peaks) with the kernel's points on it."""
    import numpy as np
    import plotly.graph_objects as go

    peak, bw, ai = result.peak_gflops, result.peak_gbps, result.arithmetic_intensity or 1.0
    ridge = peak / bw  # where the memory roof meets the compute roof
    lo, hi = min(ai, ridge) / 20, max(ai, ridge) * 20
    xs = np.logspace(np.log10(lo), np.log10(hi), 120)
    fig = go.Figure()
    fig.add_scatter(x=xs, y=np.minimum(peak, xs * bw), mode="lines", name=f"roofline ({bw:.0f} GB/s, {peak:.0f} GFLOPS)",
                    line=dict(color="#64748b"))
    for label, r, colour in (("naive", naive, "#dc2626"), ("current", result, "#2563eb")):
        if r is not None and r.ok:
            fig.add_scatter(x=[ai], y=[r.gflops], mode="markers+text", name=label, text=[label],
                            textposition="top center", cliponaxis=False, marker=dict(size=12, color=colour))
    # one labelled tick per decade: plotly's default log ticks repeated 2 and 5 between the decades
    fig.update_xaxes(type="log", dtick=1, title="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(type="log", dtick=1, title="GFLOPS")
    from app.charts import framed

    return framed(fig, "Roofline", height=320, legend_orientation="h")
