"""What can be exported: a model (zoo, ONNX example or file) or a kernel (built-in operator or a
model's fused kernel), loaded from the spec a user types, with sample inputs and a reference.

The reference is the strongest one available: ONNX Runtime for models that came from ONNX,
numpy for built-in kernels, else TVM's own untuned build (said so in ``reference_label``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tvm

from explorer.export.errors import ExportError

IOSpec = tuple[str, tuple[int, ...], str]


@dataclass
class ExportWorkload:
    """A loaded workload: ``kind`` is "model" or "kernel"; ``mod`` is the Relax module to export
    (a kernel is wrapped in a one-call ``main``)."""

    spec: str
    kind: str
    name: str
    mod: tvm.IRModule
    inputs: tuple[IOSpec, ...]
    outputs: tuple[IOSpec, ...]
    shapes: str | None = None
    onnx_model: object | None = None
    kernel: object | None = None  # explorer.kernels.Kernel
    origin: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def reference_label(self) -> str:
        if self.onnx_model is not None:
            return "ONNX Runtime"
        if self.kernel is not None and self.kernel.reference is not None:
            return "numpy"
        return "TVM untuned build"

    def sample_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Reproducible inputs: the zoo's own sample inputs, else normal floats / small integers."""
        if self.kernel is not None:
            return {b.name: a for b, a in zip(self.kernel.inputs, self.kernel.random_inputs(seed))}
        if self.origin == "zoo":
            from explorer.models import sample_inputs

            return sample_inputs(self.name, seed=seed)
        rng = np.random.default_rng(seed)
        out = {}
        for name, shape, dtype in self.inputs:
            if "float" in dtype:
                out[name] = rng.standard_normal(shape).astype(dtype)
            else:
                out[name] = rng.integers(0, 8, shape).astype(dtype)
        return out

    def reference(self, inputs: dict[str, np.ndarray], *, threads: int | None = None) -> list[np.ndarray]:
        """Outputs of the reference on ``inputs`` (see the module docstring)."""
        if self.onnx_model is not None:
            session = ort_session(self.onnx_model, threads)
            return [np.asarray(o) for o in session.run(None, inputs)]
        arrays = [inputs[name] for name, _, _ in self.inputs]
        if self.kernel is not None and self.kernel.reference is not None:
            return [np.asarray(r) for r in self.kernel.reference(*arrays)]
        return untuned_outputs(self.mod, arrays)

    def workload_hash(self) -> str:
        """TVM's structural hash of what is exported (a kernel: its MetaSchedule workload key)."""
        import tvm_ffi

        if self.kernel is not None:
            from explorer.export.records import task_key

            return task_key(self.kernel.func)
        return str(tvm_ffi.structural_hash(self.mod) % (1 << 64))

    def to_dict(self) -> dict:
        def io(specs):
            return [{"name": n, "shape": list(s), "dtype": d} for n, s, d in specs]

        return {"spec": self.spec, "kind": self.kind, "name": self.name, "origin": self.origin, "shapes": self.shapes,
                "inputs": io(self.inputs), "outputs": io(self.outputs), "reference": self.reference_label}


def ort_session(onnx_model, threads: int | None = None):
    """An ONNX Runtime CPU session with ``threads`` intra-op threads (default: the usable cores)."""
    import onnxruntime as ort

    from explorer.environment import cpu_info

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads or cpu_info()["usable_cores"])
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(onnx_model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def untuned_outputs(mod: tvm.IRModule, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``mod``'s ``main`` built by ``tvm.compile`` for the plain host CPU (no schedules)."""
    from tvm import relax

    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
    return [o.numpy() for o in flatten_outputs(out)]


def flatten_outputs(value) -> list:
    """A VM result (a tensor or nested tuples of tensors) as a flat list of tensors."""
    if hasattr(value, "numpy"):
        return [value]
    out = []
    for v in value:
        out.extend(flatten_outputs(v))
    return out


def is_kernel_spec(spec: str) -> bool:
    """Whether ``spec`` names a kernel (``matmul:M=64``, ``matmul``, ``resnet18/fused_...``)."""
    from explorer.kernels import BUILTINS

    text = spec.strip()
    if text.lower().endswith(".onnx") or Path(text).is_file():
        return False
    if text.partition(":")[0] in BUILTINS:
        return True
    return "/" in text and ":" not in text and not os.path.exists(text)


def kernel_module(kernel) -> tvm.IRModule:
    """A Relax ``main(inputs) -> outputs`` that calls the kernel's PrimFunc once."""
    from tvm import relax

    buffers = list(kernel.info.buffers)
    n_in = len(kernel.inputs)
    if any(b.is_output for b in buffers[:n_in]):
        raise ExportError(f"{kernel.name}: outputs must come after the inputs to be called from Relax")
    bb = relax.BlockBuilder()
    params = [relax.Var(b.name, relax.TensorType(b.shape, b.dtype)) for b in kernel.inputs]
    out_ty = [relax.TensorType(b.shape, b.dtype) for b in kernel.outputs]
    name = kernel.name.split("/")[-1]
    safe = "".join(ch if ch.isalnum() else "_" for ch in name).strip("_") or "kernel"
    func = kernel.func.without_attr("global_symbol") if "global_symbol" in (kernel.func.attrs or {}) else kernel.func
    with bb.function("main", params):
        gv = bb.add_func(func, safe)
        out = bb.emit(relax.call_tir(gv, relax.Tuple(params), out_ty=out_ty if len(out_ty) > 1 else out_ty[0]))
        bb.emit_func_output(out)
    return bb.get()


def load_workload(spec: str, shapes: str | None = None) -> ExportWorkload:
    """Load a model or kernel spec (see the module docstring); errors are :class:`ExplorerError`s."""
    spec = spec.strip()
    if not spec:
        raise ExportError("no workload given: name a model (small_cnn, resnet18, model.onnx) or a kernel "
                          "(matmul:M=256,N=256,K=256)")
    if is_kernel_spec(spec):
        from explorer.kernels import load_kernel

        kernel = load_kernel(spec)
        mod = kernel_module(kernel)
        return ExportWorkload(
            spec=spec, kind="kernel", name=kernel.name, mod=mod, kernel=kernel, origin="kernel",
            inputs=tuple((b.name, b.shape, b.dtype) for b in kernel.inputs),
            outputs=tuple((b.name, b.shape, b.dtype) for b in kernel.outputs))
    from explorer.models import load_model

    loaded = load_model(spec, shapes)
    return ExportWorkload(spec=spec, kind="model", name=loaded.name, mod=loaded.mod, inputs=loaded.info.inputs,
                          outputs=loaded.info.outputs, shapes=shapes, onnx_model=loaded.onnx_model,
                          origin=loaded.info.origin, notes=loaded.info.notes)


__all__ = ["ExportWorkload", "flatten_outputs", "is_kernel_spec", "kernel_module", "load_workload", "ort_session",
           "untuned_outputs"]
