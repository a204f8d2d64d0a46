"""What a step form can offer: the blocks and loops that exist now, with extents, and the
buffers each block reads and writes. Nobody types a name that does not exist."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from explorer.schedule.views import NestNode, loop_nest
from explorer.schedule.refs import block_refs


@dataclass(frozen=True)
class LoopChoice:
    ref: str  # BLOCK/LOOP
    extent: int | None
    kind: str

    @property
    def label(self) -> str:
        return f"{self.ref}  ({self.extent}{'' if self.kind == 'serial' else ', ' + self.kind})"


@dataclass(frozen=True)
class BlockChoice:
    name: str
    iters: str
    loops: tuple[LoopChoice, ...]  # around this block, outermost first
    reads: tuple[str, ...]
    writes: tuple[str, ...]


def block_choices(sch: s_tir.Schedule) -> list[BlockChoice]:
    """Every block with the loops around it (named as steps name them) and its buffers."""
    func = sch.mod["main"]
    around: dict[str, list[LoopChoice]] = {}

    def visit(node: NestNode, stack: list[NestNode]) -> None:
        if node.kind == "loop":
            for c in node.children:
                visit(c, stack + [node])
        else:
            around[node.name] = [LoopChoice(_ref_for(node.name, stack, k), lp.extent, lp.loop_kind)
                                 for k, lp in enumerate(stack)]
            for c in node.children:  # a nest inside the block: get_loops counts from the block's scope
                visit(c, [])

    for n in loop_nest(func):
        visit(n, [])
    out = []
    for b, ref in block_refs(func):
        iters = "".join("S" if int(iv.iter_type) == 0 else "R" if int(iv.iter_type) == 2 else "O" for iv in b.iter_vars)
        out.append(BlockChoice(ref, iters, tuple(around.get(ref, [])),
                               tuple(r.source.name for r in b.reads), tuple(w.source.name for w in b.writes)))
    return out


def _ref_for(block: str, stack: list[NestNode], k: int) -> str:
    names = [lp.name for lp in stack]
    return f"{block}/{names[k]}" if names.count(names[k]) == 1 else f"{block}/#{k}"


def all_loops(choices: list[BlockChoice]) -> list[LoopChoice]:
    """Each loop once (a loop shared by several blocks is named after the first)."""
    seen: dict[str, LoopChoice] = {}
    for b in choices:
        for lp in b.loops:
            seen.setdefault(lp.ref, lp)
    return list(seen.values())


def parse_factors(text: str) -> list[int | None]:
    """``"None, 32"`` or ``"-, 4, 16"`` -> ``[None, 32]`` / ``[None, 4, 16]`` (not evaluated)."""
    out: list[int | None] = []
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if part.lower() in ("none", "null", "-", "?", ""):
            out.append(None)
        else:
            out.append(int(part))
    return out


def parse_value(text: str) -> int | float | bool | str:
    """An annotation value typed by a person: integer, float, true/false, or else a string."""
    t = text.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t
