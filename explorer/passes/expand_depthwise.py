"""``ExpandIntoDepthwise``: an inverted-residual block's 1x1 expansion computed inside the strided
depthwise conv that reads it, by bands of output rows (:mod:`.expand_depthwise_kernel`).

MobileNetV2's second block expands 16 -> 96 channels at 112x112: a 4.8 MB float32 map, more than a
core's 2 MiB L2, which the stride-2 depthwise conv then reads back from L3. Computed by bands, the
expanded rows a band needs (``2 * band + 1`` at stride 2; the row two bands share computed twice)
stay in the L2 of the core that reads them. Measured (Intel Xeon KVM guest, AVX-512, the two
kernels alone against the prototype, alternated rounds, load 1.1-1.5): 16 -> 96 @112 stride 2 at
1 thread 0.460 -> 0.370 ms, at 2 threads 0.223 -> 0.181 ms (0.79-0.81x; the built kernels of the model
0.77-0.82x). The whole of MobileNetV2 at 2 threads (load 1.1-1.3, 15-21 alternated rounds): bf16 0.971-0.987x
(2.296 -> 2.227 ms), fp32 0.938-0.985x; at 1 thread level within the noise (0.98-1.02x: the profile's kernel
sum 0.05-0.08 ms lower). Bands of 4 or 2 rows did no better in the model. Where the map fits
the L2 it loses: 24 -> 144 @56 (1.8 MB) stride 1 1.16-1.24x, stride 2 1.09-1.22x (the recomputed
rows and the padded columns cost more than the L2 traffic they save). Hence the rewrite only where
the expanded map is larger than one core's L2 (:func:`min_map_bytes`) and the depthwise conv is
strided (stride 1 recomputes 2 rows a band, not 1: not measured on a large map).

Rewritten: ``depthwise(act(conv2d_1x1(x, W) + b), Wd)`` in NHWC/HWIO, float32, ``W`` and ``Wd``
constants, ``act`` a chain of per-channel constant adds and scalar max/min (bias, ReLU, ReLU6),
every intermediate read by the next step alone; the depthwise conv's own epilogue stays in the graph
and FuseOps fuses it into the new kernel. Runs after the layout conversion (NHWC) and the bf16
rewrites (a bf16 expansion is no ``conv2d`` any more: a short-K one that stays float32 is).
"""

from __future__ import annotations

import functools

import tvm
from tvm import relax

from explorer.ir.relax_walk import iter_bindings, relax_functions, use_counts
from explorer.passes.call_rewrite import rewrite_calls, static_ints
from explorer.passes.expand_depthwise_kernel import EpilogueStep, expand_depthwise_func
from explorer.passes.pass_target import cpu_rewrite
from explorer.schedule.defaults.expand_depthwise import band_tiles

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")
_STEPS = {tvm.ir.Op.get("relax.add"): "add", tvm.ir.Op.get("relax.maximum"): "max",
          tvm.ir.Op.get("relax.minimum"): "min"}
# one core's L2 where the CPU built for is not this machine (the Xeon measured: 2 MiB)
DEFAULT_L2_BYTES = 2 << 20
_FLOAT32 = "float32"


@functools.lru_cache(maxsize=1)
def _host_l2_bytes() -> int:
    from explorer.measure.cache_sizes import cache_units, unit_bytes

    return unit_bytes(2, cache_units())


def min_map_bytes(target) -> int:
    """The smallest expanded map worth the rewrite on the CPU ``target``: one core's L2 on this machine
    (as Linux reports it), :data:`DEFAULT_L2_BYTES` for any other CPU or where the size is unknown."""
    l2 = _host_l2_bytes() if target.is_host else 0
    return l2 or DEFAULT_L2_BYTES


def _shape(expr) -> list[int] | None:
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    return static_ints(shape.values) if isinstance(shape, relax.ShapeExpr) else None


def _float_const(expr) -> bool:
    return isinstance(expr, tvm.ir.Constant) and str(expr.value.dtype) == _FLOAT32


def _nhwc(call: relax.Call) -> bool:
    a = call.attrs
    return (str(a.data_layout) == "NHWC" and str(a.kernel_layout) == "HWIO" and str(a.out_layout) == "NHWC"
            and static_ints(a.dilation) == [1, 1] and str(call.ty.dtype) == _FLOAT32 and _float_const(call.args[1]))


def _depthwise(call: relax.Call) -> bool:
    """A strided float32 depthwise conv (one channel a group) of a constant HWIO weight."""
    if not call.op.same_as(_CONV2D) or not _nhwc(call):
        return False
    x_shape, w_shape = _shape(call.args[0]), [int(d) for d in call.args[1].value.shape]
    strides = static_ints(call.attrs.strides)
    return (x_shape is not None and len(x_shape) == 4 and int(call.attrs.groups) == x_shape[3] == w_shape[3]
            and w_shape[2] == 1 and strides is not None and strides[0] == strides[1] >= 2)


