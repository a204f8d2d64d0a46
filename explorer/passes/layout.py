"""``ConvertLayoutNHWC``: convolutions in NHWC with HWIO weights (1-D ones in NWC with WIO, 3-D
ones in NDHWC with DHWIO), where TVM can convert the model.

NHWC data with HWIO weights puts the output channel innermost in both, so a convolution's
vectorized channel loop reads its weights contiguously (ResNet-18 with default schedules: 45 ms
NHWC against 200 ms NCHW on one core). A 1-D convolution left in NCW has its output's width
innermost, read from the input at the stride: a byte-level classifier's strided conv1d ran at
0.5 GFLOPS, 97% of the model, 23-63x ONNX Runtime. TVM's ``ConvertLayout`` refuses some graphs
that have no convolution at all (a ``stack`` fails layout inference): a model without a
convolution is left as it is.

Where TVM's conversion refuses the model, each convolution is converted on its own instead: it
reads ``permute_dims(x, NHWC)`` and returns ``permute_dims(y, NCHW)``, and ``SinkTransposes`` then
cancels the pairs between consecutive convolutions (through the bias adds, activations and pools
between them). TVM refuses a graph with a ``stack``, or with a ``squeeze`` of an axis spelt
negative (``std::bad_alloc`` in its layout inference): a Conformer speech encoder's squeeze had kept
its convolutions in NCHW, vectorized over a 19-pixel output width: 8 GFLOPS, 96% of the model, 19x
ONNX Runtime. ``squeeze`` axes are made non-negative first, so that TVM converts such graphs whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import relax

from explorer.passes.call_rewrite import rewrite_calls

# Pooling follows its input's layout (ConvertLayout refuses a desired layout for it).
NHWC = {"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv1d": ["NWC", "WIO"], "relax.nn.conv3d": ["NDHWC", "DHWIO"],
        # TVM 0.27 legalizes a transposed conv in NCHW only: kept there, with transposes around it
        # (converted along with its input, it reached the VM unlowered: "CodeGenVM cannot emit")
        "relax.nn.conv2d_transpose": ["NCHW", "IOHW"], "relax.nn.conv1d_transpose": ["NCW", "IOW"]}

_CONVS = tuple(tvm.ir.Op.get(name) for name in ("relax.nn.conv2d", "relax.nn.conv1d", "relax.nn.conv3d"))


@dataclass(frozen=True)
class _ChannelsLast:
    """One convolution's channels-first layouts, their channels-last ones, and the permutations."""

    data: str
    kernel: str
    data_last: str
    kernel_last: str
    build: Callable

    def perm(self, source: str, dest: str) -> list[int]:
        return [source.index(axis) for axis in dest]


_CHANNELS_LAST = {
    "relax.nn.conv1d": _ChannelsLast("NCW", "OIW", "NWC", "WIO", relax.op.nn.conv1d),
    "relax.nn.conv2d": _ChannelsLast("NCHW", "OIHW", "NHWC", "HWIO", relax.op.nn.conv2d),
    "relax.nn.conv3d": _ChannelsLast("NCDHW", "OIDHW", "NDHWC", "DHWIO", relax.op.nn.conv3d),
}


def _non_negative_squeeze(call: relax.Call, bb: relax.BlockBuilder) -> relax.Expr | None:
    """``squeeze`` with its axes non-negative (TVM's layout inference throws on -1)."""
    if getattr(call.op, "name", "") != "relax.squeeze" or call.attrs.axis is None:
        return None
    rank = getattr(call.args[0].ty, "ndim", -1)
    axes = [int(a) for a in call.attrs.axis]
    if rank is None or rank < 0 or all(a >= 0 for a in axes):
        return None
    return relax.op.squeeze(call.args[0], axis=[a % rank for a in axes])


def _channels_last(call: relax.Call, bb: relax.BlockBuilder) -> relax.Expr | None:
    """A channels-first convolution as a channels-last one between two transposes."""
    spec = _CHANNELS_LAST.get(getattr(call.op, "name", ""))
    if spec is None:
        return None
    a = call.attrs
    if (a.data_layout, a.kernel_layout, a.out_layout or a.data_layout) != (spec.data, spec.kernel, spec.data):
        return None
    out_dtype = None if str(a.out_dtype) in ("", "None", "void") else str(a.out_dtype)
    data = bb.emit(relax.op.permute_dims(call.args[0], spec.perm(spec.data, spec.data_last)))
    weight = bb.emit(relax.op.permute_dims(call.args[1], spec.perm(spec.kernel, spec.kernel_last)))
    conv = bb.emit(spec.build(data, weight, strides=list(a.strides), padding=list(a.padding),
                              dilation=list(a.dilation), groups=int(a.groups), data_layout=spec.data_last,
                              kernel_layout=spec.kernel_last, out_layout=spec.data_last, out_dtype=out_dtype))
    return relax.op.permute_dims(conv, spec.perm(spec.data_last, spec.data))


def _has_conv(mod: tvm.IRModule) -> bool:
    from explorer.ir.relax_walk import iter_bindings

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            for b in iter_bindings(func):
                if isinstance(b.value, relax.Call) and any(b.value.op.same_as(op) for op in _CONVS):
                    return True
    return False


@tvm.transform.module_pass(opt_level=0, name="ConvertLayoutNHWC")
def ConvertLayoutNHWC(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """ConvertLayout to NHWC/HWIO (NWC/WIO) if the model has a convolution; where TVM refuses the
    model, each convolution on its own (see the module docstring); without one, ``mod`` unchanged."""
    if not _has_conv(mod):
        return mod
    mod = rewrite_calls(mod, _non_negative_squeeze)
    try:
        return relax.transform.ConvertLayout(NHWC)(mod)
    except Exception:  # noqa: BLE001 - TVM's layout inference refused an operator: convert conv by conv
        return rewrite_calls(mod, _channels_last)


__all__ = ["NHWC", "ConvertLayoutNHWC"]
