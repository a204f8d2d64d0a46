"""Every kernel's default-schedule decision for a target, as plain sorted data: what a change to
the rules (or a move of their code) can be checked against, kernel by kernel.

For a CPU target each kernel of a module gets the rule taken (full, safe, none), what was done to
each block (tiles, layout, micro-kernel, int8/bf16 path, recurrence), why a better rule was
passed over, optionally the variants a search measures beside it, and the structural hash of the
scheduled kernel (a change anywhere in it shows). Other targets (GPU) give each kernel's hash
and the notes of their default rules.
"""

from __future__ import annotations

import tvm

from explorer.target import Target, TargetError


def _hash(func) -> str:
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(func) & 0xFFFFFFFFFFFFFFFF:016x}"


def _cpu_decisions(mod: tvm.IRModule, cpu, variants: int) -> dict[str, dict]:
    from explorer.schedule.defaults.apply import apply_default_schedules
    from explorer.schedule.defaults.variants import default_variants

    out, choices = apply_default_schedules(mod, cpu)
    table: dict[str, dict] = {}
    for name, choice in choices.items():
        entry = {"rule": choice.rule, "steps": list(choice.steps), "fallback_reason": choice.fallback_reason,
                 "hash": _hash(out[name])}
        if variants:
            entry["variants"] = [{"label": v.variant.label, "steps": list(v.steps)}
                                 for v in default_variants(mod[name], cpu, variants)]
        table[name] = entry
    return table


def _other_decisions(mod: tvm.IRModule, target: Target) -> dict[str, dict]:
    out, notes, _ = target.apply_default_schedules(mod, target.tvm())
    table = {gv.name_hint: {"hash": _hash(func)} for gv, func in out.functions_items()
             if isinstance(func, tvm.tirx.PrimFunc)}
    for note in notes:
        name = note.removeprefix("kernel ").split(":")[0]
        table.setdefault(name, {})["note"] = note
    return table


def module_decisions(mod: tvm.IRModule, target: Target, *, variants: int = 0) -> dict[str, dict]:
    """Each PrimFunc of ``mod`` (a workload's fused module) by name: the default decision the
    target's rules take for it (``variants``: also up to that many variants of the CPU rules)."""
    try:
        cpu = target.cpu_spec()
    except TargetError:
        return dict(sorted(_other_decisions(mod, target).items()))
    return dict(sorted(_cpu_decisions(mod, cpu, variants).items()))


def workload_decisions(spec: str, target: Target, *, variants: int = 0) -> dict[str, dict]:
    """:func:`module_decisions` of a workload spec (a zoo name, an ONNX file, a kernel spec), its tasks
    those of ``target``'s CPU (:meth:`explorer.workload.Workload.for_target`), as an export finds them."""
    from explorer.workload import load_workload

    return module_decisions(load_workload(spec).for_target(target).fused_module(), target, variants=variants)


__all__ = ["module_decisions", "workload_decisions"]
