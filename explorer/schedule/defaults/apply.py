"""Pick and apply the default schedule of a kernel, and of every unscheduled kernel of a module.

For one PrimFunc (:func:`default_schedule`), the rules are tried from the best to the safest,
each on a fresh copy; the first that TVM accepts and that :mod:`explorer.schedule.lint` finds
nothing wrong with is kept:

1. ``full``: cheap blocks inlined (:mod:`.inline`), a quantized model's int8 kernel tiled around
   the CPU's dot-product instruction (:mod:`.int8`), a bf16 build's products around its bf16 one
   (:mod:`.bf16`), else the biggest reduction with a vector axis
   register-tiled with its epilogue (:mod:`.tiling`), every other block parallel and vectorized
   (:mod:`.simple`);
   (tried again with the rows of one output row, should running two output axes as one fail on
   a kernel, then with tiles that divide the rows, should a tail of rows fail); a kernel that
   reduces rows and maps them (layer norm, softmax) runs row by row in one loop (:mod:`.row_chain`), the
   block-by-block rules being the next try;
2. ``safe``: no inlining; each block's outer loop parallel and inner loop vectorized;
3. ``none``: the kernel as it was (only if TVM refuses even that).

A module (:func:`apply_default_schedules`) gets this for each PrimFunc that has no schedule yet
(no ``tirx.is_scheduled``); equal PrimFuncs are scheduled once. A recurrent layer's kernel
(:mod:`.recurrence`) is written again for the CPU's vector width. It takes seconds for ResNet-18.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import partial

import tvm
from tvm import s_tir

from explorer.errors import short_tvm_message
from explorer.ir.tir_walk import SCHEDULED_ATTR, is_scheduled
from explorer.schedule.defaults.recurrence import for_target as recurrence_for_target
from explorer.schedule.defaults.recurrence_spec import spec_of as recurrence_spec
from explorer.schedule.defaults.analysis import NotApplicable, block_facts, root_blocks
from explorer.schedule.defaults.bf16 import bf16_block, tile_bf16
from explorer.schedule.defaults.bf16_conv import scheduled_already
from explorer.schedule.defaults.bf16_panels import schedule_panels
from explorer.schedule.defaults.declined_dot import DeclinedDot
from explorer.schedule.defaults.expand_depthwise import expand_depthwise_blocks, schedule_expand_depthwise
from explorer.schedule.defaults.inline import inline_epilogues, inline_producers
from explorer.schedule.defaults.int8 import int8_block, tile_int8
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.row_chain import row_chain, schedule_row_chain
from explorer.schedule.defaults.simple import safe_schedule, schedule_plain
from explorer.schedule.defaults.tiling import tile_reduction
from explorer.schedule.defaults.variant import DefaultVariant
from explorer.schedule.lint import problems

RECURRENCE_STEP = "recurrent layer: every step in one kernel, written for the CPU's vector width (explorer.schedule.defaults.recurrence)"
RULE_ATTR = "schedx.default_rule"


@dataclass(frozen=True)
class DefaultChoice:
    """What a kernel got: ``rule`` (full, safe, none), what was done to each block, and why a
    better rule was not used (empty when the first rule applied)."""

    rule: str
    steps: tuple[str, ...] = ()
    fallback_reason: str = ""
    trace: object = field(default=None, compare=False, repr=False)  # MetaSchedule trace JSON (plain data)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["steps"] = list(self.steps)
        d["has_trace"] = d.pop("trace") is not None
        return d


def _fresh(func: tvm.tirx.PrimFunc) -> s_tir.Schedule:
    from explorer.workload.keys import owned_task_module

    return s_tir.Schedule(owned_task_module(func))


def _anchor(sch: s_tir.Schedule):
    """The reduction block with the most iterations (a conv, matmul or pool), if any."""
    reductions = [(block_facts(sch, b).volume, i, b) for i, b in enumerate(root_blocks(sch))
                  if not block_facts(sch, b).is_spatial]
    return max(reductions, key=lambda t: (t[0], -t[1]))[2] if reductions else None


def _rest(sch: s_tir.Schedule, cpu: CpuSpec, names: list[str]) -> list[str]:
    """The root blocks called ``names``: spatial ones fused and vectorized, reductions by rows."""
    return [schedule_panels(sch, sch.get_sblock(name), cpu) or schedule_plain(sch, sch.get_sblock(name), cpu)
            for name in names]


def _at_root(sch: s_tir.Schedule, name: str, anchor) -> bool:
    """Whether block ``name`` still exists and is not nested in ``anchor``'s loops."""
    try:
        block = sch.get_sblock(name)
    except Exception:  # noqa: BLE001 - inlined into another block: gone
        return False
    try:
        anchor_loops = sch.get_loops(anchor)
    except Exception:  # noqa: BLE001 - the anchor is gone: loop_partition copied it into parts (a tail of
        anchor_loops = []  # rows), whose loops are under blocks of their own, never at the root
    loops = sch.get_loops(block)
    return not (loops and anchor_loops and sch.get(loops[0]).same_as(sch.get(anchor_loops[0])))


