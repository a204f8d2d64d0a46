"""What keeps every page readable from 1100 to 1600 px (issue 52; the browser tests'
readability check, ``tests/browser.py: readability_findings``, holds every page to it):

- :data:`APP_CSS`, the app's few style rules, added once by ``app/main.py``: the main frame keeps
  the room Streamlit's wide layout gives to its margins; a metric's figure or label and a button's
  label wrap instead of ending in "…";
- :func:`sized_columns`, column configs for ``st.dataframe`` with every column as wide as its
  widest value or header: a data grid draws on a canvas, cuts what does not fit, and no CSS
  reaches it; columns Streamlit sizes alone are cut at its defaults ("small", "medium").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

APP_CSS = """<style>
/* the main frame: Streamlit's wide layout keeps 5rem each side; the pages need the room */
[data-testid="stMainBlockContainer"] {padding-left: 1.5rem; padding-right: 1.5rem;}
/* a metric's figure and label, and a button's label, wrap rather than end in an ellipsis */
[data-testid="stMetricValue"], [data-testid="stMetricValue"] *, [data-testid="stMetricLabel"],
[data-testid="stMetricLabel"] *, [data-testid^="stBaseButton"] [data-testid="stMarkdownContainer"],
[data-testid^="stBaseButton"] [data-testid="stMarkdownContainer"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
  overflow-wrap: anywhere;}
[data-testid="stMetricValue"] {line-height: 1.15;}
</style>"""

# Widths of the characters " " to "~" in Streamlit's font (Source Sans), in hundredths of an em,
# as chromium's canvas measures them (the data grid measures its text the same way)
_EM = (20, 29, 43, 50, 50, 82, 61, 25, 30, 30, 42, 50, 25, 31, 25, 35, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 25, 25,
       50, 50, 50, 42, 85, 54, 59, 57, 61, 53, 49, 62, 65, 26, 48, 58, 49, 73, 65, 66, 57, 66, 57, 53, 54, 64, 51, 79,
       51, 48, 54, 30, 35, 30, 50, 50, 54, 50, 55, 46, 55, 50, 29, 50, 54, 25, 25, 49, 25, 83, 55, 54, 55, 55, 35, 42,
       34, 54, 47, 72, 45, 47, 42, 30, 24, 30, 50)
_OTHER_EM = {"\u00b7": 25, "\u2265": 50, "\u2264": 50, "\u2003": 100, "\u2026": 100, "\u2192": 100, "\u00d7": 50}
GRID_FONT_PX = 14  # st.dataframe's cell and header font
GRID_PADDING_PX = 8  # glide-data-grid's padding each side of a cell's text
_SLACK_PX = 6  # rounding, and a cell's border
ROW_MARKER_PX = 40  # the column of checkboxes a grid with row selection adds before the data


def text_px(text: str, font_px: float = GRID_FONT_PX) -> float:
    """The width of ``text`` in Streamlit's font at ``font_px`` (a character it has no width for
    counts as a wide one: never less than it takes)."""
    em = 0
    for ch in text:
        code = ord(ch)
        em += _EM[code - 32] if 32 <= code < 127 else _OTHER_EM.get(ch, 100)
    return em * font_px / 100


def shown_text(value, number_format: str | None = None) -> str:
    """A value as the data grid shows it: a number in its column's printf ``number_format``, None
    as nothing, anything else as text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if number_format and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return number_format % value
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".")
    return str(value)


def column_px(header: str, values: Iterable, number_format: str | None = None, *, font_px: float = GRID_FONT_PX,
              most: int = 640) -> int:
    """Pixels a grid column needs to show ``header`` and every value whole (at most ``most``)."""
    widest = max([text_px(header, font_px)] + [text_px(shown_text(v, number_format), font_px) for v in values])
    return min(most, math.ceil(widest + 2 * GRID_PADDING_PX + _SLACK_PX))


def sized_columns(rows: list[Mapping], config: Mapping | None = None, *, most: int = 640) -> dict:
    """``config`` (column name -> an ``st.column_config`` column, or None for a plain one) with
    every column of ``rows`` given the width its widest value or header needs; a column's own
    label and number format are taken into account. Columns ``config`` hides (None) stay hidden."""
    config = dict(config or {})
    names = list(rows[0]) if rows else list(config)
    out: dict = {}
    for name in names:
        column = config.get(name, {})
        if name in config and column is None:
            out[name] = None
            continue
        column = dict(column or {})
        kind = column.get("type_config") or {}
        header = column.get("label") or name
        out[name] = {**column, "width": column_px(header, (r.get(name) for r in rows), kind.get("format"), most=most)}
    return out


def side_column_css(layout_key: str, side_key: str, main_key: str, *, need_px: float, share: float,
                    gap_px: float = 16) -> str:
    """CSS that folds a side column away where it is too narrow for its content: the keyed
    container ``layout_key`` holds two columns, one holding the container ``side_key`` (``share``
    of the width), the other ``main_key``; while the side column would be narrower than
    ``need_px`` (its content, e.g. :func:`columns_px` of its table), it is hidden and the main
    column takes the whole width. A container query: it follows the page's own width (a sidebar
    opened or closed), not the window's."""
    fold_below = math.ceil((need_px + 4) / share + gap_px)
    side = f'[data-testid="stColumn"]:has(.st-key-{side_key})'
    main = f'[data-testid="stColumn"]:has(.st-key-{main_key})'
    return (f"<style>.st-key-{layout_key} {{container-type: inline-size;}}\n"
            f"@container (max-width: {fold_below}px) {{ {side} {{display: none !important;}}\n"
            f"  {main} {{width: 100% !important; flex: 1 1 100% !important; max-width: 100% !important;}} }}</style>")


def columns_px(config: Mapping) -> int:
    """The width of the columns of a config :func:`sized_columns` made (hidden ones left out)."""
    return sum(c["width"] for c in config.values() if c)


__all__ = ["APP_CSS", "ROW_MARKER_PX", "column_px", "columns_px", "shown_text", "side_column_css", "sized_columns",
           "text_px"]
