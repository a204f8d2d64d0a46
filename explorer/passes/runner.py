"""Run a pipeline and capture a snapshot after every pass, nested passes included.

A pass instrument sees every pass TVM runs, including passes run *inside* another pass on a
different module (FoldConstant compiles its folded PrimFuncs through the whole TIR pipeline).
Only passes whose input is the module this pipeline is transforming are captured: a pass is
kept when its input is the very object the previous kept pass produced.

Capturing keeps references to the (immutable) modules; comparisons and counts are computed
after the pipeline, so timing a pass measures the pass, not schedx.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import networkx as nx
import tvm
import tvm_ffi
from tvm.ir.instrument import pass_instrument

from explorer.errors import short_tvm_message
from explorer.graph.extract import relax_graph
from explorer.passes.isolate import check_passes_in_child
from explorer.passes.pipelines import TASK_PIPELINE, PipelineSpec, get_pipeline, resolve_passes
from explorer.passes.snapshot import ModuleCounts, Snapshot, module_counts
from explorer.target import parse_target


@dataclass
class _Open:
    name: str
    depth: int
    parent: int | None
    before: tvm.IRModule
    start: float
    slot: int


@pass_instrument
class _Capture:
    """Records (name, depth, parent, before, after, seconds) for each pass on the tracked module."""

    def __init__(self, mod: tvm.IRModule) -> None:
        self.current = mod
        self.stack: list[_Open | None] = []  # None marks a pass on a foreign module
        self.records: list[dict] = []

    def run_before_pass(self, mod: tvm.IRModule, info: tvm.transform.PassInfo) -> None:
        foreign = any(o is None for o in self.stack) or not mod.same_as(self.current)
        if foreign:
            self.stack.append(None)
            return
        parent = next((o.slot for o in reversed(self.stack) if o is not None), None)
        slot = len(self.records)
        self.records.append({"name": info.name, "depth": len(self.stack) + 1, "parent": parent,
                             "before": mod, "after": None, "seconds": None, "children": 0})
        if parent is not None:
            self.records[parent]["children"] += 1
        self.stack.append(_Open(info.name, len(self.stack) + 1, parent, mod, time.perf_counter(), slot))

    def run_after_pass(self, mod: tvm.IRModule, info: tvm.transform.PassInfo) -> None:
        top = self.stack.pop()
        if top is None:
            return
        rec = self.records[top.slot]
        rec["seconds"] = time.perf_counter() - top.start
        rec["after"] = mod
        self.current = mod

    def open_pass(self) -> str | None:
        """The innermost pass still running (the one that raised, after a failure)."""
        return next((o.name for o in reversed(self.stack) if o is not None), None)


@dataclass
class PipelineRun:
    """A pipeline run: its snapshots (data) and the modules they describe (TVM objects).

    ``modules[i]`` is the module after ``snapshots[i]``; ``before(i)`` the module its pass got.
    Scripts and graphs are rendered on demand and cached, since most are never looked at.
    """

    pipeline: str
    title: str
    input: tvm.IRModule
    snapshots: tuple[Snapshot, ...]
    modules: tuple[tvm.IRModule, ...]
    befores: tuple[tvm.IRModule, ...]
    seconds: float
    capture_seconds: float
    input_counts: ModuleCounts
    error: str | None = None
    failed_pass: str | None = None
    _scripts: dict = field(default_factory=dict, repr=False)
    _graphs: dict = field(default_factory=dict, repr=False)

    def module(self, index: int) -> tvm.IRModule:
        """Module after snapshot ``index``; ``-1`` is the input module."""
        return self.input if index < 0 else self.modules[index]

    def before(self, index: int) -> tvm.IRModule:
        return self.befores[index]

    def script(self, index: int) -> str:
        """TVMScript of the module after snapshot ``index`` (``-1``: the input), cached."""
        if index not in self._scripts:
            self._scripts[index] = module_script(self.module(index))
        return self._scripts[index]

    def graph(self, index: int, func: str = "main") -> nx.DiGraph:
        key = (index, func)
        if key not in self._graphs:
            self._graphs[key] = relax_graph(self.module(index), func)
        return self._graphs[key]

    def input_index(self, index: int) -> int:
        """Index of the snapshot whose module pass ``index`` received (``-1``: the input)."""
        received = self.befores[index]
        for j in range(index - 1, -1, -1):
            if self.modules[j].same_as(received):
                return j
        return -1

    def find(self, name: str) -> Snapshot | None:
        """The first snapshot of the pass called ``name``."""
        return next((s for s in self.snapshots if s.name == name), None)

    def children(self, parent: int | None) -> list[Snapshot]:
        return [s for s in self.snapshots if s.parent == parent]

    def main_passes(self) -> list[Snapshot]:
        """The passes the pipeline itself lists: below the wrappers (``Sequential``, the
        ``_pipeline`` functions) that hold them, above the passes they run internally."""
        level = self.children(None)
        while len(level) == 1 and level[0].composite:
            level = self.children(level[0].index)
        return level

    def to_dict(self) -> dict:
        return {"pipeline": self.pipeline, "title": self.title, "seconds": self.seconds,
                "capture_seconds": self.capture_seconds, "error": self.error,
                "failed_pass": self.failed_pass, "input_counts": self.input_counts.to_dict(),
                "snapshots": [s.to_dict() for s in self.snapshots]}


def module_script(mod: tvm.IRModule) -> str:
    """TVMScript of a module without the constants' payload (``metadata[...]`` references)."""
    return mod.script(show_meta=False)


