"""Checks TVM's schedule primitives do not make but its CPU code generator needs.

TVM accepts some schedules that it then cannot build (found by the random-step tests): a
parallel loop inside another parallel loop passes ``sch.parallel`` and fails in LLVM codegen
("Nested parallel loop is not supported by threadpool"), and a vectorized loop inside another
crashes StorageRewrite; a vectorized loop around a producer computed under it (compute_at) gives
wrong numbers. schedx refuses such a step up front,
with the fix, instead of letting the build fail later.
"""

from __future__ import annotations

from tvm import tirx

from explorer.schedule.views import NestNode, loop_nest


def problems(func: tirx.PrimFunc) -> list[str]:
    """What would keep ``func`` from building for the CPU ([] when nothing)."""
    found: list[str] = []

    def visit(node: NestNode, outer: dict[str, str]) -> None:
        if node.kind != "loop":  # a block's own nest (loop_partition's parts) still runs inside the outer loops
            for c in node.children:
                visit(c, outer)
            return
        kind = node.loop_kind
        if kind in _NESTING and kind in outer:
            found.append(f"loop {node.name} is {kind} inside {kind} loop {outer[kind]}: {_NESTING[kind]}")
        inner = {**outer, kind: outer.get(kind, node.name)} if kind in _NESTING else outer
        for c in node.children:
            visit(c, inner)

    def blocks_under(node: NestNode) -> int:
        return (1 if node.kind == "block" else 0) + sum(blocks_under(c) for c in node.children)

    def check_vector_bodies(node: NestNode) -> None:
        if node.kind != "loop":
            for c in node.children:
                check_vector_bodies(c)
            return
        if node.loop_kind == "vectorized" and blocks_under(node) > 1:
            found.append(f"loop {node.name} is vectorized around {blocks_under(node)} blocks: TVM builds such a "
                         f"kernel but computes wrong results; vectorize a loop of one block (usually the innermost)")
        for c in node.children:
            check_vector_bodies(c)

    for n in loop_nest(func):
        visit(n, {})
        check_vector_bodies(n)
    return found


_NESTING = {
    "parallel": "TVM's CPU thread pool cannot nest them; fuse the loops and parallelize the fused loop once",
    "vectorized": "TVM's code generator fails on nested vectorized loops; vectorize only the innermost one",
}
