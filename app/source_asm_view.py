"""The Schedule page's source <-> assembly view: a Streamlit component (``st.components.v2``)
whose JavaScript and CSS live in ``assets/source_asm.{js,css}``. Python sends the kernel's
TVMScript, its assembly and which script line each instruction came from
(:class:`explorer.schedule.line_map.LineMap`); the browser links them on hover and click."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import streamlit as st

from explorer.schedule.codegen import CodeViews

ASSETS = Path(__file__).resolve().parent.parent / "assets"
HEIGHT = 660  # pixels

_component = st.components.v2.component(
    "schedx.source_asm",
    html="",
    css=(ASSETS / "source_asm.css").read_text(encoding="utf-8"),
    js=(ASSETS / "source_asm.js").read_text(encoding="utf-8"),
)
_VECTOR = re.compile(r"%[xyz]mm\d|\bv\d+\.\d+[bhsd]\b|\bz\d+\.[bhsd]\b")
_FMA = re.compile(r"\b(v?fn?m(add|sub)|fml[as])")


def line_classes(asm: str) -> dict[str, str]:
    """Assembly lines to mark: ``fma`` for multiply-adds, ``vec`` for other vector instructions."""
    marks = {}
    for no, line in enumerate(asm.splitlines(), 1):
        code = line.split("#", 1)[0].split("//", 1)[0]
        if _VECTOR.search(code):
            marks[str(no)] = "fma" if _FMA.search(code) else "vec"
    return marks


def source_asm_view(views: CodeViews, changed: list[int], *, key: str) -> None:
    """Draw ``views``' mapped TVMScript and assembly side by side (``views.mapping`` must be set);
    ``changed``: assembly lines the last step changed."""
    mapping = views.mapping
    hot = views.hot
    data = {
        # drawn anew when anything shown changes (the same listing for another target or step)
        "key": hashlib.sha1(repr((mapping.source, mapping.asm, changed, views.target)).encode()).hexdigest()[:16],
        "source": mapping.source.splitlines(),
        "asm": mapping.asm.splitlines(),
        "a2s": list(mapping.asm_to_source),
        "blocks": [list(b) for b in mapping.blocks],
        "classes": line_classes(mapping.asm),
        "changed": changed,
        "hot": [hot.first, hot.last] if hot is not None else None,
        "titles": ["TVMScript (this step)", f"Assembly for {views.target}"],
        "height": HEIGHT - 20,
    }
    _component(key=key, height=HEIGHT, data=data)


__all__ = ["line_classes", "source_asm_view"]
