"""The target picker every page that builds, measures or exports code shows: this machine's CPU
by default (with the features it uses and those the machine hides), or any spelling
``schedx --target`` takes, checked as it is typed."""

from __future__ import annotations

import streamlit as st

from explorer.target import Target, TargetError, host_cpu, host_target, parse_target, spec_help

HOST = "cpu (this machine)"
OTHER = "other…"


def host_caption() -> str:
    host, target = host_cpu(), host_target()
    hidden = f"; hidden by this machine, switched off: {', '.join(host.missing)}" if host.missing else ""
    return (f"This machine: {host.arch}, LLVM CPU {host.llvm_cpu or 'generic'}, {host.isa} "
            f"({target.vector_width}-bit vectors), {host.cores} cores{hidden}")


def target_picker(key: str, *, choices: tuple[str, ...] = (), cpu_only: bool = False,
                  runnable: bool = False, label: str = "Target") -> Target | None:
    """A target chosen on the page (None while what is typed is not valid; the error is shown).

    ``choices``: spellings offered besides this machine's CPU; ``cpu_only``: refuse GPU targets;
    ``runnable``: refuse targets this machine cannot run (measuring would crash)."""
    options = [HOST, *choices, OTHER]
    picked = st.selectbox(label, options, key=f"{key}_pick", help=spec_help("cpu" if cpu_only else "all"))
    if picked == OTHER:
        text = st.text_input("Target spelling", key=f"{key}_text", placeholder="cpu:znver3, cpu:-avx512f, aarch64",
                             help=spec_help("cpu" if cpu_only else "all"))
        if not text.strip():
            return None
    else:
        text = "cpu" if picked == HOST else picked
    try:
        target = parse_target(text)
    except TargetError as err:
        st.error(str(err))
        return None
    if cpu_only and not target.cpu_rules:
        st.error(f"{target.label}: this page works on CPU targets")
        return None
    why = target.why_not_here()
    if runnable and why:
        st.error(f"{target.label} cannot run here: {why}. Pick `cpu`, or a CPU this machine runs.")
        return None
    notes = [note for note in target.notes if not (why and why in note)]  # (a note that repeats why: said once)
    st.caption(f"Building for **{target.label}**" + (f" · not runnable here: {why}" if why else " · runs here")
               + (f" · {'; '.join(notes)}" if notes else ""))
    return target


__all__ = ["HOST", "host_caption", "target_picker"]
