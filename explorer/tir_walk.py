"""Walk a TensorIR statement tree from Python (TVM 0.27 has no Python post-order visitor for TIR).

Loops (``For``), blocks (``SBlockRealize``/``SBlock``), sequences and conditionals are followed;
anything else is a leaf.
"""

from __future__ import annotations

from collections.abc import Iterator

import tvm
from tvm import s_tir, tirx


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
