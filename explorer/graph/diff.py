"""Graph diff between two snapshots of the same function.

Nodes are matched by (op family, occurrence): the third ``conv2d`` before is the third
``conv2d`` after, whether it is a Relax operator, a ``call_tir`` kernel or inside a fused group.
Matching on family rather than on exact op lets a diff across LegalizeOps show operators
*lowered* to kernels instead of everything removed and added, and matching on occurrence rather
than on input lineage keeps a layout change upstream from marking the whole graph as new.

Statuses, before: ``kept``, ``changed`` (shape or dtype differ), ``removed``, ``merged`` (its fused
group became one kernel, FuseTIR). After: ``kept``, ``changed``, ``lowered`` (operator became a
kernel), ``fused`` (now inside a fused group, FuseOps), ``merged`` (a fused kernel replacing a
group), ``added``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import networkx as nx

from explorer.graph.extract import op_family


@dataclass(frozen=True)
class GraphDiff:
    """What happened to each node between two graphs (``before`` and ``after`` node ids)."""

    before: dict[str, str]
    after: dict[str, str]
    pairs: tuple[tuple[str, str], ...] = field(default=())

    def counts(self) -> dict[str, int]:
        """How many nodes of each status, e.g. ``{"after.fused": 12, "before.removed": 3}``."""
        c = Counter(f"before.{s}" for s in self.before.values())
        c.update(f"after.{s}" for s in self.after.values())
        return dict(sorted(c.items()))

    @property
    def changed(self) -> bool:
        return any(s != "kept" for s in self.before.values()) or any(s != "kept" for s in self.after.values())

    def to_dict(self) -> dict:
        return {"before": self.before, "after": self.after, "pairs": [list(p) for p in self.pairs],
                "counts": self.counts()}


def _occurrences(g: nx.DiGraph, attr: str) -> dict[tuple[str, int], str]:
    """``{(value of attr, k): node}`` where node is the k-th node (in order) with that value."""
    seen: Counter = Counter()
    keys: dict[tuple[str, int], str] = {}
    for node in sorted(g.nodes, key=lambda n: g.nodes[n]["order"]):
        value = g.nodes[node][attr]
        keys[(value, seen[value])] = node
        seen[value] += 1
    return keys


def diff_graphs(before: nx.DiGraph, after: nx.DiGraph) -> GraphDiff:
    """Match the nodes of two graphs and classify every one (see the module docstring)."""
    kb, ka = _occurrences(before, "family"), _occurrences(after, "family")
    st_b: dict[str, str] = {}
    st_a: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    for key, nb in kb.items():
        na = ka.get(key)
        if na is None:
            continue
        db, da = before.nodes[nb], after.nodes[na]
        pairs.append((nb, na))
        if (db["shape"], db["dtype"]) != (da["shape"], da["dtype"]):
            st_b[nb] = st_a[na] = "changed"
        elif db["kind"] == "op" and da["kind"] == "kernel":
            st_b[nb], st_a[na] = "kept", "lowered"
        elif da["group"] and not db["group"]:
            st_b[nb], st_a[na] = "kept", "fused"
        else:
            st_b[nb] = st_a[na] = "kept"
    # FuseTIR: the k-th call of a fused function before became the k-th call of the kernel
    # named after it.
    kernels_after = _occurrences(after, "op")
    for nb in before.nodes:
        if nb in st_b:
            continue
        d = before.nodes[nb]
        na = kernels_after.get((d["group"], d["group_call"])) if d["group"] else None
        if na is not None and st_a.get(na, "merged") == "merged":
            st_b[nb] = "merged"
            st_a[na] = "merged"
            pairs.append((nb, na))
        else:
            st_b[nb] = "removed"
    for na in after.nodes:
        st_a.setdefault(na, "added")
    return GraphDiff(before=st_b, after=st_a, pairs=tuple(pairs))


__all__ = ["GraphDiff", "diff_graphs", "op_family"]