def _spec(pipeline: str | None, passes: list[str] | str | None) -> PipelineSpec:
    if passes:
        return resolve_passes(passes)
    return get_pipeline(pipeline or TASK_PIPELINE)


def run_pipeline(mod: tvm.IRModule, pipeline: str | None = None, *, passes: list[str] | str | None = None,
                 target: str | tvm.target.Target | None = None, capture: bool = True,
                 isolate: bool = True) -> PipelineRun:
    """Run a named pipeline (or a custom list of ``passes``) on ``mod`` and snapshot every pass.

    A pass that raises does not raise here: the run keeps the snapshots taken before it and says
    which pass failed and why (``error``, ``failed_pass``). Unknown names raise
    :class:`PipelineError` before anything runs. ``capture=False`` runs without the instrument
    (for measuring its cost). A custom list is first dry-run in a child process unless
    ``isolate=False``, since some pass orders crash TVM itself (see :mod:`explorer.passes.isolate`)."""
    spec = _spec(pipeline, passes)
    tgt = target if isinstance(target, tvm.target.Target) else parse_target(target or spec.target).tvm()
    if spec.passes and isolate:
        check_passes_in_child(mod, list(spec.passes), dict(tgt.export()))
    the_pass = spec.build(tgt)
    cap = _Capture(mod)
    instruments = [cap] if capture else []
    error = failed = None
    start = time.perf_counter()
    try:
        with tvm.transform.PassContext(opt_level=3, instruments=instruments), tgt:
            the_pass(mod)
    except Exception as err:  # a failing pass is reported as data, see the docstring
        failed = cap.open_pass() or spec.name
        error = f"{failed}: {short_tvm_message(err)}"
    seconds = time.perf_counter() - start

    t0 = time.perf_counter()
    done = [r for r in cap.records if r["after"] is not None]
    index_of = {id(r): i for i, r in enumerate(done)}
    by_slot = {slot: r for slot, r in enumerate(cap.records)}
    snaps = []
    for i, r in enumerate(done):
        parent = by_slot.get(r["parent"]) if r["parent"] is not None else None
        changed = not r["after"].same_as(r["before"]) and not tvm_ffi.structural_equal(r["before"], r["after"])
        snaps.append(Snapshot(index=i, name=r["name"], depth=r["depth"],
                              parent=index_of.get(id(parent)) if parent is not None else None,
                              seconds=r["seconds"], changed=changed, composite=r["children"] > 0,
                              counts=_counts_cached(r["after"])))
    capture_seconds = time.perf_counter() - t0
    return PipelineRun(pipeline=spec.name, title=spec.title, input=mod, snapshots=tuple(snaps),
                       modules=tuple(r["after"] for r in done), befores=tuple(r["before"] for r in done),
                       seconds=seconds, capture_seconds=capture_seconds, input_counts=module_counts(mod),
                       error=error, failed_pass=failed)


_COUNT_CACHE: dict[int, tuple[tvm.IRModule, ModuleCounts]] = {}


def _counts_cached(mod: tvm.IRModule) -> ModuleCounts:
    """Counts of a module, computed once per module object (unchanged passes return the same one)."""
    hit = _COUNT_CACHE.get(id(mod))
    if hit is not None and hit[0].same_as(mod):
        return hit[1]
    counts = module_counts(mod)
    if len(_COUNT_CACHE) > 512:
        _COUNT_CACHE.clear()
    _COUNT_CACHE[id(mod)] = (mod, counts)
    return counts
