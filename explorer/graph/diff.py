"""Graph diff between two snapshots of the same function.

Nodes are matched in four rounds, each over the nodes the earlier ones left:

1. *merged*: a node inside fused group ``g`` (its ``group_call``-th call) before, and the kernel
   named ``g`` (its ``group_call``-th call) after, once FuseTIR has turned the group into one
   kernel;
2. inputs and the output, in order;
3. *dataflow*: walking the after graph in order, a node is paired with the first node before of
   the same op family fed by the images of what feeds it (looking through nodes a pass inserted,
   such as layout transforms), the same output type first; this keeps a diff right when a pass
   drops, adds or reorders nodes elsewhere (matching by "the k-th conv2d" alone shifts every
   later pair after the first dropped one);
4. what is left: the k-th remaining node of a family before with the k-th one after when nothing
   contradicts it, then a node and one of another family with the same inputs and output type
   (LegalizeOps names the kernel of ``permute_dims`` ``transpose``; FoldBatchnormToConv2D turns a
   batch_norm into an add).

Nodes left unpaired are *removed* or *added*: a node is never paired against the dataflow.

Matching on family (the op without namespace or numeric suffix) rather than on the exact op lets
a diff across LegalizeOps show operators *lowered* to kernels instead of removed and added.

Statuses, before: ``kept``, ``changed`` (shape, dtype or operator differ), ``removed``, ``merged`` (its fused
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

    def summary(self) -> str:
        """One line, each kind of change once: ``47 nodes merged into 18 kernels, 3 removed``."""
        c = self.counts()
        parts = []
        if c.get("before.merged"):
            parts.append(f"{c['before.merged']} nodes merged into {c.get('after.merged', 0)} kernels")
        for side, status, words in (("after", "lowered", "lowered to kernels"), ("after", "fused", "moved into fused groups"),
                                    ("after", "changed", "changed (shape, dtype or operator)"), ("before", "removed", "removed"),
                                    ("after", "added", "added")):
            if c.get(f"{side}.{status}"):
                parts.append(f"{c[f'{side}.{status}']} {words}")
        return ", ".join(parts) or "no node changed"

    @property
    def changed(self) -> bool:
        return any(s != "kept" for s in self.before.values()) or any(s != "kept" for s in self.after.values())

    def to_dict(self) -> dict:
        return {"before": self.before, "after": self.after, "pairs": [list(p) for p in self.pairs],
                "counts": self.counts(), "summary": self.summary()}


def _ordered(g: nx.DiGraph) -> list[str]:
    return sorted(g.nodes, key=lambda n: g.nodes[n]["order"])


def _occurrences(g: nx.DiGraph, attr: str, nodes: list[str] | None = None) -> dict[tuple[str, int], str]:
    """``{(value of attr, k): node}`` where node is the k-th node (in order) with that value."""
    seen: Counter = Counter()
    keys: dict[tuple[str, int], str] = {}
    for node in nodes if nodes is not None else _ordered(g):
        value = g.nodes[node][attr]
        keys[(value, seen[value])] = node
        seen[value] += 1
    return keys


class _Matcher:
    def __init__(self, before: nx.DiGraph, after: nx.DiGraph) -> None:
        self.b, self.a = before, after
        self.ob, self.oa = _ordered(before), _ordered(after)
        self.fwd: dict[str, str] = {}  # before -> after (one-to-one rounds)
        self.rev: dict[str, str] = {}
        self.merged: list[tuple[str, str]] = []
        self.merged_b: dict[str, str] = {}  # a member of a fused group -> the kernel it became
        self.merged_a: set[str] = set()
        self.preimages: dict[str, list[str]] = {}  # after node -> the before nodes it stands for

    def pair(self, nb: str, na: str) -> None:
        self.fwd[nb], self.rev[na] = na, nb
        self.preimages.setdefault(na, []).append(nb)

    def free_b(self) -> list[str]:
        return [n for n in self.ob if n not in self.fwd and n not in self.merged_b]

    def free_a(self) -> list[str]:
        return [n for n in self.oa if n not in self.rev and n not in self.merged_a]

    def _paired_inputs_after(self, na: str, depth: int = 8) -> set[str]:
        """The nearest paired nodes upstream of ``na``, looking through unpaired ones (a
        layout_transform or a weight computation a pass inserted; the seven nodes a Winograd
        convolution is made of) up to ``depth`` edges away.
        After nodes are matched in order, so an unpaired producer is one no node before matched."""
        found: set[str] = set()
        seen: set[str] = set()
        stack = [(p, 1) for p in self.a.predecessors(na)]
        while stack:
            p, d = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            if p in self.rev or p in self.merged_a:
                found.add(p)
            elif d < depth:
                stack.extend((q, d + 1) for q in self.a.predecessors(p))
        return found

    def _producers(self, nb: str, na: str) -> tuple[set[str], set[str]]:
        """The after-graph images of ``nb``'s paired producers, and what feeds ``na``."""
        mapped = {self.fwd[p] for p in self.b.predecessors(nb) if p in self.fwd}
        mapped |= {self.merged_b[p] for p in self.b.predecessors(nb) if p in self.merged_b}
        return mapped, self._paired_inputs_after(na)

    def score(self, nb: str, na: str) -> int:
        """How well ``nb`` fits ``na``: -1 when what feeds it feeds something else after; else 2
        for being fed by the very same (paired) nodes, or for both being fed by nothing, plus 1
        for the same output type."""
        mapped, mine = self._producers(nb, na)
        if not mapped <= mine:
            return -1
        db, da = self.b.nodes[nb], self.a.nodes[na]
        same_type = (db["shape"], db["dtype"]) == (da["shape"], da["dtype"])
        sources = not self.b.in_degree(nb) and not self.a.in_degree(na)
        return 2 * (mapped == mine and (bool(mapped) or sources)) + same_type

    def _consumers_of_images(self, mine: set[str]) -> list[str]:
        """Free nodes before that read what became ``mine``: the only ones that can be fed alike."""
        found = set()
        for p in mine:
            for src in self.preimages.get(p, ()):
                found.update(s for s in self.b.successors(src) if s not in self.fwd and s not in self.merged_b)
        return sorted(found, key=lambda n: self.b.nodes[n]["order"])

    # -- rounds ------------------------------------------------------------------------------
    def merge_groups(self) -> None:
        groups_after = {d["group"] for _, d in self.a.nodes(data=True) if d["group"]}
        kernels = _occurrences(self.a, "op", [n for n in self.oa if self.a.nodes[n]["kind"] == "kernel"])
        for nb in self.ob:
            d = self.b.nodes[nb]
            if not d["group"] or d["group"] in groups_after:
                continue
            na = kernels.get((d["group"], d["group_call"]))
            if na is not None:
                self.merged.append((nb, na))
                self.merged_b[nb] = na
                self.merged_a.add(na)
                self.preimages.setdefault(na, []).append(nb)

    def ends(self) -> None:
        for kind in ("input", "output"):
            bs = [n for n in self.ob if self.b.nodes[n]["kind"] == kind]
            as_ = [n for n in self.oa if self.a.nodes[n]["kind"] == kind]
            for nb, na in zip(bs, as_):
                self.pair(nb, na)

    def dataflow(self) -> None:
        by_family: dict[str, list[str]] = {}
        for nb in self.free_b():
            by_family.setdefault(self.b.nodes[nb]["family"], []).append(nb)
        for na in self.free_a():
            family = self.a.nodes[na]["family"]
            mine = self._paired_inputs_after(na)
            near = self._consumers_of_images(mine) if mine else [
                n for n in by_family.get(family, []) if not self.b.in_degree(n)]
            scored = [(self.score(nb, na), nb) for nb in near]
            same = [(sc, nb) for sc, nb in scored if self.b.nodes[nb]["family"] == family]
            pick = (next((nb for sc, nb in same if sc == 3), None)  # same inputs, same type
                    or next((nb for sc, nb in scored if sc == 3), None))  # another op, same inputs and type
            if pick is None:  # the first of its family and type that nothing contradicts
                pick = next((nb for nb in by_family.get(family, []) if self.score(nb, na) == 1), None)
            if pick is None:  # same inputs, another type (a layout change)
                pick = next((nb for sc, nb in same if sc == 2), None)
            if pick is not None:
                self.pair(pick, na)
                by_family[self.b.nodes[pick]["family"]].remove(pick)

    def leftovers(self) -> None:
        kb = _occurrences(self.b, "family", self.free_b())
        ka = _occurrences(self.a, "family", self.free_a())
        for key, nb in kb.items():
            if key in ka and self.score(nb, ka[key]) >= 1:
                self.pair(nb, ka[key])
        free_b = self.free_b()
        for na in self.free_a():
            for nb in free_b:
                if self.score(nb, na) == 3:  # another family, same type, fed by the same nodes
                    self.pair(nb, na)
                    free_b.remove(nb)
                    break


