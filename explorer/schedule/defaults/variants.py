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

A bf16 product (:mod:`.bf16`: ``vdpbf16ps`` steps or AMX tiles) has no register tile of the
general rule's; its own choices are the instructions (an AMX CPU also has ``vdpbf16ps``) and the
block one call computes (rows by panels of a ``vdpbf16ps`` step, the grid of AMX tiles):
:data:`BF16_VARIANTS`. MetaSchedule's sketches never call those instructions (measured: 1.5-9.5 ms
against 14 us for the default on a bf16 dense kernel), so without these a bf16 search could only
win on the fp32 kernels around the products.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm

from explorer.schedule.defaults.apply import default_schedule, tiled, trace_json
from explorer.schedule.defaults.bf16 import bf16_block
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.variant import DefaultVariant
from explorer.schedule.lint import problems


# tried in this order, each once: the tiles the model ranks next first (where it errs most: a few
# percent between neighbours), then the rows' two structural choices
VARIANTS = (DefaultVariant(rank=1), DefaultVariant(pixels=False), DefaultVariant(rank=2),
            DefaultVariant(tails=False), DefaultVariant(rank=3), DefaultVariant(rank=1, pixels=False))
# a bf16 product's, tried in this order: on an AMX CPU the other grids of tiles (measured on Emerald
# Rapids, 2 cores: 1 x 1 tiles 26% faster than the rule's 2 x 2 on a 32 x 256 x 1024 product, more
# calls to share; 1 x 2 and 2 x 1 20% faster on a 28 x 28 x 64 3x3 convolution; vdpbf16ps 4-10x
# slower: last), then vdpbf16ps steps of other sizes (16 rows x 1 panel 14% faster than the rule's
# 8 x 2 on the 32 x 256 x 1024 product). On a CPU without AMX, or a kernel AMX does not fit, the
# AMX rows are no variant and drop out; where AMX is not used, vdpbf16ps at its own sizes is the
# default (skipped).
BF16_VARIANTS = (DefaultVariant(bf16_isa="amx", bf16_rows=1, bf16_cols=1),
                 DefaultVariant(bf16_isa="amx", bf16_rows=1, bf16_cols=2),
                 DefaultVariant(bf16_isa="amx", bf16_rows=2, bf16_cols=1),
                 DefaultVariant(bf16_isa="avx512bf16", bf16_rows=16, bf16_cols=1),
                 DefaultVariant(bf16_isa="avx512bf16", bf16_rows=4),
                 DefaultVariant(bf16_isa="avx512bf16", bf16_cols=1),
                 DefaultVariant(bf16_isa="avx512bf16", bf16_rows=4, bf16_cols=4),
                 DefaultVariant(bf16_isa="avx512bf16"))


@dataclass(frozen=True)
class VariantSchedule:
    """A variant that applies to a kernel: what it did to each block and its trace (plain JSON)."""

    variant: DefaultVariant
    steps: tuple[str, ...]
    trace: object = field(repr=False, compare=False)

    def to_dict(self) -> dict:
        return {"variant": self.variant.to_dict(), "label": self.variant.label, "steps": list(self.steps)}


def has_bf16_product(func: tvm.tirx.PrimFunc) -> bool:
    """Whether ``func`` computes a bf16 product (:mod:`explorer.passes.bf16_dense`, ``bf16_conv``)."""
    from tvm import s_tir

    return bf16_block(s_tir.Schedule(func)) is not None


def default_variants(func: tvm.tirx.PrimFunc, cpu: CpuSpec, limit: int = 3) -> list[VariantSchedule]:
    """Up to ``limit`` schedules of ``func`` that the default rules make with one choice changed
    (:data:`BF16_VARIANTS` for a bf16 product, :data:`VARIANTS` for a register tile, in order),
    each different from the default and from each other, each one TVM accepts and
    :mod:`explorer.schedule.lint` passes. Empty where the default is not a tiled
    schedule (an elementwise kernel: nothing to choose)."""
    import tvm_ffi

    if limit <= 0:
        return []
    scheduled, choice = default_schedule(func, cpu)
    if choice.rule != "full":
        return []
    space = (BF16_VARIANTS if cpu.bf16_dot and has_bf16_product(func) else ()) + \
        (VARIANTS if any("register tile" in step for step in choice.steps) else ())
    seen = {tvm_ffi.structural_hash(scheduled)}
    found: list[VariantSchedule] = []
    for variant in space:
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


__all__ = ["BF16_VARIANTS", "VARIANTS", "DefaultVariant", "VariantSchedule", "default_variants", "has_bf16_product"]