def tiled(func: tvm.tirx.PrimFunc, cpu: CpuSpec, variant: DefaultVariant = DefaultVariant()
          ) -> tuple[s_tir.Schedule, list[str]]:
    """The ``full`` rule: producers and epilogues inlined, the reduction register-tiled (``variant``
    picks among its choices, :mod:`.variant`), the schedule and its steps."""
    sch = _fresh(func)
    fused = expand_depthwise_blocks(sch) if variant == DefaultVariant() else None
    if fused is not None:  # an expansion inside its depthwise conv: by bands (the next rows: block by block)
        return sch, schedule_expand_depthwise(sch, fused, cpu)
    inline_producers(sch)
    inline_epilogues(sch)
    steps: list[str] = []
    names = [sch.get(b).name_hint for b in root_blocks(sch)]
    chain_blocks = row_chain(sch, cpu) if variant == DefaultVariant() else None
    if chain_blocks is not None and int8_block(sch) is None and bf16_block(sch) is None:
        # layer norm, softmax: row by row in one loop (the next rule: block by block)
        chain = sch.copy()  # (the blocks' handles hold in the copy)
        try:
            return chain, schedule_row_chain(chain, cpu, chain_blocks)
        except s_tir.ScheduleError:
            pass  # the blocks one by one, below
    anchor = _anchor(sch)
    dot_block, tile_dot = int8_block(sch), tile_int8
    if dot_block is None:  # a bf16 build's product: around the bf16 instruction (the variant's, if it names one)
        dot_block = bf16_block(sch)
        tile_dot = partial(tile_bf16, isa=variant.bf16_isa, rows=variant.bf16_rows, cols=variant.bf16_cols)
    if dot_block is not None:  # a quantized model's int8 kernel: around the dot-product instruction
        name = sch.get(dot_block).name_hint
        try:
            steps.append(tile_dot(sch, dot_block, cpu))
        except NotApplicable as why:
            if variant.bf16_isa and tile_dot is not tile_int8:  # a bf16 choice that does not fit: no such variant
                raise
            int8 = tile_dot is tile_int8
            steps.append(DeclinedDot(name, "int8" if int8 else "bf16", str(why),
                                     cpu_lacks=not (cpu.int8_dot if int8 else cpu.bf16_dot)).step)
        else:
            names = [n for n in names if n != name and not scheduled_already(sch, n)]  # (a bf16 conv's packing)
            anchor = None
    if anchor is not None:
        name = sch.get(anchor).name_hint
        try:
            steps.append(tile_reduction(sch, anchor, cpu, tails=variant.tails, pixels=variant.pixels,
                                        rank=variant.rank))
        except NotApplicable:
            if variant.rank:  # a tile the ranking does not have: no such variant (the best one stays the default)
                raise
        else:  # the epilogue it took in is under its loops now (a padding stays at the root); the rest remain
            names.remove(name)
            names = [n for n in names if _at_root(sch, n, anchor)]
    steps += _rest(sch, cpu, names)
    return sch, steps


def _safe(func: tvm.tirx.PrimFunc, cpu: CpuSpec) -> tuple[s_tir.Schedule, list[str]]:
    sch = _fresh(func)
    return sch, [safe_schedule(sch, b, cpu) for b in root_blocks(sch)]


# The rules by row, tried in order: ``full`` as its model chooses, then with the rows of one output
# row (should running two output axes as one fail on a kernel), then with tiles that divide the
# rows (should a tail of rows fail); ``safe`` (no variant) last. Rows of the same type as the
# variants a search measures (:data:`explorer.schedule.defaults.variants.VARIANTS`).
RULES: tuple[tuple[str, DefaultVariant | None], ...] = (
    ("full", DefaultVariant()), ("full", DefaultVariant(pixels=False)), ("full", DefaultVariant(tails=False)),
    ("safe", None))


def _make(func: tvm.tirx.PrimFunc, cpu: CpuSpec, variant: DefaultVariant | None) -> tuple[s_tir.Schedule, list[str]]:
    """The schedule of one row of :data:`RULES`: the ``full`` rule with ``variant``, else ``safe``."""
    return _safe(func, cpu) if variant is None else tiled(func, cpu, variant)


