"""The custom MetaSchedule rules TOPI's pools name, registered as what TVM does without them.

TVM 0.27 lowers ``max_pool2d``, ``avg_pool2d`` and their adaptive forms with a block annotation
``schedule_rule = "meta_schedule.pool_max"`` (and kin). MetaSchedule's ``ApplyCustomRule`` looks
for a function ``s_tir.meta_schedule.<target key>.meta_schedule.pool_max``, which TVM registers for
no target: it logs "Unknown schedule rule" for every such block of every search, drops the
annotation and lets the default rules schedule the block. Registering that same fallback under
those names keeps the design space as it was and the log quiet (``schedx tune`` printed the
warning on every model with a pool)."""

from __future__ import annotations

POOL_RULES = ("pool_max", "pool_avg", "adaptive_pool_max", "adaptive_pool_avg")


def _default_rules(sch, block):
    """What ApplyCustomRule does for an unknown rule, without the warning: the default rules."""
    sch.unannotate(block, "schedule_rule")
    return [sch]


def register_pool_rules() -> None:
    """Register the fallback for every pool rule and every registered target kind's TVM keys
    (:func:`explorer.target.kinds.tvm_target_keys`) that has no function yet (idempotent)."""
    import tvm_ffi

    from explorer.target.kinds import tvm_target_keys

    for key in tvm_target_keys():
        for rule in POOL_RULES:
            name = f"s_tir.meta_schedule.{key}.meta_schedule.{rule}"
            if tvm_ffi.get_global_func(name, allow_missing=True) is None:
                tvm_ffi.register_global_func(name, _default_rules)


__all__ = ["POOL_RULES", "register_pool_rules"]
