"""``FastMathTransform`` as TVM 0.27 writes it, for modules that call their own Relax functions.

TVM's pass (``tvm.relax.transform.FastMathTransform``) reads ``call.op.name`` on every call, and a
call of a Relax function (a ``GlobalVar``: the recursive function a data-dependent ``Loop``
becomes, :mod:`explorer.models.loop_relax`) has no ``name``: the pass fails with an
``AttributeError``. This one makes the same rewrites (``exp``, ``erf``, ``tanh`` and ``softmax``
as TOPI's fast approximations, emitted the same way; softmax normalised by its rows' reciprocals,
:mod:`explorer.passes.fast_softmax`) and leaves every other call alone.
"""

from __future__ import annotations

import tvm
from tvm import relax, topi

from explorer.passes.call_rewrite import rewrite_calls
from explorer.passes.fast_softmax import fast_softmax

_UNARY = {"relax.exp": topi.fast_exp, "relax.erf": topi.fast_erf, "relax.tanh": topi.fast_tanh}


def _fast(call: relax.Call, builder: relax.BlockBuilder):
    if not isinstance(call.op, tvm.ir.Op):
        return None
    if call.op.name == "relax.nn.softmax":
        return builder.call_te(fast_softmax, call.args[0], int(call.attrs.axis))
    make = _UNARY.get(call.op.name)
    return builder.call_te(make, call.args[0]) if make is not None else None


@tvm.transform.module_pass(opt_level=0, name="FastMathTransform")
def FastMathTransform(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Replace exp, erf, tanh and softmax with TVM's fast approximations (see the module docstring)."""
    return rewrite_calls(mod, _fast)


__all__ = ["FastMathTransform"]
