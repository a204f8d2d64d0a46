"""Wide grouped convolutions as one convolution per group: for a bf16 build on a CPU with AMX-BF16
tiles, a grouped convolution whose groups are each a convolution the direct AMX kernel takes in bf16
is computed as those convolutions, side by side.

bf16 keeps grouped convolutions in fp32 (:mod:`explorer.passes.bf16_conv` rewrites ``groups == 1``
only). ResNeSt's split attention has 3x3 convolutions of two groups of 32-256 channels each: in
fp32 they took the Winograd path (:mod:`explorer.passes.winograd`), whose transformed weights are
four times the direct ones and whose products have one row per 4x4 tile: at 14 x 14 the 512 -> 1024
one multiplied 16 rows by 38 MB of weights (``matmul8``, 5.2 ms of ResNeSt-14d's 24.6 at one
thread; OpenVINO ran that convolution in 0.61 ms on AMX). Here each group reads its channels of the
input (a slice of the NHWC value), is an ordinary convolution that the bf16 rewrite then puts on the
direct AMX kernel, and the groups' outputs are concatenated along the channels, all between
transposes that ``SinkTransposes`` cancels against the direct kernel's own.

Only where every group is such a convolution (:func:`group_converts`: the direct kernel fits it,
its reduction is long enough for bf16 (:func:`explorer.passes.bf16_conv.why_fp32`), its output
channels whole 16-channel tiles) and there are at most :data:`MAX_GROUPS` groups (each group is a
kernel call with its own slice of the input: ResNeXt's 32 groups of 4-32 channels are left to fp32;
merging its groups of 4 and 8 channels into groups of 32, block-diagonal weights, put its first two
stages on the direct kernel at 8 and 4 times the products, and the model took 19.8 ms against
19.3 at one thread: the slices, concatenations and the ReLU moved into the next kernel cost what the
products saved).
Only for AMX CPUs (:func:`explorer.precision.bf16_module` calls it), after batch-norm is folded
into the weights.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from explorer.ir.relax_walk import tensor_info
from explorer.passes.bf16_conv import split_fits, why_fp32
from explorer.passes.bf16_conv_nhwc import amx_direct_fits
from explorer.passes.conv_groups_limit import MAX_GROUPS
from explorer.passes.conv_rows import TO_NCHW, TO_NHWC, conv_weights, rewrite_folded
from explorer.schedule.bf16_dot import PANEL


def group_converts(group_shape: tuple[int, ...], out_width: int, attrs) -> bool:
    """Whether one group of a grouped convolution, OIHW weights of ``group_shape`` on output rows
    ``out_width`` wide, is a convolution the direct AMX kernel takes in bf16, with whole output tiles."""
    return (int(group_shape[0]) % PANEL == 0
            and amx_direct_fits(group_shape, out_width, attrs.dilation, attrs.strides)
            and why_fp32(group_shape, direct=True, splittable=split_fits(group_shape, out_width)) is None)


def _by_group(call: relax.Call, builder: relax.BlockBuilder):
    """``call``, a grouped convolution, as one convolution per group (module docstring), else None."""
    w = conv_weights(call, range(2, MAX_GROUPS + 1))  # (depthwise: as many as channels)
    if w is None:
        return None
    a = call.attrs
    groups, per_in = int(a.groups), int(w.shape[1])
    per_out = int(w.shape[0]) // groups
    if not group_converts((per_out, *w.shape[1:]), int(tensor_info(call.ty)[0][3]), a):
        return None
    xn = builder.emit(relax.op.permute_dims(call.args[0], TO_NHWC))
    parts = []
    for g in range(groups):
        part = builder.emit(relax.op.strided_slice(xn, axes=[3], begin=[g * per_in], end=[(g + 1) * per_in]))
        conv = builder.emit(relax.op.nn.conv2d(
            builder.emit(relax.op.permute_dims(part, TO_NCHW)), relax.const(w[g * per_out:(g + 1) * per_out]),
            strides=list(a.strides), padding=list(a.padding), dilation=list(a.dilation)))
        parts.append(builder.emit(relax.op.permute_dims(conv, TO_NHWC)))
    return relax.op.permute_dims(builder.emit(relax.op.concat(parts, axis=3)), TO_NCHW)


def convs_by_group(mod: tvm.IRModule, *, folded: tvm.IRModule | None = None) -> tuple[tvm.IRModule, int]:
    """``mod`` (batch-norm folded first) with its wide grouped convolutions as one convolution per
    group (module docstring), and how many were split; ``mod`` itself where none was. ``folded``:
    ``mod`` with its batch norms folded already, where the caller has it; None: folded here."""
    return rewrite_folded(mod, _by_group, folded)


__all__ = ["MAX_GROUPS", "convs_by_group", "group_converts"]
