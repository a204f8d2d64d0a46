"""Checks TVM's schedule primitives do not make but its CPU code generator needs.

TVM accepts some schedules that it then cannot build (found by the random-step tests): a
parallel loop inside another parallel loop passes ``sch.parallel`` and fails in LLVM codegen
("Nested parallel loop is not supported by threadpool"), and a vectorized loop inside another
crashes StorageRewrite. schedx refuses such a step up front,
with the fix, instead of letting the build fail later.
"""

from __future__ import annotations

from tvm import tirx

from explorer.schedule.views import NestNode, loop_nest


def problems(func: tirx.PrimFunc) -> list[str]:
    """What would keep ``func`` from building for the CPU ([] when nothing)."""
    found: list[str] = []

    def visit(node: NestNode, outer: dict[str, str]) -> None:
        if node.kind != "loop":
            return
        kind = node.loop_kind
        if kind in _NESTING and kind in outer:
            found.append(f"loop {node.name} is {kind} inside {kind} loop {outer[kind]}: {_NESTING[kind]}")
        inner = {**outer, kind: outer.get(kind, node.name)} if kind in _NESTING else outer
        for c in node.children:
            visit(c, inner)

    for n in loop_nest(func):
        visit(n, {})
    return found


_NESTING = {
    "parallel": "TVM's CPU thread pool cannot nest them; fuse the loops and parallelize the fused loop once",
    "vectorized": "TVM's code generator fails on nested vectorized loops; vectorize only the innermost one",
}
