"""The default rules' own choices as a design space: the schedules the rules make when one of
their choices goes the other way, for a search to measure beside MetaSchedule's sketches.

The default schedule (:func:`explorer.schedule.defaults.default_schedule`) takes, for the
biggest reduction of a kernel, the register tile :func:`~explorer.schedule.defaults.tile_choice.choose_tiles`
models as cheapest, runs two output axes as one axis of pixels where the model gains
(``pixels``), and lets the rows a tile leaves over run in a tile of their own (``tails``). The
model is a model: on ResNet-18 it is right within a few percent, but it sees neither the
caches' behaviour under a whole model nor LLVM's register allocation. MetaSchedule's sketches do
not contain these schedules (weights packed in panels at build time, tails of rows, fused
rows), so its evolutionary search cannot reach them; measured, they can. Each variant here is
the default rules with one choice changed: the next tiles by the ranking, rows not fused,
tiles that divide the rows. Each replays by its trace on the unscheduled kernel, like the
default's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm

from explorer.schedule.defaults.apply import default_schedule, tiled, trace_json
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.variant import DefaultVariant
from explorer.schedule.lint import problems


# tried in this order, each once: the tiles the model ranks next first (where it errs most: a few
# percent between neighbours), then the rows' two structural choices
VARIANTS = (DefaultVariant(rank=1), DefaultVariant(pixels=False), DefaultVariant(rank=2),
            DefaultVariant(tails=False), DefaultVariant(rank=3), DefaultVariant(rank=1, pixels=False))


@dataclass(frozen=True)
class VariantSchedule:
    """A variant that applies to a kernel: what it did to each block and its trace (plain JSON)."""

    variant: DefaultVariant
    steps: tuple[str, ...]
    trace: object = field(repr=False, compare=False)

    def to_dict(self) -> dict:
        return {"variant": self.variant.to_dict(), "label": self.variant.label, "steps": list(self.steps)}


def default_variants(func: tvm.tirx.PrimFunc, cpu: CpuSpec, limit: int = 3) -> list[VariantSchedule]:
    """Up to ``limit`` schedules of ``func`` that the default rules make with one choice changed
    (:data:`VARIANTS` in order), each different from the default and from each other, each one
    TVM accepts and :mod:`explorer.schedule.lint` passes. Empty where the default is not a tiled
    schedule (an elementwise kernel: nothing to choose)."""
    import tvm_ffi

    if limit <= 0:
        return []
    scheduled, choice = default_schedule(func, cpu)
    if choice.rule != "full" or not any("register tile" in step for step in choice.steps):
        return []
    seen = {tvm_ffi.structural_hash(scheduled)}
    found: list[VariantSchedule] = []
    for variant in VARIANTS:
        if len(found) >= limit:
            break
        try:
            sch, steps = tiled(func, cpu, variant)
            mod_func = sch.mod["main"]
            if problems(mod_func):
                continue
        except Exception:  # noqa: BLE001 - a choice that does not apply to this kernel is no variant
            continue
        key = tvm_ffi.structural_hash(mod_func)
        trace = trace_json(sch)
        if key in seen or trace is None:
            continue
        seen.add(key)
        found.append(VariantSchedule(variant, tuple(steps), trace))
    return found


__all__ = ["VARIANTS", "DefaultVariant", "VariantSchedule", "default_variants"]
