"""References a workload is checked against: ONNX Runtime for models that came from ONNX, TVM's
own untuned build otherwise (numpy for built-in kernels lives with the kernel)."""

from __future__ import annotations

import numpy as np
import tvm

from explorer.models.ort_run import ort_session  # the one CPU session every reference and baseline uses


def flatten_outputs(value) -> list:
    """A VM result (a tensor or nested tuples of tensors) as a flat list of tensors."""
    if hasattr(value, "numpy"):
        return [value]
    out = []
    for v in value:
        out.extend(flatten_outputs(v))
    return out


def untuned_outputs(mod: tvm.IRModule, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``mod``'s ``main`` built by ``tvm.compile`` for a generic CPU of this machine's
    architecture (no schedules, no CPU-specific instructions: it runs on any such machine)."""
    from tvm import relax

    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
    return [o.numpy() for o in flatten_outputs(out)]


__all__ = ["flatten_outputs", "ort_session", "untuned_outputs"]
