"""The graph viewer of the Graph & passes page: a Streamlit component (``st.components.v2``) whose
JavaScript and CSS live in ``assets/graph_view.{js,css}`` and ship with the app (nothing is
downloaded at run time). Python sends the two snapshot payloads and their diff statuses; the
browser pans, zooms, fits, searches and explains nodes on its own.

Each payload is sent once per session: the browser keeps the graphs it received (and their
drawings) for the page's lifetime, so going back to a pass sends a key, not a graph. Events sent
back: ``open_kernel`` ({"index": snapshot, "name": PrimFunc}) when a user asks for a kernel in the
Schedule page, and ``need`` (a key) when the browser lost a graph it was told it had.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app import state
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


def _sent() -> set[str]:
    return state.kept(state.GRAPHS_SENT, set)


def _resend() -> None:
    """The browser lost a graph it was told it had (``need``): send the graphs again."""
    _sent().clear()


def _graph(key: str, payload: str) -> dict:
    sent = _sent()
    if key in sent:
        return {"key": key}
    sent.add(key)
    return {"key": key, "json": payload}


def graph_view(before: tuple[str, str], after: tuple[str, str], statuses: tuple[list[int], list[int], str],
               titles: tuple[str, str], *, key: str, focus: str = "", height: int = HEIGHT) -> dict | None:
    """Draw two graphs side by side, each given as ``(unique key, JSON payload)`` (payloads of
    :class:`explorer.graph.run_views.RunGraphs`); returns ``{"index", "name"}`` when the user
    asked to open a kernel."""
    sb, sa, summary = statuses
    data = {"before": _graph(*before), "after": _graph(*after), "sb": sb, "sa": sa, "summary": summary,
            "titles": list(titles), "style": _STYLE, "focus": focus}
    result = _component(key=key, height=height, data=data, on_open_kernel_change=lambda: None,
                        on_need_change=_resend)
    return getattr(result, "open_kernel", None) if result is not None else None


__all__ = ["HEIGHT", "graph_view"]
