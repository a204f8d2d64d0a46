"""Resolve the names steps use (``C``, ``C/i_0``) to a schedule's block and loop handles, and
name handles back (for turning a MetaSchedule trace into steps)."""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.errors import ScheduleError


def block_names(sch: s_tir.Schedule) -> list[str]:
    """Every block, and ``root`` (MetaSchedule annotates the root block with its hints)."""
    from explorer.tir_walk import blocks

    return [b.name_hint for b in blocks(sch.mod["main"])] + ["root"]


def resolve_block(sch: s_tir.Schedule, name: str) -> s_tir.schedule.SBlockRV:
    if name not in block_names(sch):
        raise ScheduleError(f"no block named {name!r}; the blocks are: {', '.join(block_names(sch)[:-1])}")
    return sch.get_sblock(name)


def resolve_loop(sch: s_tir.Schedule, ref: str) -> s_tir.schedule.LoopRV:
    """``BLOCK/LOOP``: the loop around BLOCK whose variable is LOOP (or ``#k``: the k-th)."""
    block_name, sep, loop_name = ref.rpartition("/")
    if not sep:
        raise ScheduleError(f"{ref!r} is not a loop reference (write BLOCK/LOOP, e.g. C/i_0)")
    block = resolve_block(sch, block_name)
    loops = sch.get_loops(block)
    names = [sch.get(lp).loop_var.name for lp in loops]
    if loop_name.startswith("#") and loop_name[1:].isdigit() and int(loop_name[1:]) < len(loops):
        return loops[int(loop_name[1:])]
    if loop_name not in names:
        raise ScheduleError(f"block {block_name!r} has no loop {loop_name!r}; its loops are: "
                            f"{', '.join(names) or 'none'}")
    if names.count(loop_name) > 1:
        raise ScheduleError(f"block {block_name!r} has several loops named {loop_name!r}; "
                            f"use {block_name}/#k with k its position (0 = outermost)")
    return loops[names.index(loop_name)]


def resolve_target(sch: s_tir.Schedule, ref: str):
    """A loop reference if it contains '/', else a block name."""
    return resolve_loop(sch, ref) if "/" in ref else resolve_block(sch, ref)


def loop_ref(sch: s_tir.Schedule, loop: s_tir.schedule.LoopRV) -> str:
    """The ``BLOCK/LOOP`` name of a loop handle: the first block under it, its variable name
    (``#k`` when the name repeats in that block's nest)."""
    under = sch.get_child_blocks(loop)
    block = under[0] if under else None
    if block is None:
        raise ScheduleError("a loop with no block under it cannot be named")
    bname = sch.get(block).name_hint
    loops = sch.get_loops(block)
    target = sch.get(loop)
    names = [sch.get(lp).loop_var.name for lp in loops]
    for k, lp in enumerate(loops):
        if sch.get(lp).same_as(target):
            name = names[k]
            return f"{bname}/{name}" if names.count(name) == 1 else f"{bname}/#{k}"
    raise ScheduleError("internal: loop not found around its own block")

