"""``GateIntoConvWeights``: a squeeze-and-excitation gate multiplied into the weights of the 1x1
convolution that reads the gated map, not into the map.

An SE block (EfficientNet, MobileNetV3, RegNetY) scales each channel of an HxWxC activation by a
gate computed at run time, and a 1x1 convolution (its projection) reads the product. As written,
the product is a pass of its own over the whole map: read HxWxC, write it, and the convolution
reads it again (EfficientNet-B0's 56x56x144 and 112x112x96 maps: 0.1 ms each, one thread). The
convolution computes ``sum_c x[p, c] * g[c] * W[c, k]``: the gate may scale its CxK weights instead
(``W'[c, k] = g[c] * W[c, k]``, once a call), and the convolution read ``x`` itself. That pays where
the map has more pixels than the weights have columns (``H*W >= 2*K``) and the map and its product
together do not fit one core's L2 (:func:`min_map_elements`): EfficientNet's early blocks
(112x112x32, 56x56x96, 56x56x144: the whole model 2-3% faster, one thread, alternated runs). On a
7x7 map with 192 outputs scaling the weights would cost more than the map, and on a map the L2 holds
(MobileNetV3's 28x28x120) the product costs about the launch of the kernel that scales the weights;
the scaled weights are no longer constants packed at build time
(:func:`explorer.schedule.defaults.panels.pack_weights`): those stay as they are.

Where the L2 ends was measured on one CPU only (an Intel Xeon KVM guest, LLVM's ``rocketlake``,
2 MiB of L2 per core, one thread): a 28x28x120 map (376 KB) gained nothing, 56x56x96 (1.2 MB) and
larger gained. The threshold is read as "map + product >= L2": for this machine the pass derives it
from the L2 that Linux reports (:mod:`explorer.measure.cache_sizes`); for another CPU (a named or
cross-compiled one, or where sysfs tells nothing) it takes that Xeon's figure,
:data:`MIN_MAP_ELEMENTS`. With several threads each core's L2 holds a part of the map, so the
threshold is a lower bound there (not measured).

The pass removes the bindings the rewrite leaves unread (the product over the whole map):
run alone, as the IDE's pass snapshots run it, its output has no map multiply left.

Rewritten: ``conv2d(multiply(x, g), W)`` with ``W`` a float32 constant in HWIO of a 1x1 kernel,
one group, NHWC data, ``g`` one value per channel (every other dimension 1) and the product used
by that convolution alone. The sum is the same up to the rounding of ``x * (g * W)`` against
``(x * g) * W``. Runs after the layout conversion (NHWC/HWIO) and before the activations are
rewritten (``g`` may still be any expression).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import tvm
from tvm import relax

from explorer.ir.relax_walk import iter_bindings, relax_functions, use_counts
from explorer.passes.call_rewrite import rewrite_calls, static_ints
from explorer.passes.pass_target import cpu_rewrite

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")
_MULTIPLY = tvm.ir.Op.get("relax.multiply")
# pixels per output channel at least: below, scaling the weights costs more than the map's pass
MIN_PIXELS_PER_OUTPUT = 2
# elements of the map at least where the L2's size is not known (1 MB of float32: half the 2 MiB L2 per core of
# the Xeon it was measured on): a smaller map stays in L2 between the kernels, and its product costs about the
# kernel launch the scaled weights add (MobileNetV3's 28x28x120 gates: no gain)
MIN_MAP_ELEMENTS = 1 << 18
_FLOAT32_BYTES = 4


@dataclass(frozen=True)
class _Uses:
    """How many times each variable of a module's Relax functions is read, and the value bound to each."""

    uses: dict
    values: dict

    @classmethod
    def of(cls, mod: tvm.IRModule) -> _Uses:
        uses: dict = {}
        values: dict = {}
        for func in relax_functions(mod).values():
            uses.update(use_counts(func))
            values.update((b.var, b.value) for b in iter_bindings(func) if isinstance(b, relax.VarBinding))
        return cls(uses, values)


