"""What a pipeline run records: one :class:`Snapshot` per pass, with counts of the module after it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import tvm
from tvm import relax

from explorer.graph.extract import op_family
from explorer.ir.relax_walk import (
    callee_name, flatten_args, is_constant, is_primitive, iter_bindings, prim_funcs, relax_functions,
    tensor_bytes,
)
from store.values import DictValue


@dataclass(frozen=True)
class ModuleCounts(DictValue):
    """Sizes of a module: what a person checks first after a pass."""

    relax_functions: int
    fused_functions: int
    prim_funcs: int
    bindings: int
    calls: dict[str, int]
    constants: int
    constant_bytes: int
    activation_bytes: int
    planned_bytes: int | None


@dataclass(frozen=True)
class Snapshot(DictValue):
    """The module after one pass (the module itself lives in :class:`PipelineRun`)."""

    index: int
    name: str
    depth: int
    parent: int | None
    seconds: float
    changed: bool
    composite: bool
    counts: ModuleCounts


def _planned_bytes(mod: tvm.IRModule) -> int | None:
    """Bytes of the statically planned storage in ``main``, once memory planning has run."""
    func = relax_functions(mod).get("main")
    if not isinstance(func, relax.Function):
        return None
    total, found = 0, False
    for b in iter_bindings(func):
        v = b.value
        if isinstance(v, relax.Call) and callee_name(v) in ("relax.memory.alloc_storage", "relax.vm.alloc_storage"):
            found = True
            shape = v.args[0]
            if isinstance(shape, relax.ShapeExpr) and all(isinstance(x, tvm.tirx.IntImm) for x in shape.values):
                total += int(shape.values[0].value)
    return total if found else None


def module_counts(mod: tvm.IRModule) -> ModuleCounts:
    """Count functions, calls by op family, constants and activation memory of ``mod``."""
    funcs = relax_functions(mod)
    calls: Counter = Counter()
    bindings = constants = constant_bytes = activation_bytes = 0
    for name, func in funcs.items():
        for b in iter_bindings(func):
            bindings += 1
            v = b.value
            if isinstance(v, relax.Call):
                calls[op_family(callee_name(v))] += 1
                for a in v.args:
                    for leaf in flatten_args(a):
                        if is_constant(leaf):
                            constants += 1
                            constant_bytes += tensor_bytes(leaf.ty)
            if name == "main":
                activation_bytes += tensor_bytes(b.var.ty)
    return ModuleCounts(
        relax_functions=len(funcs),
        fused_functions=sum(1 for f in funcs.values() if is_primitive(f)),
        prim_funcs=len(prim_funcs(mod)),
        bindings=bindings,
        calls=dict(calls.most_common()),
        constants=constants,
        constant_bytes=constant_bytes,
        activation_bytes=activation_bytes,
        planned_bytes=_planned_bytes(mod),
    )
