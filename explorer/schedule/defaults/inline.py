"""First step of every default: fold the cheap blocks of a fused kernel into the blocks that use
them, so that what remains is one block per real computation.

- a spatial block (bias, activation, reshape, residual add) is computed inside its consumer
  (``compute_inline``), except a padding block read by a reduction (a convolution or pool would
  test the border in its innermost loop: measured 2x slower than padding once) and a costly block
  (``exp``, ``erf``...) with several consumers (it would be computed once per consumer);
- a spatial block whose only producer is spatial is folded into it (``reverse_compute_inline``).

TVM refuses what would be wrong (an output block, a producer read at other indices); a refusal
just leaves the block where it is."""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.defaults.analysis import block_facts, root_blocks


def _try(fn, *args) -> bool:
    try:
        fn(*args)
    except s_tir.ScheduleError:
        return False
    return True


def inline_producers(sch: s_tir.Schedule) -> int:
    """``compute_inline`` every spatial block that may be (see the module docstring); returns how many."""
    done = 0
    progress = True
    while progress:
        progress = False
        for block in root_blocks(sch):
            facts = block_facts(sch, block)
            if not facts.is_spatial:
                continue
            consumers = sch.get_consumers(block)
            if not consumers:
                continue
            if facts.padding and any(not block_facts(sch, c).is_spatial for c in consumers):
                continue
            if facts.costly and len(consumers) > 1:
                continue
            if _try(sch.compute_inline, block):
                done += 1
                progress = True
                break
    return done


def inline_epilogues(sch: s_tir.Schedule) -> int:
    """``reverse_compute_inline`` spatial blocks into their one spatial producer; returns how many."""
    done = 0
    progress = True
    while progress:
        progress = False
        for block in root_blocks(sch):
            if not block_facts(sch, block).is_spatial:
                continue
            producers = sch.get_producers(block)
            if len(producers) != 1:
                continue
            producer = block_facts(sch, producers[0])
            if not producer.is_spatial or producer.padding:
                continue
            if _try(sch.reverse_compute_inline, block):
                done += 1
                progress = True
                break
    return done


__all__ = ["inline_epilogues", "inline_producers"]
