"""Two records side by side: their steps aligned, the arguments that differ, and the sampling
decisions of their MetaSchedule traces that differ. Pure data in, plain JSON out."""

from __future__ import annotations

import difflib

from store.records import Record


def _summary(r: Record) -> dict:
    return {"id": r.id, "workload_key": r.workload_key, "source": r.source, "status": r.status, "target": r.target,
            "hardware": r.hardware, "median_s": r.median_s, "gflops": r.gflops, "created": r.created,
            "steps": len(r.steps or [])}


def _align(a: list, b: list, sig) -> list[tuple[int | None, int | None]]:
    """Index pairs aligning two sequences on ``sig(item)`` (difflib), unmatched items paired with None."""
    pairs: list[tuple[int | None, int | None]] = []
    matcher = difflib.SequenceMatcher(a=[sig(x) for x in a], b=[sig(x) for x in b], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            pairs += list(zip(range(i1, i2), range(j1, j2)))
            continue
        n = max(i2 - i1, j2 - j1)
        for k in range(n):
            pairs.append((i1 + k if i1 + k < i2 else None, j1 + k if j1 + k < j2 else None))
    return pairs


def compare_steps(steps_a: list, steps_b: list) -> list[dict]:
    """One row per aligned step: ``same``, ``args`` (same primitive, some arguments differ),
    ``changed`` (different primitives at that place), ``only_a`` or ``only_b``."""
    rows = []
    for i, j in _align(steps_a or [], steps_b or [], lambda s: s.get("primitive")):
        sa = steps_a[i] if i is not None else None
        sb = steps_b[j] if j is not None else None
        differing: list[str] = []
        if sa is None:
            status = "only_b"
        elif sb is None:
            status = "only_a"
        elif sa.get("primitive") != sb.get("primitive"):
            status = "changed"
        else:
            args_a, args_b = sa.get("args") or {}, sb.get("args") or {}
            differing = sorted(k for k in set(args_a) | set(args_b) if args_a.get(k) != args_b.get(k))
            status = "args" if differing else "same"
        rows.append({"a_index": i, "b_index": j, "a": sa, "b": sb, "status": status, "differing_args": differing})
    return rows


def trace_parts(trace) -> tuple[list, dict]:
    """Instructions and {instruction index: decision} of a MetaSchedule trace JSON."""
    if not isinstance(trace, list) or len(trace) != 2:
        return [], {}
    insts, decisions = trace
    return list(insts or []), {int(d[0]): d[1] for d in decisions or [] if isinstance(d, list) and len(d) == 2}


def compare_decisions(trace_a, trace_b) -> dict:
    """The sampling decisions that differ between two traces, instructions aligned by kind and
    inputs; ``instructions_differ`` counts instructions present in only one trace or changed."""
    insts_a, dec_a = trace_parts(trace_a)
    insts_b, dec_b = trace_parts(trace_b)
    differ, rows = 0, []
    for i, j in _align(insts_a, insts_b, lambda inst: repr(inst[:3]) if isinstance(inst, list) else repr(inst)):
        if i is None or j is None or insts_a[i][:3] != insts_b[j][:3]:
            differ += 1
        if i is None or j is None:
            continue
        da, db = dec_a.get(i), dec_b.get(j)
        if (i in dec_a or j in dec_b) and da != db:
            rows.append({"a_index": i, "b_index": j, "instruction": insts_a[i][0], "inputs": insts_a[i][1],
                         "a": da, "b": db})
    return {"decisions": rows, "instructions_differ": differ,
            "has_traces": bool(insts_a) and bool(insts_b)}


def compare_records(a: Record, b: Record) -> dict:
    """Everything the UI and CLI show when two records are compared."""
    steps = compare_steps(a.steps or [], b.steps or [])
    trace = compare_decisions(a.trace, b.trace)
    speedup = a.median_s / b.median_s if a.median_s and b.median_s else None
    return {"a": _summary(a), "b": _summary(b), "same_workload": a.workload_key == b.workload_key,
            "same_target": a.target == b.target, "same_hardware": a.hardware == b.hardware,
            "b_speedup_over_a": speedup, "steps": steps,
            "steps_differ": sum(row["status"] != "same" for row in steps), **trace}


__all__ = ["compare_decisions", "compare_records", "compare_steps", "trace_parts"]
