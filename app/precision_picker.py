"""The precision choice the Search and Export pages show (``schedx tune/export --precision``):
fp32, or bf16 where the target has the instructions and the workload is a model; disabled, with
the reason, where it cannot be (:func:`explorer.precision.refusal`)."""

from __future__ import annotations

import streamlit as st

from app import state
from explorer.precision import PRECISIONS, refusal
from explorer.target import Target

HELP = ("bf16: convolutions and matmuls with constant weights computed in bf16 with fp32 accumulation (AVX512-BF16 "
        "or AMX-BF16), the rest in fp32; a bf16 build is verified against fp32 at a stated tolerance. Models only "
        "(a single kernel is refused). Its kernels are not fp32's: a search at bf16 finds the records an export at "
        "bf16 ships.")


def precision_picker(key: str, target: Target, *, kind: str = "model", what: str = "the workload") -> str:
    """The precision chosen under ``key`` (fp32 whenever bf16 is refused for ``target`` and a
    workload of ``kind`` named ``what``; the reason is shown under the disabled choice)."""
    why = refusal("bf16", target, kind, what)
    if why and state.read(key) != "fp32":
        state.write(key, "fp32")  # a target or workload chosen since: the choice it had no longer holds
    picked = st.radio("Precision", PRECISIONS, key=key, horizontal=True, disabled=bool(why), help=HELP)
    if why:
        st.caption(f"bf16 is not available: {why}")
        return "fp32"
    return picked


__all__ = ["precision_picker"]
