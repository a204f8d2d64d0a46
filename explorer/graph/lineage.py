"""Where each node of each snapshot came from, and what it became at the end of the pipeline.

A node's *origins* are the nodes of the input graph (the module as imported) it descends from:
an operator keeps its own, a kernel LegalizeOps made from it inherits them, a fused kernel
(FuseTIR) gets the union of its group's members. Origins travel from a snapshot to the next along
the node pairs of :func:`~explorer.graph.diff.diff_graphs`, following the chain of modules the
passes received, so a nested pass and the wrapper around it agree.

With origins, a node of any snapshot knows the model nodes it stands for (and through
:mod:`explorer.graph.onnx_names` their ONNX names), and which kernels of the final module
compute it.
"""

from __future__ import annotations

from functools import cached_property
from threading import RLock

import networkx as nx

from explorer.graph.diff import GraphDiff, diff_graphs


class Lineage:
    """Origins of the nodes of a :class:`~explorer.passes.PipelineRun`, computed on demand and
    kept. Thread-safe: the UI may warm it in the background while a page reads it."""

    def __init__(self, run) -> None:
        self.run = run
        self._lock = RLock()
        self._origins: dict[int, dict[str, frozenset[str]]] = {}
        self._diffs: dict[tuple[int, int], GraphDiff] = {}

    # -- which snapshot holds the same graph -----------------------------------------------
    def representative(self, index: int) -> int:
        """The earliest snapshot whose module is the one after ``index`` (structurally): its graph
        and origins are the same, so they are computed once."""
        run = self.run
        while index >= 0:
            snap = run.snapshots[index]
            if snap.composite:
                kids = run.children(index)
                if kids and run.module(kids[-1].index).same_as(run.module(index)):
                    index = kids[-1].index
                    continue
            if not snap.changed:
                index = run.input_index(index)
                continue
            return index
        return -1

    def graph(self, index: int) -> nx.DiGraph:
        return self.run.graph(self.representative(index))

    def diff(self, before: int, after: int) -> GraphDiff:
        key = (self.representative(before), self.representative(after))
        with self._lock:
            if key not in self._diffs:
                self._diffs[key] = diff_graphs(self.run.graph(key[0]), self.run.graph(key[1]))
            return self._diffs[key]

    @cached_property
    def final(self) -> int:
        """The snapshot holding the pipeline's result (or the last one completed)."""
        top = self.run.children(None)
        return self.representative(top[-1].index if top else -1)

    # -- origins ----------------------------------------------------------------------------
    def origins(self, index: int) -> dict[str, frozenset[str]]:
        """``{node: input-graph nodes it descends from}`` for the graph after ``index``."""
        rep = self.representative(index)
        with self._lock:
            if rep in self._origins:
                return self._origins[rep]
        if rep < 0:
            result = {n: frozenset((n,)) for n in self.run.graph(-1).nodes}
        else:
            prev = self.representative(self.run.input_index(rep))
            before = self.origins(prev)
            result = {n: frozenset() for n in self.run.graph(rep).nodes}
            for nb, na in self.diff(prev, rep).pairs:
                result[na] = result[na] | before.get(nb, frozenset())
        with self._lock:
            self._origins[rep] = result
        return result

    @cached_property
    def _holders(self) -> dict[str, list[str]]:
        """``{input-graph node: final-graph nodes descending from it}``."""
        final = self.graph(self.final)
        holders: dict[str, list[str]] = {}
        for n in sorted(final.nodes, key=lambda n: final.nodes[n]["order"]):
            for o in self.origins(self.final)[n]:
                holders.setdefault(o, []).append(n)
        return holders

    def becomes(self, index: int) -> dict[str, list[str]]:
        """``{node of snapshot index: nodes of the final graph computing part of it}``, in order."""
        final = self.graph(self.final)
        holders = self._holders
        out = {}
        for n, mine in self.origins(index).items():
            found = dict.fromkeys(f for o in mine for f in holders.get(o, ()))
            out[n] = sorted(found, key=lambda f: final.nodes[f]["order"])
        return out

    def warm(self) -> None:
        """Compute the origins of every snapshot now (for a background thread)."""
        for snap in self.run.snapshots:
            self.origins(snap.index)


__all__ = ["Lineage"]
