"""A workload loaded from what a user typed: a model (zoo, ONNX example or file, with ``shapes``
for symbolic dimensions) or a kernel (built-in operator or a model's fused kernel), with sample
inputs, its reference and its tasks. Search, export, bench, profile, the CLI and the pages all load
workloads here.

The reference is the strongest one available: ONNX Runtime for models that came from ONNX,
numpy for built-in kernels, else TVM's own untuned build (said so in ``reference_label``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import tvm

from explorer.workload.fusion import WorkloadError, fused_module, own_pipeline_target
from explorer.workload.spec import is_kernel_spec
from explorer.workload.task import Task, kernel_task, module_tasks, relax_name

IOSpec = tuple[str, tuple[int, ...], str]


@dataclass
class Workload:
    """A loaded workload: ``kind`` is "model" or "kernel"; ``mod`` is its Relax module (a kernel
    is wrapped in a one-call ``main``); ``source`` is what its records name as their origin."""

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
    precision: object | None = None  # explorer.precision.Precision once built at one (None: as written)
    build_target: object | None = None  # the other CPU or device its task pipeline runs for (None: this machine; for_target)
    _fused: tvm.IRModule | None = field(default=None, repr=False)

    @property
    def source(self) -> str:
        """The origin records of its tasks carry: ``builtin:matmul``, ``model:resnet18``."""
        if self.kernel is not None:
            return self.kernel.info.source
        return f"model:{self.name}"

    @property
    def input_shapes(self) -> str:
        """The concrete input shapes as ``--shapes`` text (``input:1x3x224x224``): what records of
        its tasks were tuned at."""
        return ",".join(f"{name}:{'x'.join(str(d) for d in shape) or 'scalar'}" for name, shape, _ in self.inputs)

    @property
    def reference_label(self) -> str:
        if self.onnx_model is not None:
            return "ONNX Runtime"
        if self.kernel is not None and self.kernel.reference is not None:
            return "numpy"
        return "TVM untuned build"

    def for_target(self, target) -> Workload:
        """This workload with its task pipeline run for ``target`` (an :class:`explorer.target.Target`):
        a model built for another CPU than this machine's gets that CPU's tasks, one built for a device
        tasks no CPU's rewrite touched (:func:`explorer.workload.fusion.pipeline_target`); itself where
        nothing changes."""
        other = own_pipeline_target(target)
        if self.kind == "kernel" or getattr(other, "key", None) == getattr(self.build_target, "key", None):
            return self
        return replace(self, build_target=other, _fused=None)

    def fused_module(self) -> tvm.IRModule:
        """The module whose PrimFuncs are the tasks (a model after the tuning pipeline, run for its
        :attr:`build_target`)."""
        if self._fused is None:
            self._fused = self.mod if self.kind == "kernel" else fused_module(self.mod, self.name, self.build_target)
        return self._fused

    def tasks(self) -> list[Task]:
        """What a search tunes and an export schedules, most work first (a kernel: itself)."""
        if self.kernel is not None:
            return [kernel_task(self.kernel)]
        tasks = module_tasks(self.fused_module(), self.name)
        if not tasks:
            raise WorkloadError(f"{self.name} has no kernels to tune after the fusion pipeline")
        return tasks

    def sample_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Reproducible inputs: the zoo's own sample inputs, else normal floats / small integers."""
        if self.kernel is not None:
            return {b.name: a for b, a in zip(self.kernel.inputs, self.kernel.random_inputs(seed))}
        if self.origin == "zoo":
            from explorer.models import sample_inputs

            zoo = sample_inputs(self.name, seed=seed)
            if all(zoo.get(name) is not None and zoo[name].shape == tuple(shape) for name, shape, _ in self.inputs):
                return zoo  # the zoo's own inputs, unless --shapes changed them
        rng = np.random.default_rng(seed)
        limits = {}
        if self.onnx_model is not None:  # token ids index an embedding table: stay inside it
            from explorer.models.index_inputs import index_limits

            limits = index_limits(self.onnx_model)
        out = {}
        for name, shape, dtype in self.inputs:
            if "float" in dtype:
                out[name] = rng.standard_normal(shape).astype(dtype)
            else:
                out[name] = rng.integers(0, min(8, limits.get(name, 8)), shape).astype(dtype)
        return out

    def reference(self, inputs: dict[str, np.ndarray], *, threads: int | None = None) -> list[np.ndarray]:
        """Outputs of the reference on ``inputs`` (see the module docstring)."""
        from explorer.workload.reference import ort_session, untuned_outputs

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
            return kernel_task(self.kernel).key
        return str(tvm_ffi.structural_hash(self.mod) % (1 << 64))

    def to_dict(self) -> dict:
        def io(specs):
            return [{"name": n, "shape": list(s), "dtype": d} for n, s, d in specs]

        return {"spec": self.spec, "kind": self.kind, "name": self.name, "origin": self.origin, "shapes": self.shapes,
                "inputs": io(self.inputs), "outputs": io(self.outputs), "reference": self.reference_label}


def kernel_module(kernel) -> tvm.IRModule:
    """A Relax ``main(inputs) -> outputs`` that calls the kernel's PrimFunc once."""
    from tvm import relax

    buffers = list(kernel.info.buffers)
    n_in = len(kernel.inputs)
    if any(b.is_output for b in buffers[:n_in]):
        raise WorkloadError(f"{kernel.name}: outputs must come after the inputs to be called from Relax")
    bb = relax.BlockBuilder()
    params = [relax.Var(b.name, relax.TensorType(b.shape, b.dtype)) for b in kernel.inputs]
    out_ty = [relax.TensorType(b.shape, b.dtype) for b in kernel.outputs]
    safe = relax_name(kernel.name)
    func = kernel.func.without_attr("global_symbol") if "global_symbol" in (kernel.func.attrs or {}) else kernel.func
    with bb.function("main", params):
        gv = bb.add_func(func, safe)
        out = bb.emit(relax.call_tir(gv, relax.Tuple(params), out_ty=out_ty if len(out_ty) > 1 else out_ty[0]))
        bb.emit_func_output(out)
    return bb.get()


def load_workload(spec: str, shapes: str | None = None) -> Workload:
    """Load a model or kernel spec (see the module docstring); errors are :class:`ExplorerError`s
    with a message naming what to change."""
    spec = (spec or "").strip()
    if not spec:
        raise WorkloadError("no workload given: name a model (small_cnn, resnet18, model.onnx) or a kernel "
                            "(matmul:M=256,N=256,K=256)")
    if is_kernel_spec(spec):
        from explorer.workload.model_kernels import load_kernel

        kernel = load_kernel(spec, shapes=shapes)
        return Workload(
            spec=spec, kind="kernel", name=kernel.name, mod=kernel_module(kernel), kernel=kernel, origin="kernel",
            shapes=shapes, inputs=tuple((b.name, b.shape, b.dtype) for b in kernel.inputs),
            outputs=tuple((b.name, b.shape, b.dtype) for b in kernel.outputs))
    from explorer.models import load_model

    loaded = load_model(spec, shapes)
    return Workload(spec=spec, kind="model", name=loaded.name, mod=loaded.mod, inputs=loaded.info.inputs,
                    outputs=loaded.info.outputs, shapes=shapes, onnx_model=loaded.onnx_model,
                    origin=loaded.info.origin, notes=loaded.info.notes)


__all__ = ["IOSpec", "Workload", "WorkloadError", "fused_module", "kernel_module", "load_workload"]
