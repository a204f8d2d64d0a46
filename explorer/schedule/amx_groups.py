"""The LLVM IR of an AMX call that computes several grids of tiles after one ``ldtilecfg``: the
exported function ``@fn`` loads the tile configuration once (:func:`explorer.schedule.amx_frame.entry`),
walks nested counted loops over the groups, calls ``@fn_grid`` (the grid's code, no ``ldtilecfg``)
once per innermost turn, and releases the tile state when done. What each kernel adds is data:
the values computed once (``setup``), each loop's count and the pointers it moves (:class:`GroupLoop`),
and the call. :mod:`explorer.schedule.bf16_dot` (K blocks, column groups, row groups, the next call's
weights prefetched) and :mod:`explorer.schedule.amx_ir`'s convolutions (row groups, column groups)
both write theirs so.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.schedule.amx_frame import RELEASE, entry


@dataclass(frozen=True)
class GroupLoop:
    """One counted loop of the group nest: block ``label``, counter ``%counter`` from 0 to ``count``,
    and ``lines``: the IR at the top of each turn (the pointers this level moves, :func:`offset`)."""

    label: str
    counter: str
    count: int
    lines: tuple[str, ...] = ()


def groups_ir(fn: str, args: str, setup: list[str], loops: list[GroupLoop], call: str) -> str:
    """``@fn(args)``: the permission request and ``ldtilecfg`` of ``@fn_cfg``, ``setup`` (once), then
    ``loops`` nested outermost first, ``call`` (a line of IR) in the innermost, then ``tilerelease``."""
    lines = [f"define i32 @{fn}({args}) {{", entry(fn + "_cfg"), *setup]
    before = "go"
    for depth, loop in enumerate(loops):
        back = loop.label if depth == len(loops) - 1 else loop.label + "end"
        lines += [f"  br label %{loop.label}", f"{loop.label}:",
                  f"  %{loop.counter} = phi i64 [0, %{before}], [%{loop.counter}next, %{back}]", *loop.lines]
        before = loop.label
    lines.append(call)
    for depth in reversed(range(len(loops))):
        loop = loops[depth]
        if depth < len(loops) - 1:
            lines.append(f"{loop.label}end:")
        done = loops[depth - 1].label + "end" if depth else "groupsend"
        lines.append(latch(loop.counter, loop.count, done, loop.label))
    return "\n".join(lines + ["groupsend:", RELEASE, "  ret i32 0", "}", ""])


def offset(name: str, base: str, index: str, step) -> str:
    """``%name``: ``%base`` plus ``%index`` times ``step`` bytes (a constant or an ``%`` value)."""
    return f"  %{name}.o = mul i64 %{index}, {step}\n  %{name} = getelementptr i8, ptr %{base}, i64 %{name}.o"


def latch(counter: str, count: int, done: str, again: str) -> str:
    """A counted loop's end: ``%counter`` one on, to block ``done`` after ``count`` turns, else ``again``."""
    return (f"  %{counter}next = add i64 %{counter}, 1\n  %{counter}done = icmp eq i64 %{counter}next, {count}\n"
            f"  br i1 %{counter}done, label %{done}, label %{again}")


__all__ = ["GroupLoop", "groups_ir", "latch", "offset"]
