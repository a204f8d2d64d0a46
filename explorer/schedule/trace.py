"""Steps <-> MetaSchedule traces.

Steps become a trace by applying them: ``sch.trace`` records every primitive. A trace becomes
steps by replaying it with a decision provider: before each instruction TVM hands over its
inputs, already bound in the replayed schedule, so blocks and loops can be named the way steps
name them. Sampling instructions (tile sizes, categorical choices, compute locations) are not
steps: their decisions show up as the concrete values later steps use.
"""

from __future__ import annotations

import json

import tvm
from tvm import s_tir
from tvm.s_tir.schedule import ExprRV, LoopRV, SBlockRV

from explorer.ir.plain import to_plain
from explorer.schedule.index_map import index_map_text
from explorer.schedule.intrinsics import register_for_trace
from explorer.schedule.refs import block_ref, loop_ref
from explorer.schedule.steps import ScheduleError, Step

# Instructions that only look things up or sample: they produce no step.
_SILENT = {"GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers", "GetOutputBlocks",
           "SamplePerfectTile", "SampleCategorical", "SampleComputeLocation", "SamplePartitionedTile",
           "EnterPostproc"}


def steps_to_trace(func: tvm.tirx.PrimFunc, steps: list[Step]) -> list:
    """The MetaSchedule trace (plain JSON) of applying ``steps`` to ``func``."""
    from explorer.schedule.session import ScheduleSession

    session = ScheduleSession(func)
    session.apply_all(steps)
    return to_plain(session.schedule.trace.as_json())


def replay(kernel: tvm.tirx.PrimFunc | tvm.IRModule, trace_json: object) -> s_tir.Schedule:
    """A trace (plain JSON) replayed on ``kernel``: a PrimFunc, or a task's module as MetaSchedule
    schedules it. The one replay of every room (an export, a search's candidates, the steps
    view), so that none forgets to register the schedx intrinsics a trace tensorizes with first.
    A trace that does not apply is a :class:`ScheduleError`."""
    register_for_trace(trace_json)
    sch = s_tir.Schedule(kernel)
    try:
        s_tir.Trace.apply_json_to_schedule(json.loads(json.dumps(trace_json)), sch)
    except Exception as err:
        raise ScheduleError(f"the trace does not apply to this kernel: {err}") from None
    return sch


def trace_to_steps(func: tvm.tirx.PrimFunc, trace_json: object, *, open_samples: bool = False) -> list[Step]:
    """Steps equivalent to a trace (see the module docstring); unknown instructions raise.

    With ``open_samples``, values a sampling instruction decided are shown as ``"?N"`` (N: the
    decision this trace holds): a sketch's steps with its decisions still open. Such steps are
    for reading, not for applying."""
    return _convert(replay(func, trace_json).trace, func, open_samples)


def _convert(recorded: s_tir.Trace, func: tvm.tirx.PrimFunc, open_samples: bool) -> list[Step]:
    replay = s_tir.Schedule(func)
    steps: list[Step] = []
    location: list[int | None] = [None]  # the last SampleComputeLocation decision

    def provide(inst, inputs, attrs, decision):
        kind = inst.kind.name
        if kind == "SampleComputeLocation":
            location[0] = int(to_plain(decision)) if decision is not None else None
        elif kind in ("ComputeAt", "ReverseComputeAt") and location[0] is not None and location[0] < 0:
            # The sampled location is "root" (-1) or "inline" (-2): the loop handle is a sentinel
            # that must not be looked up (TVM segfaults on it). Root changes nothing.
            if location[0] == -2:
                steps.append(Step("compute_inline", {"block": _name(replay, inputs[0])}))
            location[0] = None
        elif kind not in _SILENT:
            location[0] = None if kind in ("ComputeAt", "ReverseComputeAt") else location[0]
            steps.append(_step_of(replay, kind, list(inputs), list(attrs), open_samples))
        return decision

    recorded.apply_to_schedule(replay, False, provide)
    return steps


