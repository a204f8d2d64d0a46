"""Convolutions a bf16 build computes in fp32 after all: those whose bf16 kernel the default
schedule could not tile (its rule fell back, or its dot-product tile declined it).

Such a kernel would run as a plain loop nest over uint16 bits, tens of times slower than the fp32
convolution (efficientnet_b0 took 197 ms against 3.7 when a rule failed on its kernels), so the
build computes those convolutions in fp32 instead (:func:`explorer.precision.with_convs_fp32`, from
the model as written) and says so. A convolution is named by its ordinal: the place of its
weights among the convolution weights of the module :func:`explorer.passes.bf16_conv.bf16_convs`
rewrites (functions by name, bindings in order), the same in every rewrite of the same module;
convolutions that share their weights share an ordinal. Each packed weight constant the rewrite
makes remembers its ordinal (``packed_from``), and the constant is the one the fused module's
kernel calls still pass: from the kernels that fell back to the convolutions they compute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import tvm
from tvm import relax

from explorer.ir.relax_walk import is_constant, iter_bindings, kernel_call

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")


def conv_ordinals(mod: tvm.IRModule) -> dict:
    """Each constant convolution weight of ``mod`` -> its ordinal (module docstring)."""
    ordinals: dict = {}
    for gv, func in sorted(mod.functions_items(), key=lambda item: item[0].name_hint):
        if not isinstance(func, relax.Function):
            continue
        for binding in iter_bindings(func):
            value = getattr(binding, "value", None)
            if isinstance(value, relax.Call) and value.op.same_as(_CONV2D) and is_constant(value.args[1]) \
                    and value.args[1] not in ordinals:
                ordinals[value.args[1]] = len(ordinals)
    return ordinals


def convs_of_kernels(fused: tvm.IRModule, kernels: Iterable[str], packed_from: Mapping) -> dict[str, frozenset[int]]:
    """Per kernel named in ``kernels`` that computes a bf16 convolution in ``fused`` (a bf16 build's
    fused module; ``packed_from``: each packed weight constant's ordinal, from the rewrite), the
    ordinals of its convolutions; a kernel that computes none is left out. One walk of the module."""
    names, found = set(kernels), {}
    if not names or not packed_from:
        return {}
    for gv, func in fused.functions_items():
        if not isinstance(func, relax.Function):
            continue
        for binding in iter_bindings(func):
            called = kernel_call(getattr(binding, "value", None))
            if called is not None and called[0].name_hint in names:
                ordinals = {packed_from[a] for a in called[1] if is_constant(a) and a in packed_from}
                if ordinals:
                    found.setdefault(called[0].name_hint, set()).update(ordinals)
    return {name: frozenset(ordinals) for name, ordinals in found.items()}


__all__ = ["conv_ordinals", "convs_of_kernels"]
