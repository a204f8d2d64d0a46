"""Resolve the names steps use (``C``, ``C/i_0``) to a schedule's block and loop handles, and
name handles back (for turning a MetaSchedule trace into steps)."""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.errors import ScheduleError


def block_refs(func) -> list[tuple[s_tir.SBlock, str]]:
    """Every block of ``func`` but the root, in program order, with the name steps give it: its
    own, or ``NAME#k`` (the k-th of that name) where several blocks share a name (TVM allows it:
    ``loop_partition`` copies a block's body into each part, and a cache of the same buffer in
    each part gets the same name)."""
    from collections import Counter

    from explorer.ir.tir_walk import blocks

    found = blocks(func)
    counts, seen, out = Counter(b.name_hint for b in found), Counter(), []
    for b in found:
        name = b.name_hint
        if counts[name] > 1:
            while f"{name}#{seen[name]}" in counts:  # a block really named so (TVMScript allows it)
                seen[name] += 1
            out.append((b, f"{name}#{seen[name]}"))
            seen[name] += 1
        else:
            out.append((b, name))
    return out


def ref_of_block(func, block: s_tir.SBlock, refs: list | None = None) -> str:
    """The name steps give ``block`` of ``func`` (see :func:`block_refs`; ``refs``: theirs, when
    the caller has them already)."""
    return next((ref for b, ref in (refs if refs is not None else block_refs(func)) if b.same_as(block)),
                block.name_hint)


def block_names(sch: s_tir.Schedule) -> list[str]:
    """Every block's ref (its name, or ``NAME#k``: :func:`block_refs`), and ``root`` (MetaSchedule
    annotates the root block with its hints)."""
    return [ref for _, ref in block_refs(sch.mod["main"])] + ["root"]


def resolve_block(sch: s_tir.Schedule, name: str) -> s_tir.schedule.SBlockRV:
    refs = block_refs(sch.mod["main"])
    if name == "root" or any(ref == name and "#" not in ref for _, ref in refs):
        return sch.get_sblock(name)
    target = next((b for b, ref in refs if ref == name), None)
    if target is None:
        shared = [ref for b, ref in refs if b.name_hint == name]
        if shared:
            raise ScheduleError(f"several blocks are named {name!r}: write {' or '.join(shared)} (in program order)")
        raise ScheduleError(f"no block named {name!r}; the blocks are: {', '.join(ref for _, ref in refs)}")
    pending = [sch.get_sblock("root")]  # a repeated name: find the block's handle among the children
    while pending:
        for child in sch.get_child_blocks(pending.pop()):
            if sch.get(child).same_as(target):
                return child
            pending.append(child)
    raise ScheduleError(f"internal: block {name!r} not found under the root")


def block_ref(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> str:
    """The name steps give a block handle (see :func:`block_refs`)."""
    return ref_of_block(sch.mod["main"], sch.get(block))


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
    bname = block_ref(sch, block)
    loops = sch.get_loops(block)
    target = sch.get(loop)
    names = [sch.get(lp).loop_var.name for lp in loops]
    for k, lp in enumerate(loops):
        if sch.get(lp).same_as(target):
            name = names[k]
            return f"{bname}/{name}" if names.count(name) == 1 else f"{bname}/#{k}"
    raise ScheduleError("internal: loop not found around its own block")