def _expansion(call) -> bool:
    """A float32 1x1 stride-1 conv (one group, no padding) of a constant HWIO weight."""
    if not isinstance(call, relax.Call) or not call.op.same_as(_CONV2D) or not _nhwc(call):
        return False
    w_shape = [int(d) for d in call.args[1].value.shape]
    return (w_shape[:2] == [1, 1] and int(call.attrs.groups) == 1 and static_ints(call.attrs.strides) == [1, 1]
            and static_ints(call.attrs.padding) == [0, 0, 0, 0] and _shape(call.args[0]) is not None)


def _step(call: relax.Call, channels: int):
    """``(input, EpilogueStep, constant or None)`` for one element-wise step of the expansion, else None."""
    op = next((name for o, name in _STEPS.items() if call.op.same_as(o)), None)
    if op is None:
        return None
    for data, other in (call.args, reversed(call.args)):
        if not isinstance(data, relax.Var) or not _float_const(other):
            continue
        shape = [int(d) for d in other.value.shape]
        if op == "add" and shape and shape[-1] == channels and all(d == 1 for d in shape[:-1]):
            return data, EpilogueStep("add"), other
        if op != "add" and not shape:
            return data, EpilogueStep(op, float(other.value.numpy())), None
    return None


def _chain(data, uses: dict, values: dict):
    """``(expansion call, steps, constants)`` when ``data`` is an expansion's activation read by the
    depthwise conv alone, each step read by the next alone; else None."""
    steps: list[EpilogueStep] = []
    consts: list = []
    node = data
    while isinstance(node, relax.Var):
        if uses.get(node, 0) != 1:
            return None
        value = values.get(node)
        if _expansion(value):
            return value, tuple(reversed(steps)), list(reversed(consts))
        if not isinstance(value, relax.Call):
            return None
        channels = (_shape(node) or [0])[-1]
        found = _step(value, channels)
        if found is None:
            return None
        node, step, const = found
        steps.append(step)
        if const is not None:
            consts.append(const)
    return None


def _rewrite(uses: dict, values: dict, min_bytes: int, lanes: int):
    def rewrite(call: relax.Call, builder: relax.BlockBuilder) -> relax.Expr | None:
        if not _depthwise(call):
            return None
        found = _chain(call.args[0], uses, values)
        if found is None:
            return None
        conv, steps, consts = found
        x, w1 = conv.args
        map_shape = _shape(call.args[0])
        if _shape(conv) != map_shape:  # a step broadcast the expansion (a 1-channel conv plus a C-channel bias)
            return None
        if 4 * map_shape[0] * map_shape[1] * map_shape[2] * map_shape[3] <= min_bytes:
            return None
        if band_tiles(int(_shape(call)[2]), map_shape[3], lanes) is None:
            return None  # the bands' schedule cannot take it: two kernels stay faster than one unbanded
        padding = static_ints(call.attrs.padding)
        func = expand_depthwise_func(_shape(x), w1.value.shape, [c.value.shape for c in consts],
                                     call.args[1].value.shape, steps=steps,
                                     strides=tuple(static_ints(call.attrs.strides)), padding=tuple(padding))
        gv = builder.add_func(func.without_attr("global_symbol"), "expand_depthwise")
        return relax.call_tir(gv, [x, w1, *consts, call.args[1]], call.ty)
    return rewrite


def expand_into_depthwise(mod: tvm.IRModule, min_bytes: int, lanes: int = 16) -> tvm.IRModule:
    """``mod`` with each 1x1 expansion whose float32 map is larger than ``min_bytes`` computed inside
    the strided depthwise conv that reads it, where the bands' schedule takes it on vectors of ``lanes``
    float32 (:func:`explorer.schedule.defaults.expand_depthwise.band_tiles`; module docstring);
    ``mod`` itself where none is."""
    uses: dict = {}
    values: dict = {}
    for func in relax_functions(mod).values():
        uses.update(use_counts(func))
        values.update((b.var, b.value) for b in iter_bindings(func) if isinstance(b, relax.VarBinding))
    rewritten = rewrite_calls(mod, _rewrite(uses, values, min_bytes, lanes))
    if rewritten.same_as(mod):
        return mod
    return relax.transform.DeadCodeElimination()(rewritten)  # the expansion's chain, now unread


@tvm.transform.module_pass(opt_level=0, name="ExpandIntoDepthwise")
@cpu_rewrite
def ExpandIntoDepthwise(mod: tvm.IRModule, target) -> tvm.IRModule:
    """Compute each 1x1 expansion larger than one core's L2 inside the strided depthwise conv reading it."""
    return expand_into_depthwise(mod, min_map_bytes(target), target.cpu_spec().lanes("float32"))


__all__ = ["DEFAULT_L2_BYTES", "ExpandIntoDepthwise", "expand_into_depthwise", "min_map_bytes"]
