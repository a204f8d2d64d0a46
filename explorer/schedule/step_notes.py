"""What a schedule step did besides the obvious, said to the user after it is applied (the Schedule
page shows it under the step form): costs that TVM adds silently and that a reader of the loop nest
would not see.

- a split whose factors do not divide the loop: TVM guards the extra iterations with a predicate;
- a buffer in "local" scope allocated inside a loop: on a CPU, TVM takes it from the runtime's
  workspace pool (an allocate and a free call) every time the loop runs.
"""

from __future__ import annotations

import math
from collections import Counter

import tvm
from tvm import s_tir, tirx

from explorer.schedule.defaults.tile_cost import STACK_BYTES
from explorer.schedule.steps import Step
from explorer.ir.tir_walk import children

# Scopes that are only memory on a CPU: the code generator keeps a "global" buffer under
# kMaxStackAlloca (STACK_BYTES) on the stack and allocates any other from the workspace.
_CPU_WORKSPACE_SCOPES = ("local", "shared", "shared.dyn")


def predicate_note(step: Step, before: tvm.IRModule, after: tvm.IRModule) -> str:
    """A note when a split's factors do not divide the loop: TVM then guards the extra iterations
    with a predicate (``T.where``) in every block under the loop, which costs a compare per
    iteration and can keep LLVM from vectorizing."""
    if step.primitive != "split":
        return ""
    count = before.script().count("T.where(")
    added = after.script().count("T.where(") - count
    if added <= 0:
        return ""
    factors = [f for f in step.args.get("factors", []) if f]
    return (f"the factors {factors} do not divide {step.args.get('loop')}'s extent: TVM added a predicate "
            f"(T.where) to guard the extra iterations. Factors that divide the extent avoid it.")


def buffers_allocated_in_loops(func: tirx.PrimFunc) -> Counter:
    """Buffers under 1 KB in a CPU workspace scope that ``func`` allocates inside a loop that runs
    more than once (thread-bound GPU loops aside), counted by (name, scope): when it lowers the
    schedule, TVM places an allocation at the innermost statement that holds every use of the
    buffer and shrinks it to the region used there. A buffer of 1 KB or more comes from the workspace in any scope: "global" would not help."""
    from tvm.s_tir import transform as st

    passes = (st.LowerInitBlock(), st.PlanAndUpdateBufferAllocationLocation(), st.ConvertBlocksToOpaque(),
              st.CompactBufferAllocation())  # the order TVM's own lowering runs them in
    planned = tvm.transform.Sequential(list(passes))(tvm.IRModule({"main": func}))["main"]
    found: Counter = Counter()

    def repeats(loop: tirx.For) -> bool:
        extent = loop.extent
        one = isinstance(extent, tirx.IntImm) and int(extent.value) <= 1
        return not one and loop.kind != tirx.ForKind.THREAD_BINDING

    def visit(stmt, in_loop: bool) -> None:
        if isinstance(stmt, s_tir.SBlock) and in_loop:
            for buf in stmt.alloc_buffers:
                if buf.scope() in _CPU_WORKSPACE_SCOPES and _bytes(buf) < STACK_BYTES:
                    found[(str(buf.name), buf.scope())] += 1
        inner = in_loop or (isinstance(stmt, tirx.For) and repeats(stmt))
        for child in children(stmt):
            visit(child, inner)

    visit(planned.body, False)
    return found


def _bytes(buf) -> int:
    """Bytes of ``buf`` (a shape that is not constant counts as large)."""
    try:
        return math.prod(int(d) for d in buf.shape) * buf.dtype.bits * buf.dtype.lanes // 8
    except (TypeError, ValueError):
        return STACK_BYTES


def workspace_note(before: tvm.IRModule, after: tvm.IRModule) -> str:
    """A note when the step leaves a small buffer in "local" (or "shared") scope allocated inside a
    loop. On a CPU, TVM allocates such a buffer from the runtime's workspace pool, an allocate and a
    free call every time the loop around it runs; a "global" buffer under 1 KB goes on the stack,
    where LLVM keeps it in registers: a register tile in "local" scope runs several times slower
    (docs/notes/measurements.md). On a GPU, "local" is the registers: right there."""
    added = sorted((buffers_allocated_in_loops(after["main"]) - buffers_allocated_in_loops(before["main"])).keys())
    if not added:
        return ""
    names = ", ".join(f"{name} (\"{scope}\")" for name, scope in added)
    verb = "is" if len(added) == 1 else "are"
    return (f"{names} {verb} allocated inside a loop. On a CPU target TVM takes such a buffer from the "
            f"runtime's workspace pool (an allocate and a free call) every time the loop runs; scope "
            f"\"global\" keeps a buffer under 1 KB on the stack, in registers. On a GPU, \"local\" and "
            f"\"shared\" are right.")


def step_note(step: Step, before: tvm.IRModule, after: tvm.IRModule) -> str:
    """Every note about ``step`` (empty when there is none), one sentence group after another. A
    note never fails a step TVM accepted: one that cannot be worked out is left out."""
    notes = []
    for note in (lambda: predicate_note(step, before, after), lambda: workspace_note(before, after)):
        try:
            notes.append(note())
        except Exception:  # noqa: BLE001 - TVM's analysis passes may refuse an intermediate schedule
            continue
    return " ".join(n for n in notes if n)


__all__ = ["buffers_allocated_in_loops", "predicate_note", "step_note", "workspace_note"]
