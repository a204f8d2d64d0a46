"""Sketches: the design spaces MetaSchedule's schedule rules generate for a kernel (Ansor's
"sketch generation"), shown as steps with their sampling decisions still open, and concrete
schedules sampled from them.

A sketch is a trace whose tile sizes, unroll factors and compute locations are *sampling
instructions*; the evolutionary search fills them in. Which rule shaped a sketch is read from
what the rules leave in the trace (MultiLevelTiling annotates ``tiling_structure``,
ParallelizeVectorizeUnroll the root block, AddRFactor calls rfactor, ...).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import tvm

from explorer.kernels import Kernel
from explorer.ir.plain import to_plain
from explorer.schedule.steps import Step
from explorer.schedule.trace import trace_to_steps
from explorer.target import Target, parse_target
from explorer.tvm_fast import light_tensor_intrin
from search.errors import SearchError

# What each default CPU rule leaves in a trace, so a sketch can say which rules made it.
_RULE_MARKS = {
    "MultiLevelTiling": ("meta_schedule.tiling_structure",),
    "ParallelizeVectorizeUnroll": ("meta_schedule.parallel", "meta_schedule.vectorize", "meta_schedule.unroll"),
    "AddRFactor": ("RFactor",),
    "AutoInline": ("ComputeInline", "ReverseComputeInline"),
    "RandomComputeLocation": ("meta_schedule.random_compute_producer", "SampleComputeLocation"),
    "CrossThreadReduction": ("meta_schedule.cross_thread_reduction",),
    "MultiLevelTilingWithIntrin": ("meta_schedule.auto_tensorize",),
}


@dataclass(frozen=True)
class Sketch:
    """One design space: open steps to read, the trace to sample from, the rules that made it."""

    index: int
    rules: tuple[str, ...]
    open_steps: tuple[Step, ...]
    trace: object
    decisions: int

    def to_dict(self) -> dict:
        d = asdict(self)
        d["open_steps"] = [s.to_dict() for s in self.open_steps]
        return d


def _cpu_target(target: Target | str | None) -> Target:
    target = parse_target(target)
    if not target.searchable:
        raise SearchError(f"sketches come from MetaSchedule's CPU rules; {target.label} is not a CPU target")
    return target


def default_rule_names(target: Target | str | None = None) -> list[str]:
    """Names of the target's default schedule rules, in MetaSchedule's order."""
    from tvm.s_tir import meta_schedule as ms

    target = _cpu_target(target)
    light_tensor_intrin(target.intrinsics)
    return [type(r).__name__ for r in ms.ScheduleRule.create(target.tvm().kind.name)]


def space_generator(target: Target, rules: list[str] | None, *, microkernel: bool = False, int8: bool = False):
    """MetaSchedule's post-order-apply space generator for a CPU ``target`` (one its caller
    checked: a search's, :func:`tune_context`'s) with the default rules, or only ``rules``;
    with ``microkernel`` the rules also tile fp32 blocks around the target's FMA micro-kernel
    (:mod:`explorer.schedule.microkernel`), and a target without one is a :class:`SearchError`;
    with ``int8`` (a task holding the int8 kernels of a quantized model) they tile those around
    the target's int8 dot-product instructions (:mod:`explorer.schedule.int8_dot`), where it has them."""
    from tvm.s_tir import meta_schedule as ms

    from explorer.schedule import int8_dot
    from explorer.schedule import microkernel as mk
    from search.pool_rules import register_pool_rules

    light_tensor_intrin(target.intrinsics)
    register_pool_rules()  # TOPI's pools name custom rules TVM does not register: the default rules, quietly
    dot_rules = int8_dot.schedule_rules(target) if int8 else []
    if rules is None and not microkernel and not dot_rules:
        return "post-order-apply"
    kind = target.tvm().kind.name
    defaults = list(ms.ScheduleRule.create(kind))
    intrinsic = []  # schedx's own tensor intrinsics, tried just before MultiLevelTiling
    if microkernel:
        why = mk.why_not(target)
        if why:
            raise SearchError(f"no FMA micro-kernel for this search: {why}")
        intrinsic.append(mk.schedule_rule(target))
    known = [type(r).__name__ for r in defaults + intrinsic]
    unknown = sorted(set(rules or ()) - set(known))
    if unknown:
        raise SearchError(f"unknown schedule rule(s) {', '.join(unknown)}; this target has: {', '.join(known)}")
    chosen = [r for r in defaults if rules is None or type(r).__name__ in rules]
    intrinsic = [r for r in intrinsic if rules is None or type(r).__name__ in rules] + dot_rules
    at = next((i for i, r in enumerate(chosen) if type(r).__name__ == "MultiLevelTiling"), len(chosen))
    postprocs = mk.postprocs() if intrinsic else ms.Postproc.create(kind)
    return ms.space_generator.PostOrderApply(sch_rules=chosen[:at] + intrinsic + chosen[at:], postprocs=postprocs,
                                             mutator_probs=ms.Mutator.create(kind))


def tune_context(kernel: Kernel, target: Target | str | None, rules: list[str] | None = None, seed: int = 0, *,
                 microkernel: bool = False):
    from tvm.s_tir import meta_schedule as ms

    from explorer.schedule.int8_dot import has_int8_kernel

    target = _cpu_target(target)
    gen = space_generator(target, rules, microkernel=microkernel, int8=has_int8_kernel(kernel.func))
    return ms.TuneContext(mod=tvm.IRModule({"main": kernel.func}), target=target.tvm(),
                          space_generator=gen, search_strategy="evolutionary", num_threads=2, rand_state=seed)


def _rules_of(trace_json: object) -> tuple[str, ...]:
    text = str(trace_json)
    return tuple(rule for rule, marks in _RULE_MARKS.items() if any(m in text for m in marks))


def generate_sketches(kernel: Kernel, target: Target | str | None, rules: list[str] | None = None, *,
                      microkernel: bool = False) -> list[Sketch]:
    """The kernel's design spaces under the target's rules (or only ``rules``; with ``microkernel``
    also those tiled around the target's FMA micro-kernel)."""
    ctx = tune_context(kernel, target, rules, microkernel=microkernel)
    out = []
    for i, space in enumerate(ctx.generate_design_space()):
        trace_json = to_plain(space.trace.as_json())
        decisions = sum(1 for inst in space.trace.insts if inst.kind.name.startswith("Sample"))
        out.append(Sketch(i, _rules_of(trace_json), tuple(trace_to_steps(kernel.func, trace_json, open_samples=True)),
                          trace_json, decisions))
    return out


def sample_schedule(kernel: Kernel, sketch: Sketch, target: Target | str | None, seed: int = 0, tries: int = 20, *,
                    microkernel: bool = False) -> list[Step]:
    """A concrete schedule drawn from ``sketch``: its sampling decisions drawn anew (seeded), the
    target's postprocessors applied (as MetaSchedule does before measuring), as steps."""
    from tvm import s_tir

    from explorer.schedule.trace import replay

    ctx = tune_context(kernel, target, None, seed, microkernel=microkernel)
    recorded = replay(kernel.func, sketch.trace).trace
    for attempt in range(tries):
        sch = s_tir.Schedule(kernel.func, seed=seed * 1000 + attempt + 1)
        recorded.apply_to_schedule(sch, True, lambda inst, inputs, attrs, decision:
                                   None if inst.kind.name.startswith("Sample") else decision)
        if all(p.apply(sch) for p in ctx.space_generator.postprocs):
            return trace_to_steps(kernel.func, to_plain(sch.trace.as_json()))
    raise SearchError(f"no valid schedule sampled from sketch {sketch.index} in {tries} tries")
