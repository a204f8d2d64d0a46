"""What a task's fastest schedules chose, beside what its default schedule chose: the Search
page's decisions view (Optuna Dashboard's parameter view). Plain data, drawn in ``app/``.

A MetaSchedule schedule's choices are its sampling decisions (a tile's factors, the unroll
depth, where a block is computed); the default rules and their variants sample nothing: their
traces split loops by fixed factors. Both are read the same way here, from the trace's own
instructions before post-processing: the factors of every ``Split`` of a block's loop (sampled
or fixed), the unroll depth a ``SampleCategorical`` chose (or the loops the rules unrolled), a
sampled compute location. Loops are named by their position in the block that the schedule
tiles first (``loop 3``: the block's third loop; a loop split twice: ``loop 3.2``), so the
default's tiles and a winner's line up: the view shows them side by side and marks each choice
that differs from the default's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from store import Record
from store.outcome import Outcome

_UNROLL = {"meta_schedule.unroll_explicit": "unroll", "meta_schedule.unroll_implicit": "unroll (implicit)"}
NOT_CHOSEN = "-"  # a choice the schedule does not make (a loop it leaves whole)


@dataclass(frozen=True)
class ScheduleChoices:
    """One schedule's column of the view: the record, its name in words (``default``, ``default
    rules, tile ranked 4``, ``MetaSchedule sketch``), its speed, and its choices by name."""

    record_id: int
    name: str
    gflops: float
    vs_default: float | None  # its GFLOPS over the default's (None: the default was not timed)
    choices: dict[str, str]

    @property
    def title(self) -> str:
        return f"#{self.record_id} {self.name}"


@dataclass(frozen=True)
class DecisionView:
    """The choices of a task's fastest schedules: ``schedules`` (the default first when it was
    timed), ``names`` of the choices in the order shown."""

    schedules: tuple[ScheduleChoices, ...]
    names: tuple[str, ...]
    has_default: bool

    def value(self, schedule: int, name: str) -> str:
        return self.schedules[schedule].choices.get(name, NOT_CHOSEN)

    def differs(self, schedule: int, name: str) -> bool:
        """Whether schedule ``schedule`` chose otherwise than the default (never for the default)."""
        if not self.has_default or schedule == 0:
            return False
        return self.value(schedule, name) != self.value(0, name)

    def differences(self, schedule: int) -> list[str]:
        """The choices of ``schedule`` that differ from the default's."""
        return [n for n in self.names if self.differs(schedule, n)]


def schedule_name(record: Record) -> str:
    """Where a schedule came from, in words (:func:`search.confirm_round.origin`)."""
    from search.confirm_round import origin

    return origin(record)


def decision_view(records: list[Record], *, k: int = 5) -> DecisionView:
    """The view of one task's ``records``: its default schedule (the fastest record of it) and
    the ``k`` fastest other schedules (one record each: a schedule timed again by the
    confirmation round counts once), each with its choices (:func:`trace_choices`); the size of
    a loop a default leaves to be inferred (``None`` in its split) is worked out from the tiles
    the search sampled for the same loop, whose factors multiply to its extent."""
    ranked = sorted((r for r in records if r.status == Outcome.OK and r.gflops and r.trace),
                    key=lambda r: -r.gflops)
    default = next((r for r in ranked if r.source == "default"), None)
    seen = {_trace_key(default.trace)} if default is not None else set()
    shown = [default] if default is not None else []
    for r in ranked:
        key = _trace_key(r.trace)
        if r is default or key in seen:
            continue
        seen.add(key)
        shown.append(r)
        if len(shown) >= k + (default is not None):
            break
    parsed = [trace_choices(r.trace) for r in shown]
    extents = {name: math.prod(f) for choices, sampled in parsed for name, f in sampled.items()}
    schedules = []
    for r, (choices, _) in zip(shown, parsed):
        shown_choices = {name: _shown(v, extents.get(name)) for name, v in choices.items()}
        schedules.append(ScheduleChoices(
            r.id, schedule_name(r), round(r.gflops, 1),
            round(r.gflops / default.gflops, 2) if default is not None else None, shown_choices))
    names = sorted({n for s in schedules for n in s.choices}, key=_order)
    return DecisionView(tuple(schedules), tuple(names), default is not None)


