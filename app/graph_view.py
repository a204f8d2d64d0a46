"""The graph viewer of the Graph & passes page: a Streamlit component (``st.components.v2``) whose
JavaScript and CSS live in ``assets/graph_view.{js,css}`` and ship with the app (nothing is
downloaded at run time). Python sends the two snapshot payloads and their diff statuses; the
browser pans, zooms, fits, searches and explains nodes on its own, and sends back one event:
``open_kernel`` ({"index": snapshot, "name": PrimFunc}) when a user asks for a kernel in the
Schedule page.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from explorer.graph.viewdata import style_table

ASSETS = Path(__file__).resolve().parent.parent / "assets"
HEIGHT = 760  # pixels: both panels share it

_component = st.components.v2.component(
    "schedx.graph_view",
    html="",
    css=(ASSETS / "graph_view.css").read_text(encoding="utf-8"),
    js=(ASSETS / "graph_view.js").read_text(encoding="utf-8"),
)
_STYLE = style_table()


def graph_view(before: str, after: str, statuses: tuple[list[int], list[int], str], titles: tuple[str, str], *,
               key: str, focus: str = "", height: int = HEIGHT) -> dict | None:
    """Draw two snapshot payloads (JSON text from :class:`explorer.graph.run_views.RunGraphs`)
    side by side; returns ``{"index", "name"}`` when the user asked to open a kernel."""
    sb, sa, summary = statuses
    result = _component(key=key, height=height, on_open_kernel_change=lambda: None,
                        data={"before": before, "after": after, "sb": sb, "sa": sa, "summary": summary,
                              "titles": list(titles), "style": _STYLE, "focus": focus})
    return getattr(result, "open_kernel", None) if result is not None else None


__all__ = ["HEIGHT", "graph_view"]
