"""A vector axis that no multiple of the lanes divides, padded to whole vectors."""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.defaults.analysis import BlockFacts
from explorer.schedule.defaults.layouts import is_weight
from explorer.schedule.defaults.machine import CpuSpec
from explorer.schedule.defaults.tile_choice import row_axis


def pad_vector_axis(sch: s_tir.Schedule, block, facts: BlockFacts, vec: int, cpu: CpuSpec) -> bool:
    """Pad the vector axis to whole vectors when no multiple of the lanes divides it (attention's
    49 or 197 tokens, GPT-2's 1000-word logits over 32 tokens): the einsum reads zeros past the end (one
    padded copy of the operand the vector axis indexes) and computes into a padded output copied
    back. Unpadded, such a block got a scalar register tile. False (nothing changed) when the axis
    already divides, is shorter than a vector, or
    has fewer than 4 rows to share a padded copy made on every call (a matrix-vector product by
    activations would copy its whole matrix per call: it reads half vectors instead, see
    :func:`.tile_choice.choose_tiles`), or the block is not an einsum TVM can pad. A matrix-vector product by
    constant weights that no multiple of half a vector divides is padded all the same: the export
    pads the weights once, at build time, into their panels (:func:`.panels.pack_weights`): unpadded, a
    classifier head of a prime number of classes runs in scalars. 1000 classes keep their unpadded
    40-wide tiles (a padded 16-wide one has a single accumulator). Measurements:
    docs/notes/default-tiling.md."""
    lanes = cpu.lanes(facts.dtype)
    ext = facts.extents[vec]
    if lanes <= 1 or ext % lanes == 0 or ext < lanes:
        return False
    rows = row_axis(facts, vec)
    if rows is None or facts.extents[rows] < 4:
        if any(ext % d == 0 for d in range(max(1, lanes // 2), 4 * lanes + 1, max(1, lanes // 2))):
            return False  # half vectors divide it (see choose_tiles)
        regions = sch.get(block).reads
        along = [i for i, a in enumerate(facts.reads) if a.uses(vec)]
        if not along or not all(is_weight(sch, regions[i].source) for i in along):
            return False
    padding = [1] * len(facts.extents)
    padding[vec] = lanes
    try:
        sch.pad_einsum(block, padding)
    except s_tir.ScheduleError:
        return False
    return True


__all__ = ["pad_vector_axis"]
