"""Walk a TensorIR statement tree from Python (TVM 0.27 has no Python post-order visitor for TIR).

Loops (``For``), blocks (``SBlockRealize``/``SBlock``), sequences and conditionals are followed;
anything else is a leaf.
"""

from __future__ import annotations

from collections.abc import Iterator

import tvm
from tvm import s_tir, tirx


# Which parameters of a kernel are weights (constants at every call), set by
# explorer.passes.weight_buffers.MarkWeightBuffers.
WEIGHTS_ATTR = "schedx.weight_buffers"
# MetaSchedule's mark on a block that only rewrites a weight's layout (its RewriteLayout postproc
# sets it; so does schedx's default tiling): a search times the kernel without it, and an export
# computes it once, at build time, on the constant weight (export.weight_layouts).
LAYOUT_REWRITE_PREPROC = "meta_schedule.layout_rewrite_preproc"
# a PrimFunc written or made scheduled: the default schedules, dlight and a search leave it as it is
SCHEDULED_ATTR = "tirx.is_scheduled"


def is_scheduled(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` says it is scheduled already (:data:`SCHEDULED_ATTR`)."""
    attrs = func.attrs
    return attrs is not None and SCHEDULED_ATTR in attrs and bool(int(attrs[SCHEDULED_ATTR]))


def weight_positions(func: tirx.PrimFunc) -> tuple[int, ...]:
    """The parameters of ``func`` that are weights (:data:`WEIGHTS_ATTR`), by position."""
    return tuple(int(i) for i in (func.attrs or {}).get(WEIGHTS_ATTR, []))


def children(stmt: object) -> list:
    """The statements directly inside ``stmt``."""
    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, s_tir.SBlockRealize):
        return [stmt.block]
    if isinstance(stmt, s_tir.SBlock):
        return [s for s in (stmt.init, stmt.body) if s is not None]
    if isinstance(stmt, tirx.IfThenElse):
        return [s for s in (stmt.then_case, stmt.else_case) if s is not None]
    body = getattr(stmt, "body", None)
    return [body] if isinstance(body, tvm.tirx.Stmt) else []


def walk(stmt: object) -> Iterator[object]:
    """Every statement under ``stmt`` (itself first), depth first."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def blocks(func: tirx.PrimFunc) -> list[s_tir.SBlock]:
    """Every block of ``func`` except the implicit root, in program order."""
    return [n for n in walk(func.body) if isinstance(n, s_tir.SBlock) and n.name_hint != "root"]
