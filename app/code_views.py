"""The Schedule page's Compiler-Explorer views: lowered TIR, LLVM IR and assembly after the
current step, diffed against the previous step, vector instructions marked and counted."""

from __future__ import annotations

import html

import streamlit as st

from app import state
from explorer.errors import ExplorerError
from explorer.schedule.codegen import CodeViews, code_views
from explorer.schedule.views import changed_lines
from explorer.target.asm import ANY_ASM, AsmSyntax
from explorer.workload import module_hash

_CSS = """<style>
.sx-asm pre{font-size:12px;line-height:1.35;max-height:640px;overflow:auto;background:#f8fafc;padding:8px;}
.sx-asm .ln{color:#94a3b8;display:inline-block;width:4em;user-select:none}
.sx-asm .vec{background:#dcfce7}.sx-asm .fma{background:#bbf7d0;font-weight:600}
.sx-asm .chg{box-shadow:inset 3px 0 #f59e0b}
</style>"""


def views_for(mod, target) -> CodeViews | None:
    """The code views of ``mod`` for ``target``, built once per schedule and target."""
    cache = state.kept(state.CODE_VIEWS, dict)
    key = (module_hash(mod), target.key)
    if key not in cache:
        try:
            cache[key] = code_views(mod, target)
        except ExplorerError as err:
            st.error(str(err))
            return None
        if len(cache) > 64:  # keep the session's memory bounded
            cache.pop(next(iter(cache)))
    return cache[key]


def listing_html(text: str, changed: list[int], *, mark_vectors: bool = False, lines: tuple[int, int] | None = None,
                 syntax: AsmSyntax = ANY_ASM) -> str:
    """A listing with line numbers, lines changed by the last step marked, and (assembly) vector
    and FMA instructions highlighted, as ``syntax`` (the target's) reads them; ``lines``: only
    lines first to last (1-based), numbered as in the whole listing. Long lines scroll sideways;
    hovering one shows it whole."""
    marked = set(changed)
    rows = []
    for no, line in enumerate(text.splitlines(), 1):
        if lines is not None and not lines[0] <= no <= lines[1]:
            continue
        classes = []
        if mark_vectors and syntax.is_vector(line):
            classes.append("fma" if syntax.is_fma(line) else "vec")
        if no in marked:
            classes.append("chg")
        body = f'<span class="ln">{no}</span>{html.escape(line) or " "}'
        tip = f' title="{html.escape(line.strip(), quote=True)}"' if len(line) > 100 else ""
        rows.append(f'<span class="{" ".join(classes)}"{tip}>{body}</span>' if classes or tip else body)
    return _CSS + '<div class="sx-asm"><pre>' + "\n".join(rows) + "</pre></div>"


def stats_delta(now: CodeViews, before: CodeViews | None) -> str:
    """The assembly's counts, and what the last step changed in them."""
    text = now.stats.summary()
    if before is None:
        return text
    fma_now, fma_before = sum(now.stats.fma.values()), sum(before.stats.fma.values())
    vec_now, vec_before = sum(now.stats.vector.values()), sum(before.stats.vector.values())
    widest = max(now.stats.vector, default=0)
    was = max(before.stats.vector, default=0)
    change = [f"{now.stats.instructions - before.stats.instructions:+d} instructions",
              f"{vec_now - vec_before:+d} vector", f"{fma_now - fma_before:+d} FMA"]
    if widest != was:
        change.append(f"widest vector {was} -> {widest} bits")
    return f"{text} (last step: {', '.join(change)})"


def code_tabs(session, target, tabs) -> None:
    """Fill the Lowered TIR, LLVM IR and Assembly tabs (``tabs``) for the session's current step."""
    now = views_for(session.mod, target)
    if now is None:
        return
    before = views_for(session.schedule_at(session.cursor - 1).mod, target) if session.cursor else None
    for tab, attr, vectors in zip(tabs, ("lowered_tir", "llvm_ir", "asm"), (False, False, True)):
        with tab:
            text = getattr(now, attr)
            if now.refused and not text:  # instructions the target lacks: lowered, never handed to LLVM
                st.error(now.refused)
                continue
            changed = changed_lines(getattr(before, attr), text) if before is not None else []
            if vectors:
                st.caption(f"{target.label}: {stats_delta(now, before)}")
                if now.mapping is not None:  # Compiler Explorer's view: script and assembly linked line by line
                    _linked(now, before, target)
                    continue
                hot = now.hot
                if hot is not None:  # Compiler Explorer opens where the work is, not at the preamble
                    st.caption(f"Hot loop: lines {hot.first}-{hot.last}, {hot.fma} FMA and {hot.vector} vector "
                               f"instructions per iteration")
                    st.html(listing_html(text, changed, mark_vectors=True, lines=(hot.first, hot.last),
                                         syntax=target.asm))
                    with st.expander(f"The whole listing ({len(text.splitlines())} lines)"):
                        st.html(listing_html(text, changed, mark_vectors=True, syntax=target.asm))
                    continue
            else:
                st.caption(f"{target.label}: {len(changed)} lines changed by the last step" if before is not None
                           else f"{target.label}: the unscheduled kernel")
            st.html(listing_html(text, changed, mark_vectors=vectors, syntax=target.asm))


def _linked(now: CodeViews, before: CodeViews | None, target) -> None:
    import dataclasses

    from app.source_asm_view import source_asm_view

    hot = now.hot
    where = (f"opened at the hot loop (lines {hot.first}-{hot.last}: {hot.fma} FMA, {hot.vector} vector "
             f"instructions per iteration)" if hot is not None else "no loop with vector instructions")
    st.caption(f"Hover or click a TVMScript line to light up the instructions it became (a loop: its own "
               f"increment, compare and branch), or an instruction to find its line; a click pins the selection. "
               f"Assembly {where}.")
    old = before.mapping.asm if before is not None and before.mapping is not None else None
    changed = changed_lines(old, now.mapping.asm) if old is not None else []
    # the pane's title names the target in a few words (its CPU, its cores): its whole label, every
    # ISA feature, was cut at the pane's width; the caption above says them all
    short = " ".join(w for w in target.label.split() if not w.startswith(("+", "-")))
    source_asm_view(dataclasses.replace(now, target=short), changed, key="source_asm", syntax=target.asm)


__all__ = ["code_tabs", "listing_html", "stats_delta", "views_for"]
