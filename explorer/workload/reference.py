"""References a workload is checked against: ONNX Runtime for models that came from ONNX, TVM's
own untuned build otherwise (numpy for built-in kernels lives with the kernel)."""

from __future__ import annotations

import numpy as np
import tvm


def ort_session(onnx_model, threads: int | None = None):
    """An ONNX Runtime CPU session with ``threads`` intra-op threads (default: the usable cores)."""
    import onnxruntime as ort

    from explorer.environment import cpu_info

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads or cpu_info()["usable_cores"])
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(onnx_model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


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
