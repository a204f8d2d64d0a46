"""The Schedule page's source <-> assembly view: a Streamlit component (``st.components.v2``)
whose JavaScript and CSS live in ``assets/source_asm.{js,css}``. Python sends the kernel's
TVMScript, its assembly, which script line each instruction came from, what each loop header
became and how much of the hot loop is mapped (:class:`explorer.schedule.line_map.LineMap`,
all computed there); the browser links them on hover and click."""

from __future__ import annotations

import hashlib
from pathlib import Path

import streamlit as st

from explorer.schedule.codegen import CodeViews
from explorer.target.asm import ANY_ASM, AsmSyntax

ASSETS = Path(__file__).resolve().parent.parent / "assets"
HEIGHT = 660  # pixels

_component = st.components.v2.component(
    "schedx.source_asm",
    html="",
    css=(ASSETS / "source_asm.css").read_text(encoding="utf-8"),
    js=(ASSETS / "source_asm.js").read_text(encoding="utf-8"),
)


def line_classes(asm: str, syntax: AsmSyntax = ANY_ASM) -> dict[str, str]:
    """Assembly lines to mark: ``fma`` for multiply-adds, ``vec`` for other vector instructions."""
    return {str(no): "fma" if syntax.is_fma(line) else "vec"
            for no, line in enumerate(asm.splitlines(), 1) if syntax.is_vector(line)}


def source_asm_view(views: CodeViews, changed: list[int], *, key: str, syntax: AsmSyntax = ANY_ASM) -> None:
    """Draw ``views``' mapped TVMScript and assembly side by side (``views.mapping`` must be set);
    ``changed``: assembly lines the last step changed; ``syntax``: the target's assembly vocabulary."""
    mapping = views.mapping
    hot = views.hot
    share = views.hot_mapped
    data = {
        # drawn anew when anything shown changes (the same listing for another target or step)
        "key": hashlib.sha1(repr((mapping.source, mapping.asm, changed, views.target)).encode()).hexdigest()[:16],
        "source": mapping.source.splitlines(),
        "asm": mapping.asm.splitlines(),
        "a2s": list(mapping.asm_to_source),
        "blocks": [list(b) for b in mapping.blocks],
        "notes": {str(line): text for line, text in mapping.notes().items()},
        "share": [share.mapped, share.instructions] if share is not None else None,
        "classes": line_classes(mapping.asm, syntax),
        "changed": changed,
        "hot": [hot.first, hot.last] if hot is not None else None,
        "titles": ["TVMScript (this step)", f"Assembly for {views.target}"],
        "height": HEIGHT - 20,
    }
    _component(key=key, height=HEIGHT, data=data)


__all__ = ["line_classes", "source_asm_view"]
