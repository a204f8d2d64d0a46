"""The loops of an assembly listing, read from its control flow as a compiler reads them: the
listing cut into basic blocks (at labels and after branches), each block's successors (its
branch's label, the next block unless it ends in a jump or a return), and each back edge
(a branch to a block that dominates it) with its natural loop (the blocks that reach the back
edge without passing the header). Layout does not decide: LLVM often places a loop's latch
above its header. The hot loop and the line mapping's loop control are read from these; the
architecture's vocabulary is the target's (:class:`explorer.target.asm.AsmSyntax`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from explorer.target.asm import ANY_ASM, AsmSyntax

_ANY_LABEL = re.compile(r"^\s*([^\s:#\"]+):")
_BLOCK_LABEL = re.compile(r"^\.?LBB\d+_\d+$")  # LLVM's basic block labels (others: functions, constants)


@dataclass(frozen=True)
class AsmLoop:
    """A natural loop: its header block's first line, every line of its blocks (1-based), the
    last lines of the blocks that go back to the header (``latches``), and how many other
    loops hold it (``depth``, 0: outermost)."""

    header: int
    lines: frozenset[int]
    latches: tuple[int, ...]
    depth: int = 0

    @property
    def first(self) -> int:
        return min(self.lines)

    @property
    def last(self) -> int:
        return max(self.lines)

    def holds(self, other: AsmLoop) -> bool:
        return other.lines < self.lines


@dataclass(frozen=True)
class _Block:
    first: int
    last: int
    label: str
    end: int  # its last instruction's line (0: it has none)


def _blocks(lines: list[str], syntax: AsmSyntax) -> list[_Block]:
    """The listing's basic blocks: a block starts at a label and after a branch, jump or return."""
    out: list[_Block] = []
    first, label, end = 1, "", 0
    for no, line in enumerate(lines, 1):
        found = _ANY_LABEL.match(line) if not syntax.is_instruction(line) else None
        if found and no > first:
            out.append(_Block(first, no - 1, label, end))
            first, end = no, 0
        if found:
            label = found.group(1)
        if syntax.is_instruction(line):
            end = no
            if syntax.branch_target(line) or syntax.ends_flow(line):
                out.append(_Block(first, no, label, end))
                first, label, end = no + 1, "", 0
    if first <= len(lines):
        out.append(_Block(first, len(lines), label, end))
    return out


def _successors(blocks: list[_Block], lines: list[str], syntax: AsmSyntax) -> list[list[int]]:
    where = {b.label: i for i, b in enumerate(blocks) if b.label}
    out = []
    for i, b in enumerate(blocks):
        last = lines[b.end - 1] if b.end else ""
        succ = [where[t]] if (t := syntax.branch_target(last)) in where else []
        if i + 1 < len(blocks) and not (last and syntax.ends_flow(last)):
            succ.append(i + 1)
        out.append(succ)
    return out


def _dominators(preds: list[list[int]], entries: set[int]) -> list[set[int]]:
    """Each block's dominators, computed iteratively from the ``entries`` (functions' first blocks)."""
    n = len(preds)
    everything = set(range(n))
    dom = [{i} if i in entries else set(everything) for i in range(n)]
    changed = True
    while changed:
        changed = False
        for i in range(n):
            if i in entries:
                continue
            new = set.intersection(*(dom[p] for p in preds[i])) | {i}
            if new != dom[i]:
                dom[i], changed = new, True
    return dom


def asm_loops(lines: list[str], syntax: AsmSyntax = ANY_ASM) -> list[AsmLoop]:
    """The natural loops of an assembly listing (one per header), outermost first."""
    blocks = _blocks(lines, syntax)
    succ = _successors(blocks, lines, syntax)
    preds: list[list[int]] = [[] for _ in blocks]
    for i, targets in enumerate(succ):
        for t in targets:
            preds[t].append(i)
    # a function starts at its first block, at a label no branch names (its symbol), or where nothing leads
    entries = {i for i, b in enumerate(blocks)
               if i == 0 or not preds[i] or (b.label and not _BLOCK_LABEL.match(b.label))}
    dom = _dominators(preds, entries)
    bodies: dict[int, set[int]] = {}
    latches: dict[int, list[int]] = {}
    for s, targets in enumerate(succ):
        for h in targets:
            if h not in dom[s]:
                continue
            body, stack = bodies.setdefault(h, {h}), [s]
            latches.setdefault(h, []).append(blocks[s].end or blocks[s].last)
            while stack:
                b = stack.pop()
                if b not in body:
                    body.add(b)
                    stack.extend(preds[b])
    found = [AsmLoop(blocks[h].first, frozenset(no for b in body for no in range(blocks[b].first, blocks[b].last + 1)),
                     tuple(latches[h])) for h, body in bodies.items()]
    loops = [AsmLoop(a.header, a.lines, a.latches, sum(b.holds(a) for b in found)) for a in found]
    return sorted(loops, key=lambda a: (a.depth, a.first))


def exits(loop: AsmLoop, lines: list[str], syntax: AsmSyntax = ANY_ASM) -> list[int]:
    """The lines of the branches inside ``loop`` that leave it (to a label outside it)."""
    labels = {syntax.label(line): no for no, line in enumerate(lines, 1) if syntax.label(line)}
    return [no for no in sorted(loop.lines)
            if (t := syntax.branch_target(lines[no - 1])) in labels and labels[t] not in loop.lines]


def close_latches(lines: list[str], sources: list[int], loop_lines: set[int], syntax: AsmSyntax = ANY_ASM) -> None:
    """Give the instructions at the end of each loop's latch that LLVM left without a line (the
    induction variables' increments its code generator made, a jump back) the line of the
    loop's own control: the latch's branch's line, or that of a branch leaving the loop.
    ``sources``: the source line of each line of ``lines`` (0: none), changed in place;
    ``loop_lines``: the source lines that are loop headers."""
    for loop in asm_loops(lines, syntax):
        candidates = [*loop.latches, *exits(loop, lines, syntax)]
        line = next((sources[no - 1] for no in candidates if sources[no - 1] in loop_lines), 0)
        if not line:
            continue
        for latch in loop.latches:
            for no in range(latch, loop.first - 1, -1):
                text = lines[no - 1]
                if _ANY_LABEL.match(text) and not syntax.is_instruction(text):
                    break
                if syntax.is_instruction(text):
                    if sources[no - 1] not in (0, line):
                        break
                    sources[no - 1] = line


__all__ = ["AsmLoop", "asm_loops", "close_latches", "exits"]
