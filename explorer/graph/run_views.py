"""The graphs of one pipeline run, ready to draw: each distinct module laid out once, nodes named
after the model, diffs between any two snapshots. What the Graph & passes page shows, without
Streamlit (the page caches one :class:`RunGraphs` per run).

Thread-safe: a background thread may :meth:`RunGraphs.warm` the snapshots a user is likely to
open next while the page reads others; each payload is computed once.
"""

from __future__ import annotations

from threading import Lock

import tvm

from explorer.graph.lineage import Lineage
from explorer.graph.onnx_names import OnnxSources
from explorer.graph.viewdata import snapshot_view, status_codes, to_json


class RunGraphs:
    """Drawable graphs of a :class:`~explorer.passes.PipelineRun` (``sources``: ONNX names)."""

    def __init__(self, run, sources: OnnxSources | None = None) -> None:
        self.run = run
        self.sources = sources or OnnxSources({})
        self.lineage = Lineage(run)
        self._payloads: dict[int, str] = {}
        self._locks: dict[int, Lock] = {}
        self._guard = Lock()

    def representative(self, index: int) -> int:
        return self.lineage.representative(index)

    def size(self, index: int) -> int:
        return self.lineage.graph(index).number_of_nodes()

    def payload(self, index: int) -> str:
        """The JSON drawing of the graph after snapshot ``index`` (``-1``: the input)."""
        rep = self.representative(index)
        with self._guard:
            lock = self._locks.setdefault(rep, Lock())
        with lock:
            if rep not in self._payloads:
                lin = self.lineage
                final = lin.graph(lin.final)
                becomes = {n: list(dict.fromkeys(final.nodes[f]["op"] for f in fs if final.nodes[f]["kind"] == "kernel"))
                           for n, fs in lin.becomes(rep).items()}
                view = snapshot_view(lin.graph(rep), lin.graph(-1), lin.origins(rep), self.sources, becomes)
                view["key"] = rep
                view["final"] = lin.final
                self._payloads[rep] = to_json(view)
            return self._payloads[rep]

    def statuses(self, before: int, after: int) -> tuple[list[int], list[int], str]:
        """Diff statuses of both graphs (drawing order) and a one-line summary."""
        diff = self.lineage.diff(before, after)
        return (status_codes(self.lineage.graph(before), diff.before),
                status_codes(self.lineage.graph(after), diff.after), diff.summary())

    def kernel(self, index: int, name: str) -> tvm.tirx.PrimFunc:
        """The PrimFunc ``name`` of the module after snapshot ``index``."""
        mod = self.run.module(index)
        for gv, func in mod.functions.items():
            if gv.name_hint == name and isinstance(func, tvm.tirx.PrimFunc):
                return func
        raise KeyError(f"no PrimFunc {name!r} after snapshot {index}")

    def warm(self, indices: list[int]) -> None:
        """Compute the payloads of ``indices`` now (for a background thread)."""
        for i in indices:
            self.payload(i)


__all__ = ["RunGraphs"]
