"""Small rendering helpers shared by pages: HTML for a side-by-side diff, the graph legend."""

from __future__ import annotations

import html

from explorer.graph.dot import STATUS_STYLE
from explorer.textdiff import side_by_side

_ROW_BG = {"equal": "", "replace": "#fef3c7", "delete": "#fee2e2", "insert": "#dcfce7", "skip": "#f1f5f9"}

_TABLE_CSS = """
<style>
div.sbs-wrap {overflow-x: auto; max-height: 640px; overflow-y: auto;}
table.sbs {border-collapse: collapse; min-width: 100%; font-family: ui-monospace, Menlo, monospace;
           font-size: 12px;}
table.sbs td {padding: 0 6px; white-space: pre; vertical-align: top; border-bottom: 1px solid #f1f5f9;}
table.sbs td.text {width: 50%;}
table.sbs td.no {width: 3.5em; color: #94a3b8; text-align: right; user-select: none;}
</style>
"""


def side_by_side_html(before: str, after: str, context: int = 3) -> str:
    """An HTML table of two texts side by side, changed lines tinted, equal runs cut."""
    rows = []
    for r in side_by_side(before, after, context):
        bg = _ROW_BG.get(r.tag, "")
        style = f' style="background:{bg}"' if bg else ""
        if r.tag == "skip":
            rows.append(f'<tr{style}><td class="no">…</td><td></td><td class="no">…</td><td></td></tr>')
            continue
        rows.append(
            f"<tr{style}><td class='no'>{r.left_no or ''}</td><td class='text'>{html.escape(r.left)}</td>"
            f"<td class='no'>{r.right_no or ''}</td><td class='text'>{html.escape(r.right)}</td></tr>")
    return _TABLE_CSS + '<div class="sbs-wrap"><table class="sbs">' + "".join(rows) + "</table></div>"


def legend_html() -> str:
    """Coloured chips explaining the diff statuses in the graph view."""
    chips = []
    meaning = {"added": "new after", "removed": "gone after", "changed": "shape/dtype changed",
               "fused": "moved into a fused group", "merged": "group became one kernel",
               "lowered": "operator became a TIR kernel"}
    for status, (border, fill) in STATUS_STYLE.items():
        chips.append(f'<span style="border:2px solid {border};background:{fill};border-radius:4px;'
                     f'padding:1px 6px;margin-right:6px;font-size:12px">{status}: {meaning[status]}</span>')
    return "<div>" + "".join(chips) + "</div>"


def coming_next(title: str, what: str, steps: list[str]) -> None:
    """A page whose feature is not built yet: says what it will do, shows no made-up data."""
    import streamlit as st

    st.title(title)
    st.info("Not built yet. " + what)
    st.markdown("\n".join(f"- {s}" for s in steps))
    st.caption("Meanwhile, the Graph & passes page and `schedx passes` work on every model.")
