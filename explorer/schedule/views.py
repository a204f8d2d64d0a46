"""What a person looks at after each step: the loop nest as a tree, the tiling of each block
axis, and which lines of the TVMScript changed."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field

import tvm
from tvm import s_tir, tirx

from explorer.schedule.refs import block_refs, ref_of_block
from store.values import DictValue

_KIND = {tirx.ForKind.SERIAL: "serial", tirx.ForKind.PARALLEL: "parallel", tirx.ForKind.VECTORIZED: "vectorized",
         tirx.ForKind.UNROLLED: "unrolled", tirx.ForKind.THREAD_BINDING: "thread"}
_ITER = {0: "S", 2: "R"}  # IterVar types: data parallel, communicative reduce


@dataclass(frozen=True)
class NestNode(DictValue):
    """A loop or a block in the loop nest; loops carry the ``BLOCK/LOOP`` name steps use."""

    kind: str  # "loop" or "block"
    name: str
    extent: int | None = None
    loop_kind: str = ""  # serial, parallel, vectorized, unrolled, thread:threadIdx.x
    ref: str = ""
    iters: str = ""  # for blocks: S (spatial) / R (reduction) per block iterator
    annotations: dict = field(default_factory=dict)
    children: tuple = ()


def _int(x) -> int | None:
    return int(x.value) if isinstance(x, tvm.tirx.IntImm) else None


def _loop_kind(loop: tirx.For) -> str:
    kind = _KIND.get(loop.kind, str(loop.kind))
    if kind == "thread" and loop.thread_binding is not None:
        return f"thread:{loop.thread_binding.thread_tag}"
    return kind


def loop_nest(func: tirx.PrimFunc) -> list[NestNode]:
    """The loop nest of ``func`` under its root block, as trees of :class:`NestNode`."""
    refs: dict[int, str] = {}  # id(For) -> ref, assigned by the first block found below a loop
    block_ref_list = block_refs(func)

    def visit(stmt, stack: list[tirx.For]) -> list[dict]:
        if isinstance(stmt, tirx.SeqStmt):
            return [n for s in stmt.seq for n in visit(s, stack)]
        if isinstance(stmt, tirx.For):
            node = {"kind": "loop", "name": stmt.loop_var.name, "extent": _int(stmt.extent),
                    "loop_kind": _loop_kind(stmt), "annotations": {k: str(v) for k, v in stmt.annotations.items()},
                    "for": stmt}
            node["children"] = visit(stmt.body, stack + [stmt])
            return [node]
        if isinstance(stmt, s_tir.SBlockRealize):
            block = stmt.block
            name = ref_of_block(func, block, block_ref_list) if block.name_hint != "root" else "root"
            names = [lp.loop_var.name for lp in stack]
            for k, lp in enumerate(stack):
                if id(lp) not in refs:
                    refs[id(lp)] = f"{name}/{names[k]}" if names.count(names[k]) == 1 else f"{name}/#{k}"
            if block.name_hint == "root":
                return visit(block.body, stack)
            iters = "".join(_ITER.get(int(iv.iter_type), "O") for iv in block.iter_vars)
            # a block may hold a nest of its own (loop_partition's parts): its loops are named
            # from the blocks under them, counted from this block's scope as get_loops counts them
            return [{"kind": "block", "name": name, "iters": iters,
                     "annotations": {k: str(v) for k, v in block.annotations.items()},
                     "children": visit(block.body, [])}]
        if isinstance(stmt, tirx.IfThenElse):
            return visit(stmt.then_case, stack) + (visit(stmt.else_case, stack) if stmt.else_case else [])
        body = getattr(stmt, "body", None)
        return visit(body, stack) if isinstance(body, tvm.tirx.Stmt) else []

    raw = visit(func.body, [])

    def freeze(n: dict) -> NestNode:
        kids = tuple(freeze(c) for c in n["children"])
        if n["kind"] == "loop":
            return NestNode("loop", n["name"], n["extent"], n["loop_kind"], refs.get(id(n["for"]), ""),
                            annotations=n["annotations"], children=kids)
        return NestNode("block", n["name"], iters=n["iters"], ref=n["name"], annotations=n["annotations"],
                        children=kids)

    return [freeze(n) for n in raw]


def nest_text(nodes: list[NestNode]) -> str:
    """The nest as indented text: ``for i_0 in parallel(4)`` ... ``block C [SSR]``."""
    lines: list[str] = []

    def emit(node: NestNode, depth: int) -> None:
        pad = "  " * depth
        if node.kind == "loop":
            kind = "range" if node.loop_kind == "serial" else node.loop_kind
            ann = f"  {node.annotations}" if node.annotations else ""
            lines.append(f"{pad}for {node.name} in {kind}({node.extent}){ann}")
            for c in node.children:
                emit(c, depth + 1)
        else:
            lines.append(f"{pad}block {node.name} [{node.iters}]")
            for c in node.children:
                emit(c, depth + 1)

    for n in nodes:
        emit(n, 0)
    return "\n".join(lines)


@dataclass(frozen=True)
class AxisTiling:
    """How one block iterator is covered by loops, outermost first: ``(loop, extent, kind)``."""

    axis: str
    iter_type: str
    extent: int
    loops: tuple[tuple[str, int, str], ...]


def tiling(func: tirx.PrimFunc, block_name: str) -> list[AxisTiling]:
    """For each iterator of ``block_name``, the loops its binding uses, in nest order."""
    stack_at: dict[str, list[tirx.For]] = {}
    refs = block_refs(func)

    def find(stmt, stack):
        if isinstance(stmt, tirx.For):
            find(stmt.body, stack + [stmt])
        elif isinstance(stmt, s_tir.SBlockRealize):
            if ref_of_block(func, stmt.block, refs) == block_name:
                stack_at["realize"] = stmt
                stack_at["loops"] = stack
            find(stmt.block.body, stack if stmt.block.name_hint == "root" else [])  # a block's nest: its own loops
        elif isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                find(s, stack)
        else:
            body = getattr(stmt, "body", None)
            if isinstance(body, tvm.tirx.Stmt):
                find(body, stack)
            if isinstance(stmt, tirx.IfThenElse):
                find(stmt.then_case, stack)
                if stmt.else_case is not None:
                    find(stmt.else_case, stack)

    find(func.body, [])
    if "realize" not in stack_at:
        return []
    realize, loops = stack_at["realize"], stack_at["loops"]
    order = {lp.loop_var.name: k for k, lp in enumerate(loops)}
    by_name = {lp.loop_var.name: lp for lp in loops}
    out = []
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        used = sorted((v.name for v in tvm.tirx.analysis.undefined_vars(value, []) if v.name in by_name),
                      key=order.get)
        out.append(AxisTiling(iv.var.name, _ITER.get(int(iv.iter_type), "O"), _int(iv.dom.extent) or 0,
                              tuple((n, _int(by_name[n].extent) or 0, _loop_kind(by_name[n])) for n in used)))
    return out


def main_block(func: tirx.PrimFunc) -> str | None:
    """The block worth looking at first: the one with the largest iteration space (a reduction
    breaks ties), e.g. ``C`` of a matmul or ``conv2d_nchw`` of a conv."""
    from explorer.ir.tir_walk import blocks

    best, best_key, refs = None, None, block_refs(func)
    for b in blocks(func):
        size = math.prod(_int(iv.dom.extent) or 1 for iv in b.iter_vars)
        key = (size, any(int(iv.iter_type) == 2 for iv in b.iter_vars))
        if best_key is None or key > best_key:
            best, best_key = ref_of_block(func, b, refs), key
    return best


def changed_lines(before: str, after: str) -> list[int]:
    """1-based numbers of the lines of ``after`` that are new or changed since ``before``."""
    out: list[int] = []
    sm = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for tag, _, _, j1, j2 in sm.get_opcodes():
        if tag in ("replace", "insert"):
            out.extend(range(j1 + 1, j2 + 1))
    return out
