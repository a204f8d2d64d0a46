"""Checks TVM's schedule primitives do not make but its CPU code generator needs.

TVM accepts some schedules that it then cannot build (found by the random-step tests): a
parallel loop inside another parallel loop passes ``sch.parallel`` and fails in LLVM codegen
("Nested parallel loop is not supported by threadpool"). schedx refuses such a step up front,
with the fix, instead of letting the build fail later.
"""

from __future__ import annotations

from tvm import tirx

from explorer.schedule.views import NestNode, loop_nest


def problems(func: tirx.PrimFunc) -> list[str]:
    """What would keep ``func`` from building for the CPU ([] when nothing)."""
    found: list[str] = []

    def visit(node: NestNode, outer_parallel: str | None) -> None:
        if node.kind != "loop":
            return
        if node.loop_kind == "parallel" and outer_parallel is not None:
            found.append(f"loop {node.name} is parallel inside parallel loop {outer_parallel}: TVM's CPU thread "
                         f"pool cannot nest them; fuse the loops and parallelize the fused loop once")
        inner = node.name if node.loop_kind == "parallel" and outer_parallel is None else outer_parallel
        for c in node.children:
            visit(c, inner)

    for n in loop_nest(func):
        visit(n, None)
    return found
