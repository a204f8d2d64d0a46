"""The precision choice the Search, Export and Schedule pages show (``schedx tune/export
--precision``): fp32, and each other precision the target and the workload can have (bf16 where
the target has the instructions and the workload is a model; int8 for models); those that cannot
be are left out, each with the reason under the choice (:func:`explorer.precision.refusal`), and
the choice is disabled where fp32 is all that is left."""

from __future__ import annotations

import streamlit as st

from app import state
from explorer.precision import PRECISIONS, refusal
from explorer.target import Target

HELP = ("bf16: convolutions and matmuls with constant weights computed in bf16 with fp32 accumulation (AVX512-BF16 "
        "or AMX-BF16), the rest in fp32; a bf16 build is verified against fp32 at a stated tolerance. int8: the model "
        "quantized by `schedx quantize`'s flow (ONNX Runtime's quantizer, 16 random calibration samples; cached) and "
        "built as that QDQ model is (int8 kernels, AMX-INT8 where the CPU has it), verified against ONNX Runtime "
        "running the int8 model. Models only (a single kernel is refused). Their kernels are not fp32's: a search at "
        "a precision finds the records an export at it ships.")


def precision_picker(key: str, target: Target, *, kind: str = "model", what: str = "the workload") -> str:
    """The precision chosen under ``key`` among those ``target`` and a workload of ``kind`` named
    ``what`` can have (fp32 when the one chosen before no longer can be; the reasons are shown)."""
    why = {p: refusal(p, target, kind, what) for p in PRECISIONS}
    offered = [p for p in PRECISIONS if not why[p]]
    if state.read(key) not in offered:
        state.write(key, "fp32")  # a target or workload chosen since: the choice it had no longer holds
    picked = st.radio("Precision", offered, key=key, horizontal=True, disabled=len(offered) == 1, help=HELP)
    for p in PRECISIONS:
        if why[p]:
            st.caption(f"{p} is not available: {why[p]}")
    return picked if picked in offered else "fp32"


__all__ = ["precision_picker"]