def _name(sch: s_tir.Schedule, value: object, open_samples: bool = False) -> object:
    if isinstance(value, SBlockRV):
        return block_ref(sch, value)
    if isinstance(value, LoopRV):
        return loop_ref(sch, value)
    if isinstance(value, ExprRV):
        return f"?{int(sch.get(value))}" if open_samples else int(sch.get(value))
    if isinstance(value, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
        return value.value
    return to_plain(value)


_BUFFER_KINDS = ("read", "write")  # TVM's BufferIndexType


def _map_text(index_map) -> str:
    return index_map_text(list(index_map.initial_indices), list(index_map.final_indices))


def _step_of(sch: s_tir.Schedule, kind: str, inputs: list, attrs: list, open_samples: bool = False) -> Step:
    n = [_name(sch, v, open_samples) for v in inputs]
    a = [to_plain(v) for v in attrs]
    if kind == "Split":
        return Step("split", {"loop": n[0], "factors": [f if f is None or isinstance(f, str) else int(f) for f in n[1:]]})
    if kind in ("Fuse", "Reorder", "Merge"):
        return Step(kind.lower(), {"loops": n})
    if kind in ("Parallel", "Vectorize", "Unroll"):
        return Step(kind.lower(), {"loop": n[0]})
    if kind == "Bind":
        return Step("bind", {"loop": n[0], "thread": a[0]})
    if kind in ("CacheRead", "CacheWrite"):
        return Step("cache_read" if kind == "CacheRead" else "cache_write",
                    {"block": n[0], "buffer_index": int(a[0]), "scope": a[1]})
    if kind in ("ComputeAt", "ReverseComputeAt"):
        return Step("compute_at" if kind == "ComputeAt" else "reverse_compute_at",
                    {"block": n[0], "loop": n[1], "preserve_unit_loops": bool(a[0])})
    if kind in ("ComputeInline", "ReverseComputeInline"):
        return Step("compute_inline" if kind == "ComputeInline" else "reverse_compute_inline", {"block": n[0]})
    if kind == "DecomposeReduction":
        return Step("decompose_reduction", {"block": n[0], "loop": n[1]})
    if kind == "RFactor":
        return Step("rfactor", {"loop": n[0], "factor_axis": int(a[0])})
    if kind == "StorageAlign":
        return Step("storage_align", {"block": n[0], "buffer_index": int(a[0]), "axis": int(a[1]),
                                      "factor": int(a[2]), "offset": int(a[3])})
    if kind == "Annotate":
        value = n[1]
        return Step("annotate", {"target": n[0], "key": a[0], "value": value})
    if kind == "Unannotate":
        return Step("unannotate", {"target": n[0], "key": a[0]})
    if kind == "SetScope":
        return Step("set_scope", {"block": n[0], "buffer_index": int(a[0]), "scope": a[1]})
    if kind == "Blockize":
        return Step("blockize", {"target": n[0]})
    if kind == "LoopPartition":
        if not a[0]:
            raise ScheduleError("the trace partitions a loop without preserving unit iterators, which schedx "
                                "cannot show as a step yet")
        return Step("loop_partition", {"loop": n[0], "factors": [f if f is None or isinstance(f, str) else int(f)
                                                                 for f in n[1:]]})
    if kind == "TransformLayout":
        if a[2] is not None:
            raise ScheduleError("the trace pads a buffer in transform_layout, which schedx cannot show as a step yet")
        if a[3]:
            raise ScheduleError("the trace's transform_layout assumes an injective map, which schedx cannot show "
                                "as a step yet")
        return Step("transform_layout", {"block": n[0], "buffer": f"{_BUFFER_KINDS[int(a[1])]}:{int(a[0])}",
                                         "index_map": _map_text(inputs[1])})
    if kind == "TransformBlockLayout":
        return Step("transform_block_layout", {"block": n[0], "index_map": _map_text(attrs[0])})
    if kind == "ReindexCacheWrite":
        return Step("reindex_cache_write", {"block": n[0], "buffer_index": int(a[0]), "scope": a[1],
                                            "index_map": _map_text(inputs[1])})
    if kind == "AnnotateBufferAccess":
        return Step("annotate_buffer_access", {"block": n[0], "buffer": f"{_BUFFER_KINDS[int(n[2])]}:{int(n[1])}",
                                               "region": _map_text(inputs[3])})
    if kind == "Tensorize":
        return Step("tensorize", {"target": n[0], "intrin": a[0]})
    raise ScheduleError(f"the trace uses {kind}, which schedx cannot show as a step yet")
