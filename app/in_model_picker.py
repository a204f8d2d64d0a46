"""The in-model decision's two checkboxes the Export and Profile pages show (``schedx export/profile
--check-in-model/--recheck``): keep a record only where it beats the default inside the model, and
take that decision again instead of reusing the one the database keeps."""

from __future__ import annotations

import streamlit as st

HELP = ("Both builds timed kernel by kernel in place, alternated, three rounds: a kernel timed alone can win and lose "
        "inside the model. A record is kept when it is faster by 2% in the median round (schedx export and profile "
        "check by default; only a target that runs here can be timed). Off: every record ships.")
RECHECK_HELP = ("The decision is kept in the database for these records, this machine and precision, and reused by "
                "every export, bench and profile; this times them again.")


def in_model_picker(key: str, recheck_key: str, *, runs_here: bool, has_records: bool = True) -> tuple[bool, bool]:
    """(check in the model, take the decision again) as chosen under ``key`` and ``recheck_key``;
    the check is on by default where the target ``runs_here``, and disabled without records."""
    in_model = st.checkbox("Keep a record only where it beats the default inside the model (about a minute)",
                           key=key, value=runs_here, disabled=not runs_here or not has_records, help=HELP)
    recheck = st.checkbox("Take the in-model decision again", key=recheck_key, value=False, disabled=not in_model,
                          help=RECHECK_HELP)
    return in_model, recheck


__all__ = ["in_model_picker"]