def trace_json(sch: s_tir.Schedule):
    """The schedule as a MetaSchedule trace in plain JSON (it replays on the unscheduled task: a
    search can start from it, a store can keep it as a record), or None if TVM cannot say it."""
    from explorer.ir.plain import to_plain

    try:
        return to_plain(sch.trace.as_json())
    except Exception:  # noqa: BLE001 - a schedule without a serialisable trace is still a schedule
        return None


def _reason(err: Exception) -> str:
    """One line of why a rule failed (TVM's ScheduleError puts it after the IR it prints)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    said = [ln.removeprefix("Error message:").strip() for ln in lines if ln.startswith("Error message:")]
    return (said[-1] if said else short_tvm_message(err, 200))[:200]


def _recurrence(func: tvm.tirx.PrimFunc, cpu: CpuSpec) -> tuple[tvm.tirx.PrimFunc, DefaultChoice] | None:
    """A recurrent layer's kernel written again for ``cpu``'s vector width, else None."""
    spec = recurrence_spec(func)
    if spec is None:
        return None
    return recurrence_for_target(func, lanes=cpu.lanes(spec.dtype)), DefaultChoice("full", (RECURRENCE_STEP,))


def default_schedule(func: tvm.tirx.PrimFunc, cpu: CpuSpec) -> tuple[tvm.tirx.PrimFunc, DefaultChoice]:
    """``func`` with the best default rule that applies (see the module docstring), and the choice.

    Never raises for a rule that does not fit: the next rule is tried, and the last resort is
    ``func`` unchanged."""
    sequence = _recurrence(func, cpu)
    if sequence is not None:
        return sequence
    reasons = []
    for rule, variant in RULES:
        try:
            sch, steps = _make(func, cpu, variant)
            scheduled = sch.mod["main"]
            found = problems(scheduled)
            if found:
                raise NotApplicable("; ".join(found))
        except Exception as err:  # noqa: BLE001 - any refusal sends the kernel to the next, simpler rule
            reasons.append(f"{rule}: {_reason(err)}")
            continue
        return scheduled, DefaultChoice(rule, tuple(steps), "; ".join(reasons), trace_json(sch))
    return func, DefaultChoice("none", (), "; ".join(reasons))


def safe_default(func: tvm.tirx.PrimFunc, cpu: CpuSpec) -> tuple[tvm.tirx.PrimFunc, DefaultChoice]:
    """``func`` with the last rule alone (outer loop parallel, inner loop vectorized where TVM
    agrees), or unchanged where even that fails."""
    rule, variant = RULES[-1]
    try:
        sch, steps = _make(func, cpu, variant)
    except Exception as err:  # noqa: BLE001
        return func, DefaultChoice("none", (), f"{rule}: {_reason(err)}")
    return sch.mod["main"], DefaultChoice(rule, tuple(steps), "its first choice did not compile")


def _finish(scheduled: tvm.tirx.PrimFunc, original: tvm.tirx.PrimFunc, rule: str) -> tvm.tirx.PrimFunc:
    """``scheduled`` with the original's attributes (global symbol, op pattern), marked scheduled."""
    func = scheduled
    for key in list((func.attrs or {}).keys()):
        if key not in (original.attrs or {}) and key != "tirx.noalias":
            func = func.without_attr(key)
    for key, value in (original.attrs or {}).items():
        func = func.with_attr(key, value)
    return func.with_attr(SCHEDULED_ATTR, True).with_attr(RULE_ATTR, rule)


def apply_default_schedules(mod: tvm.IRModule, cpu: CpuSpec, safe: frozenset[str] = frozenset()
                            ) -> tuple[tvm.IRModule, dict[str, DefaultChoice]]:
    """``mod`` (a copy) with a default schedule on every PrimFunc not scheduled yet, and the choice
    made for each of them, by function name; the functions named in ``safe`` take the last rule
    only (their first choice did not compile: :func:`export.build.build`)."""
    import tvm_ffi

    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    choices: dict[str, DefaultChoice] = {}
    done: dict[int, tuple[tvm.tirx.PrimFunc, DefaultChoice]] = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        if is_scheduled(func) and recurrence_spec(func) is None:
            continue  # scheduled already; a recurrent layer's kernel is written again for this CPU
        if gv.name_hint in safe:
            scheduled, choice = safe_default(func, cpu)
        else:
            key = tvm_ffi.structural_hash(func)
            if key not in done:
                done[key] = default_schedule(func, cpu)
            scheduled, choice = done[key]
        choices[gv.name_hint] = choice
        if choice.rule != "none":
            out[gv] = _finish(scheduled, func, choice.rule)
    return out, choices


__all__ = ["RULES", "RULE_ATTR", "SCHEDULED_ATTR", "DefaultChoice", "apply_default_schedules", "default_schedule",
           "safe_default", "tiled", "trace_json"]
