"""How much of a kernel's FLOP count is its products (the multiply-adds of its reduction blocks).

The FLOP count a kernel's GFLOPS is read from (TVM's ``estimate_tir_flops``) counts every arithmetic
node of every block: a convolution's multiply-adds, and also each element-wise op of the epilogue
fused into it. A sigmoid computed by ``fast_exp`` is about 85 such ops a value (its polynomial, its
clamps, its exponent's integer arithmetic), so efficientnet_b0's 1x1 convolution with a SiLU counts
2.85 times its multiply-adds. Those element-wise ops run on the vector units beside the FMA ones (a
Zen 5 core has two FADD pipes besides its two FMA pipes): at 536 "GFLOPS" that kernel read above the
FMA peak (472) while its products ran at 188, and raised the peak. A kernel whose count is mostly
products (:data:`PRODUCT_SHARE`; a depthwise 3x3 with its bias and relu6 reads 0.86, a 1x1 with a
SiLU 0.35) may raise the FMA peak and lift the roof; another raises no peak nor lifts the roof, and its
% peak above 100 is no figure (left blank: it runs at its compute limit, counting ops that the FMA
peak does not). Reading such a kernel on its products' FLOPs alone was tried and dropped: it treats
the element-wise work as free, and efficientnet_b0's headroom read 71% of its kernels' time.

A reduction block counts as products where its update multiplies (a pool's max or a mean's sum does
not); a block with no iteration variables (a recurrent layer written whole: its loops inside one
block) and a module these blocks do not describe (symbolic extents) read 1.0: their count is taken
as it is, as before this module.
"""

from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.ir import IRModule
from tvm.ir.expr import TensorLoad

PRODUCT_SHARE = 0.9  # a kernel's count is its products' when they are at least this share of it


def beside_products(mod: IRModule) -> bool:
    """Whether ``mod``'s FLOP count is largely element-wise work beside its products (a share under
    :data:`PRODUCT_SHARE`): its GFLOPS is no figure of the FMA units, and may read above their peak."""
    return product_share(mod) < PRODUCT_SHARE


def product_share(mod: IRModule) -> float:
    """The share of ``mod``'s FLOP count (every PrimFunc of it, by any name) in reduction blocks that
    multiply, each counted by ``estimate_tir_flops`` over its block's domain; 1.0 where nothing is
    counted or the blocks do not describe the work (module docstring)."""
    products = total = 0.0
    for _, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        counted = _counted(func)
        if counted is None:
            return 1.0
        products, total = products + counted[0], total + counted[1]
    return products / total if total else 1.0


def _counted(func: tirx.PrimFunc) -> tuple[float, float] | None:
    """(FLOPs in reduction blocks that multiply, all FLOPs) of ``func``'s root blocks; None where a block
    has no iteration variables or an extent is not a number."""
    from tvm import s_tir
    from tvm.s_tir.analysis import estimate_tir_flops

    from explorer.schedule.defaults.analysis import root_blocks, sub_exprs

    try:
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        products = total = 0.0
        for rv in root_blocks(sch):
            block = sch.get(rv)
            if not block.iter_vars:
                return None
            volume = math.prod(int(iv.dom.extent) for iv in block.iter_vars)
            flops = volume * (estimate_tir_flops(block.body) + (estimate_tir_flops(block.init) if block.init else 0))
            total += flops
            value = getattr(block.body, "value", None)
            multiplies = value is not None and any(  # values read from buffers (not an index's arithmetic)
                isinstance(n, tirx.Mul) and any(isinstance(x, TensorLoad) for x in sub_exprs(n)) for n in sub_exprs(value))
            if multiplies and any(int(iv.iter_type) != 0 for iv in block.iter_vars):
                products += flops
    except Exception:  # noqa: BLE001 - a module these blocks do not describe: its count taken as it is
        return None
    return products, total


__all__ = ["beside_products", "PRODUCT_SHARE", "product_share"]