def trace_choices(trace) -> tuple[dict[str, object], dict[str, list[int]]]:
    """The choices a MetaSchedule trace (plain JSON: instructions, decisions) makes before its
    post-processing, by name (``tile loop 2``: a list of factors, None where inferred, of a loop
    of the block with the most loops; ``tiles of other blocks``; ``unroll``; ``compute at
    pad_temp``; ``choice 1``...), and the tiles among them that were sampled whole (their factors
    multiply to the loop's extent)."""
    from store.compare import trace_parts

    insts, decisions = trace_parts(trace)
    blocks: dict[str, str] = {}  # block RV -> its name (a name TVM gives, else "block N")
    loops: dict[str, tuple[str, str]] = {}  # loop RV -> (block name, loop label)
    depth: dict[str, int] = {}  # block name -> how many loops it has
    values: dict[str, object] = {}  # RV sampled -> the value chosen
    sampled_rv: dict[str, int] = {}  # RV -> the instruction that sampled it
    choices: dict[str, object] = {}
    tiles: list[tuple[str, str, list, bool]] = []  # (block, loop label, factors, sampled whole)
    unrolled: list[tuple[str, str]] = []  # (block, loop label)
    categorical: list[str] = []  # RVs a SampleCategorical chose, in order
    annotated: set[str] = set()  # ... of them an unroll annotation names
    for index, inst in enumerate(insts):
        if not isinstance(inst, list) or len(inst) < 4:
            continue
        kind, inputs, attrs, outputs = inst[0], inst[1] or [], inst[2] or [], inst[3] or []
        if kind == "EnterPostproc":
            break
        if kind == "GetSBlock" and outputs:
            blocks[outputs[0]] = str(attrs[0]) if attrs else "?"
        elif kind == "GetChildBlocks":
            for n, rv in enumerate(outputs):
                blocks.setdefault(rv, f"block {n + 1}")
        elif kind == "GetLoops" and inputs:
            block = blocks.get(inputs[0], "?")
            depth[block] = max(depth.get(block, 0), len(outputs))
            for n, rv in enumerate(outputs):
                loops[rv] = (block, f"loop {n + 1}")
        elif kind == "SamplePerfectTile" and index in decisions:
            for rv, v in zip(outputs, decisions[index]):
                values[rv], sampled_rv[rv] = v, index
        elif kind == "SampleCategorical" and index in decisions and outputs:
            candidates = attrs[0] if attrs and isinstance(attrs[0], list) else []
            chosen = decisions[index]
            values[outputs[0]] = candidates[chosen] if isinstance(chosen, int) and 0 <= chosen < len(candidates) \
                else chosen
            sampled_rv[outputs[0]] = index
            categorical.append(outputs[0])
        elif kind == "SampleComputeLocation" and index in decisions and inputs:
            where = decisions[index]
            place = {-1: "root", -2: "inline"}.get(where, f"loop {where}") if isinstance(where, int) else str(where)
            choices[f"compute at {blocks.get(inputs[0], '?')}"] = place
        elif kind == "Split" and inputs and inputs[0] in loops:
            block, label = loops[inputs[0]]
            factors = [values.get(f) if isinstance(f, str) and f != "None" else (None if f == "None" else f)
                       for f in inputs[1:]]
            tiles.append((block, label, factors, all(isinstance(f, str) and f in sampled_rv for f in inputs[1:])))
            for n, rv in enumerate(outputs):
                loops[rv] = (block, f"{label}.{n + 1}")
        elif kind == "Annotate" and len(inputs) > 1 and attrs and attrs[0] in _UNROLL:
            value = values.get(inputs[1], inputs[1])
            choices[_UNROLL[attrs[0]]] = "none" if value == 0 else f"up to {value} steps"
            annotated.add(inputs[1])
        elif kind == "Unroll" and inputs and inputs[0] in loops:
            unrolled.append(loops[inputs[0]])
    for n, rv in enumerate((rv for rv in categorical if rv not in annotated), 1):  # choices nothing names
        choices[f"choice {n}"] = values[rv]
    # the block with the most loops is the computation (a convolution's seven); the others pad,
    # pack or write back, and their tiles share one line
    main = max((b for b, *_ in tiles), key=lambda b: depth.get(b, 0), default=None)
    sampled: dict[str, list[int]] = {}
    others = []
    for block, label, factors, whole in tiles:
        if block != main:
            others.append(f"{block} {label} {_shown(factors, None)}")
            continue
        choices[f"tile {label}"] = factors
        if whole:
            sampled[f"tile {label}"] = [int(v) for v in factors]
    if others:
        choices["tiles of other blocks"] = "; ".join(others)
    inner = [label for block, label in unrolled if block == main]
    if inner and "unroll" not in choices:
        choices["unroll"] = "whole " + ", ".join(inner)
    return choices, sampled


def _shown(value, extent: int | None) -> str:
    """A choice as the view shows it: tile factors as ``[16, 4]`` (an inferred factor worked out
    from the loop's ``extent`` where known, else ``*``), anything else as text."""
    if isinstance(value, list):
        known = math.prod(f for f in value if isinstance(f, int)) or 1
        factors = [f if f is not None else (math.ceil(extent / known) if extent else "*") for f in value]
        return "[" + ", ".join(str(f) for f in factors) + "]"
    return str(value)


def _order(name: str) -> tuple:
    """Tiles first (by loop, then other blocks'), then unrolling, compute locations, choices."""
    rank = 0 if name.startswith("tile loop") else 1 if name.startswith("tiles ") else \
        2 if name.startswith("unroll") else 3 if name.startswith("compute at") else 4
    return (rank, [int(p) if p.isdigit() else p for p in name.replace(".", " ").split()])


def _trace_key(trace) -> str:
    return json.dumps(trace, sort_keys=True, default=str)


__all__ = ["DecisionView", "NOT_CHOSEN", "ScheduleChoices", "decision_view", "schedule_name", "trace_choices"]
