"""Default GPU schedules: dlight's rules (Matmul, GEMV, Reduction, GeneralReduction, Fallback),
applied kernel by kernel, each rule tried in turn.

dlight's own pass (``dl.ApplyDefaultSchedule``) stops the whole module at the first rule that
raises: its GEMV rule raises ``AttributeError: 'Add' object has no attribute 'value'`` on some
fused detector kernels for ``cuda:sm_90``, and the export was lost with no kernel named. Here a
rule that raises, or whose schedule does not build for the target, is passed over for that kernel
(the next rule, Fallback last, schedules it) and the note names the kernel, the rule and the error.
"""

from __future__ import annotations

import tvm
from tvm import s_tir, tirx

from explorer.errors import short_tvm_message
from explorer.ir.tir_walk import SCHEDULED_ATTR, is_scheduled
from explorer.schedule.defaults.recurrence import for_target as recurrence_for_target

RULES = ("Matmul", "GEMV", "Reduction", "GeneralReduction", "Fallback")  # dlight's order


def _build_error(func: tirx.PrimFunc, target) -> str | None:
    """Why ``func`` does not build for ``target`` (lowered and code generated alone; no nvcc), or
    None. dlight's Reduction rule schedules some grouped convolutions (ShuffleNet v1's) into a
    cross-thread reduction that TVM's lowering then refuses, which lost the whole export."""
    try:
        tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=target)
    except Exception as err:  # noqa: BLE001 - any refusal sends the kernel to the next rule
        said = [ln.strip() for ln in str(err).splitlines() if "Check failed" in ln or ln.strip().endswith("Error")]
        return (said[0] if said else short_tvm_message(err))[:160]
    return None


def apply_gpu_defaults(mod: tvm.IRModule, tvm_target, rules: tuple[str, ...] = RULES) -> tuple[tvm.IRModule, list[str]]:
    """``mod`` with dlight's first rule that applies on every PrimFunc not scheduled yet, and a
    note per kernel where a rule raised (which rule, why, and which one scheduled it instead)."""
    from tvm.s_tir import dlight as dl

    made = [(name, getattr(dl.gpu, name)()) for name in rules]
    updated: dict = {}
    notes: list[str] = []
    for gv, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        sequence = recurrence_for_target(func, gpu=True)
        if sequence is not None:  # a recurrent layer's kernel, written by schedx for GPUs too
            updated[gv] = sequence
            continue
        if is_scheduled(func):
            continue
        target = (func.attrs or {}).get("target") or tvm_target
        failed: list[str] = []
        used = None
        for name, rule in made:
            try:
                with target:
                    space = rule.apply(func, target, False)
            except Exception as err:  # noqa: BLE001 - one rule's bug must not lose the export
                failed.append(f"{name} ({type(err).__name__}: {short_tvm_message(err)[:160]})")
                continue
            if space is None:
                continue
            sch = space if isinstance(space, s_tir.Schedule) else space[0]
            scheduled = sch.mod["main"].with_attr(SCHEDULED_ATTR, True)
            why = None if name == "Fallback" else _build_error(scheduled, target)
            if why is not None:
                failed.append(f"{name} (its schedule does not build: {why})")
                continue
            updated[gv] = scheduled
            used = name
            break
        if failed:
            instead = f"dlight's {used} rule scheduled it instead" if used else "no other rule applied: it stays unscheduled"
            notes.append(f"kernel {gv.name_hint}: dlight's {', '.join(failed)} failed; {instead}")
    for gv, func in updated.items():
        mod[gv] = func
    return mod, notes


__all__ = ["RULES", "apply_gpu_defaults"]