def diff_graphs(before: nx.DiGraph, after: nx.DiGraph) -> GraphDiff:
    """Match the nodes of two graphs and classify every one (see the module docstring)."""
    m = _Matcher(before, after)
    m.merge_groups()
    m.ends()
    m.dataflow()
    m.leftovers()
    st_b: dict[str, str] = {}
    st_a: dict[str, str] = {}
    for nb, na in m.fwd.items():
        db, da = before.nodes[nb], after.nodes[na]
        if (db["shape"], db["dtype"]) != (da["shape"], da["dtype"]):
            st_b[nb] = st_a[na] = "changed"
        elif db["kind"] == "op" and da["kind"] == "kernel":
            st_b[nb], st_a[na] = "kept", "lowered"
        elif db["family"] != da["family"]:  # another operator in its place (batch_norm -> add)
            st_b[nb] = st_a[na] = "changed"
        elif da["group"] and not db["group"]:
            st_b[nb], st_a[na] = "kept", "fused"
        else:
            st_b[nb] = st_a[na] = "kept"
    for nb, na in m.merged:
        st_b[nb] = st_a[na] = "merged"
    for nb in before.nodes:
        st_b.setdefault(nb, "removed")
    for na in after.nodes:
        st_a.setdefault(na, "added")
    pairs = sorted(list(m.fwd.items()) + m.merged, key=lambda p: before.nodes[p[0]]["order"])
    return GraphDiff(before=st_b, after=st_a, pairs=tuple(pairs))


__all__ = ["GraphDiff", "diff_graphs", "op_family"]
