"""``ConvertLayoutNHWC``: convolutions in NHWC with HWIO weights (1-D ones in NWC with WIO, 3-D
ones in NDHWC with DHWIO), where TVM can convert the model.

NHWC data with HWIO weights puts the output channel innermost in both, so a convolution's
vectorized channel loop reads its weights contiguously (ResNet-18 with default schedules: 45 ms
NHWC against 200 ms NCHW on one core). A 1-D convolution left in NCW has its output's width
innermost, read from the input at the stride: a byte-level classifier's strided conv1d ran at
0.5 GFLOPS, 97% of the model, 23-63x ONNX Runtime. TVM's ``ConvertLayout`` refuses some graphs
that have no convolution at all (a ``stack`` fails layout inference): a model without a
convolution is left as it is, and one that TVM cannot convert keeps its own layouts (slower,
never wrong).
"""

from __future__ import annotations

import tvm
from tvm import relax

# Pooling follows its input's layout (ConvertLayout refuses a desired layout for it).
NHWC = {"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv1d": ["NWC", "WIO"], "relax.nn.conv3d": ["NDHWC", "DHWIO"],
        # TVM 0.27 legalizes a transposed conv in NCHW only: kept there, with transposes around it
        # (converted along with its input, it reached the VM unlowered: "CodeGenVM cannot emit")
        "relax.nn.conv2d_transpose": ["NCHW", "IOHW"], "relax.nn.conv1d_transpose": ["NCW", "IOW"]}

_CONVS = tuple(tvm.ir.Op.get(name) for name in ("relax.nn.conv2d", "relax.nn.conv1d", "relax.nn.conv3d"))


def _has_conv(mod: tvm.IRModule) -> bool:
    from explorer.relax_walk import iter_bindings

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            for b in iter_bindings(func):
                if isinstance(b.value, relax.Call) and any(b.value.op.same_as(op) for op in _CONVS):
                    return True
    return False


@tvm.transform.module_pass(opt_level=0, name="ConvertLayoutNHWC")
def ConvertLayoutNHWC(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """ConvertLayout to NHWC/HWIO (NWC/WIO) if the model has a convolution and TVM can convert it
    (see the module docstring); otherwise ``mod`` unchanged."""
    if not _has_conv(mod):
        return mod
    try:
        return relax.transform.ConvertLayout(NHWC)(mod)
    except Exception:  # noqa: BLE001 - TVM's layout inference refused an operator: keep the model's layouts
        return mod


__all__ = ["NHWC", "ConvertLayoutNHWC"]
