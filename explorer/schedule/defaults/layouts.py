"""How a register tile's operands and accumulator are laid out (:mod:`.tiling` tiles them):
the output axis to vectorize where the innermost one has too few elements for a vector, copies of
operands that the vector axis would read gathered (laid out with that axis innermost: a padded
input the kernel writes itself, or an activation argument that output rows share), the
accumulator laid out along the vectors, and a vector axis padded to whole vectors."""

from __future__ import annotations

from tvm import s_tir

from explorer.schedule.defaults.analysis import BlockFacts
from explorer.ir.tir_walk import weight_positions


def innermost_output_axis(facts: BlockFacts) -> int | None:
    """The iterator of the output's innermost dimension that has more than one element."""
    return next((k for k in reversed(facts.out_dims)
                 if k is not None and not facts.reduction[k] and facts.extents[k] > 1), None)


def few_channels_pixel_axis(facts: BlockFacts, lanes: int) -> int | None:
    """The output axis next to the innermost one, when the innermost has fewer elements than a
    vector and no 4 of them make a tile's vector (its widest power-of-two divisor is 1 or 2), and
    the next one fills vectors: a convolution to an RGB image's 3 channels ran in scalars; over
    its pixels, the 3 channels are the tile's rows. 4 or 8 channels (16x4 and 28x8 tiles over
    the channels) stay faster over their channels than over pixels with the input copied
    (measurements: docs/notes/measurements.md). None otherwise."""
    axes = [k for k in reversed(facts.out_dims)
            if k is not None and not facts.reduction[k] and facts.extents[k] > 1]
    if len(axes) < 2 or facts.extents[axes[0]] >= lanes or facts.extents[axes[1]] < lanes:
        return None
    channels = facts.extents[axes[0]]
    if channels & -channels >= min(4, lanes):  # its widest power-of-two divisor: a tile's vector
        return None
    return axes[1]


def is_weight(sch: s_tir.Schedule, buffer) -> bool:
    """Whether ``buffer`` is a weight the graph passes as a constant (``schedx.weight_buffers``):
    a schedule may store it in another layout, computed once at build time."""
    func = sch.mod["main"]
    return any(func.params[i].same_as(buffer) for i in weight_positions(func))


def accumulate_along_vectors(sch: s_tir.Schedule, block, facts: BlockFacts, vec: int) -> None:
    """Where output dimensions inside the vector axis have elements (pixels vectorized under a few
    channels, :func:`few_channels_pixel_axis`), lay the tile's accumulator out with the vector
    axis innermost: in the output's layout each vector's lanes lie a channel count apart, and LLVM
    assembled every accumulator from scalars around each multiply-add. The write-back transposes."""
    at = facts.out_dims.index(vec)
    inside = [k for k in facts.out_dims[at + 1:] if k is not None and facts.extents[k] > 1]
    if inside:
        rank = len(facts.out_dims)
        sch.transform_layout(block, ("write", 0), permutation([d for d in range(rank) if d != at] + [at]))


def permutation(order: list[int]):
    """An index map (for ``transform_layout``) that puts dimension ``order[i]`` at position ``i``."""
    return lambda *idx: tuple(idx[d] for d in order)


def gathered_operands(sch: s_tir.Schedule, block, facts: BlockFacts, vec: int | None) -> list | None:
    """Where the output's innermost axis gathers from a buffer, read a copy of it laid out with the
    gathered dimension innermost, so that the vector axis reads it contiguously: the copy the
    kernel writes itself (a padded copy of the input) is written so, and an activation the kernel
    reads as an argument is copied so first.

    A one-channel convolution (a vocoder's or a mask head's last layer) has no output channels to
    vectorize: its pixels are, and NHWC's padded copy reads them ``C`` floats apart (3.5% of the
    peak); laid out ``[N, C, W]`` the pixels are contiguous. An attention einsum
    ``bhid,bhjd->bhij`` (MaxViT's: ``torch.einsum`` exported as such, not as a transpose and a
    matmul) reads ``k`` along ``d``: it got a dot product per output, 2% of the peak, 36% of the
    model, before ``k`` was copied as ``[b, h, d, j]``. Returns the blocks that write the buffers
    laid out again (none: nothing changed). Weights are not copied here (not on every call: the
    graph lays them out at build time), nor an argument no two output rows share: a layer norm's
    sums over channels then read each element once and their copy would be a pass of its own."""
    if vec is None:
        return None
    own = {str(sch.get(b).writes[0].source.name): b for b in sch.get_producers(block) if sch.get(b).writes}
    regions = sch.get(block).reads
    moves, seen = [], set()
    for index, access in enumerate(facts.reads):
        if not access.uses(vec) or vec in access.last:
            continue
        dims = [d for d, used in enumerate(access.dims) if vec in used]
        # an argument is copied where output rows share it (the copy pays for itself): not for a
        # row reduction (a layer norm's sums over channels read each input once)
        argument = access.buffer not in own and not is_weight(sch, regions[index].source) \
            and any(p.same_as(regions[index].source) for p in sch.mod["main"].params) \
            and any(not access.uses(k) for k in facts.spatial if facts.extents[k] > 1)
        if ((access.buffer not in own and not argument) or access.buffer in seen or len(dims) != 1
                or access.divided or access.groups):
            return None  # a weight (not ours to lay out), read twice, or a gather no layout undoes
        seen.add(access.buffer)
        moves.append((index, dims[0], len(regions[index].region), argument))
    return moves


def relayout(sch: s_tir.Schedule, block, facts: BlockFacts, moves: list) -> list:
    """Lay out each operand of ``moves`` (:func:`gathered_operands`) with its gathered dimension
    innermost; returns the blocks that write them (the kernel's own copies, and copies made first)."""
    own = {str(sch.get(b).writes[0].source.name): b for b in sch.get_producers(block) if sch.get(b).writes}
    copies = []
    for index, dim, rank, argument in moves:
        copies.append(sch.cache_read(block, index, "global") if argument else own[facts.reads[index].buffer])
        # the buffer's own rank (trailing unit dimensions included); ``dim`` counts from the front
        order = [d for d in range(rank) if d != dim] + [dim]
        sch.transform_layout(block, ("read", index), permutation(order))
    return copies