@functools.lru_cache(maxsize=1)
def _host_core_l2_bytes() -> int:
    """One L2 of this machine (0 where Linux reports none)."""
    from explorer.measure.cache_sizes import cache_units, unit_bytes

    return unit_bytes(2, cache_units())


def min_map_elements() -> int:
    """The fewest elements of a map worth the rewrite on the CPU the pass compiles for: half of one
    core's L2 in float32 (the map and its product then do not both stay in it) on this machine,
    :data:`MIN_MAP_ELEMENTS` on any other CPU or where the L2's size is unknown (module docstring)."""
    from explorer.passes.pass_target import pass_cpu_target

    target = pass_cpu_target()
    l2 = _host_core_l2_bytes() if target is not None and target.is_host else 0
    return l2 // (2 * _FLOAT32_BYTES) if l2 else MIN_MAP_ELEMENTS


def _shape(expr) -> list[int] | None:
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    return static_ints(shape.values) if isinstance(shape, relax.ShapeExpr) else None


def _gated(call: relax.Call, uses: _Uses, min_elements: int):
    """``(x, g, channels)`` when ``call`` is a 1x1 NHWC/HWIO conv2d of a constant float32 weight whose
    data is ``multiply(x, g)`` read by it alone, with ``g`` one value per channel; else None."""
    data, weight = call.args
    a = call.attrs
    if not (isinstance(weight, tvm.ir.Constant) and isinstance(data, relax.Var)) or int(a.groups) != 1 \
            or str(a.data_layout) != "NHWC" or str(a.kernel_layout) != "HWIO" or str(weight.value.dtype) != "float32":
        return None
    w_shape = [int(d) for d in weight.value.shape]
    if w_shape[:2] != [1, 1]:
        return None
    product = data
    while isinstance(product, relax.Var):  # through plain rebindings (``lv37 = lv19``), each read once
        if uses.uses.get(product, 0) != 1:
            return None
        product = uses.values.get(product)
    if not isinstance(product, relax.Call) or not product.op.same_as(_MULTIPLY):
        return None
    x_shape, channels = _shape(data), w_shape[2]
    if x_shape is None or len(x_shape) != 4 or x_shape[3] != channels:
        return None
    if x_shape[1] * x_shape[2] < MIN_PIXELS_PER_OUTPUT * w_shape[3] or math.prod(x_shape) < min_elements:
        return None
    for x, g in (product.args, reversed(product.args)):
        g_shape = _shape(g)
        if _shape(x) == x_shape and g_shape and g_shape[-1] == channels and all(d == 1 for d in g_shape[:-1]) \
                and str(getattr(g.ty, "dtype", "")) == "float32":
            return x, g, channels
    return None


def _rewrite(uses: _Uses, min_elements: int):
    def rewrite(call: relax.Call, builder) -> relax.Expr | None:
        if not call.op.same_as(_CONV2D):
            return None
        found = _gated(call, uses, min_elements)
        if found is None:
            return None
        x, gate, channels = found
        data, weight = call.args
        a = call.attrs
        scaled = relax.op.multiply(weight, relax.op.reshape(gate, [1, 1, channels, 1]))
        return relax.op.nn.conv2d(x, scaled, strides=a.strides, padding=a.padding, dilation=a.dilation, groups=1,
                                  data_layout=a.data_layout, kernel_layout=a.kernel_layout, out_layout=a.out_layout,
                                  out_dtype=str(call.ty.dtype))
    return rewrite


@tvm.transform.module_pass(opt_level=0, name="GateIntoConvWeights")
@cpu_rewrite
def GateIntoConvWeights(mod: tvm.IRModule, target) -> tvm.IRModule:
    """Multiply channel gates into the 1x1 convolution's weights (see the module docstring)."""
    rewritten = rewrite_calls(mod, _rewrite(_Uses.of(mod), min_map_elements()))
    if rewritten.same_as(mod):
        return mod
    return relax.transform.DeadCodeElimination()(rewritten)  # the product over the whole map, now unread


__all__ = ["MIN_MAP_ELEMENTS", "MIN_PIXELS_PER_OUTPUT", "GateIntoConvWeights", "min_map_elements"]
