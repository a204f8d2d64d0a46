"""The fused kernels of a model: every PrimFunc after the tuning pipeline (FuseOps + FuseTIR),
weighted by how often the model calls it."""

from __future__ import annotations

from collections import Counter

import tvm
from tvm import relax

from explorer.kernels.kernel import Kernel, make_kernel
from explorer.models.source import LoadedModel
from explorer.passes import run_pipeline
from explorer.relax_walk import callee_name, iter_bindings, prim_funcs


def call_counts(mod: tvm.IRModule) -> Counter:
    """How many times ``main`` calls each PrimFunc."""
    counts: Counter = Counter()
    for b in iter_bindings(mod["main"]):
        if isinstance(b.value, relax.Call):
            counts[callee_name(b.value)] += 1
    return counts


def model_kernels(loaded: LoadedModel) -> list[Kernel]:
    """Kernels of ``loaded`` after the tuning pipeline, most FLOPs-weighted first.

    ``params["calls"]`` says how often the model runs each one."""
    run = run_pipeline(loaded.mod, "tuning")
    if run.error:
        from explorer.kernels import KernelError

        raise KernelError(f"the tuning pipeline failed on {loaded.name}: {run.error}")
    mod = run.module(len(run.snapshots) - 1)
    calls = call_counts(mod)
    kernels = []
    for name, func in prim_funcs(mod).items():
        kernels.append(make_kernel(func, name=f"{loaded.name}/{name}", title=name, source=f"model:{loaded.name}",
                                   spec=f"{loaded.name}/{name}", params={"calls": calls.get(name, 0)}))
    kernels.sort(key=lambda k: -k.info.flops * max(1, k.info.params["calls"]))
    return kernels
