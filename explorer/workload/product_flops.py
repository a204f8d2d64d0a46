"""How much of a kernel's FLOP count is its products (the multiply-adds of its reduction blocks).

The FLOP count a kernel's GFLOPS is read from (TVM's ``estimate_tir_flops``) counts every arithmetic
node of every block: a convolution's multiply-adds, and also each element-wise op of the epilogue
fused into it. A sigmoid computed by ``fast_exp`` is about 85 such ops a value (its polynomial, its
clamps, its exponent's integer arithmetic), so efficientnet_b0's 1x1 convolution with a SiLU counts
2.85 times its multiply-adds. Those element-wise ops run on the vector units beside the FMA ones (a
Zen 5 core has two FADD pipes besides its two FMA pipes): at 536 "GFLOPS" that kernel read above the
FMA peak (472) while its products ran at 188, and raised the peak. Only a kernel whose count is
mostly products is read against the FMA peak (:data:`PRODUCT_SHARE`: it may raise the peak or lift
the roof; another's figure above the peak is no figure of the FMA units, and is left blank).
"""

from __future__ import annotations

import math

from tvm.ir import IRModule

PRODUCT_SHARE = 0.9  # a kernel's count is its products' when they are at least this share of it


def product_share(mod: IRModule) -> float:
    """The share of the one-function task module ``mod``'s FLOP count in its reduction blocks (each
    counted by ``estimate_tir_flops`` over its block's domain); 1.0 where nothing is counted, or the
    blocks cannot be told apart (scheduled already, opaque)."""
    from tvm import s_tir
    from tvm.s_tir.analysis import estimate_tir_flops

    from explorer.schedule.defaults.analysis import root_blocks

    try:
        sch = s_tir.Schedule(mod)
        products = total = 0.0
        for rv in root_blocks(sch):
            block = sch.get(rv)
            volume = math.prod(int(iv.dom.extent) for iv in block.iter_vars)
            flops = volume * (estimate_tir_flops(block.body) + (estimate_tir_flops(block.init) if block.init else 0))
            total += flops
            products += flops if any(int(iv.iter_type) != 0 for iv in block.iter_vars) else 0.0
    except Exception:  # noqa: BLE001 - a module these blocks do not describe: its count taken as it is
        return 1.0
    return products / total if total else 1.0


__all__ = ["PRODUCT_SHARE", "product_share"]
