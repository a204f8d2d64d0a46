"""A kernel: one TensorIR PrimFunc to schedule, with what it takes to check and rank it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import tvm
from tvm.s_tir.analysis import estimate_tir_flops

from explorer.ir.relax_walk import dtype_bytes
from explorer.ir.tir_walk import blocks


MODEL_SOURCE = "model:"  # a model's fused kernel: source "model:NAME"


def kernel_model(spec: str) -> str | None:
    """The model a fused-kernel spec names (``resnet18/fused_transpose_conv2d_add_relu`` -> ``resnet18``;
    ``path/to/m.onnx/fused_add`` -> ``path/to/m.onnx``); None for any other spec (a built-in
    kernel has a ``:`` or no ``/``)."""
    if "/" not in spec or ":" in spec:
        return None
    return spec.rpartition("/")[0]


def fused_kernel_spec(model: str, task: str) -> str | None:
    """The spec of the fused kernel named ``task`` (``resnet18/fused_conv2d_add``: a task's name, its model's
    name then the kernel's function) of the model the user named ``model`` (a zoo name, an .onnx path):
    ``model/function``, or None where no spec can name it (a ``model`` with a ``:``, such as
    ``example:densenet121``, reads as a built-in kernel's spec). A task's own name names the model by its
    name, which is no path: ``m/fused_add`` for ``path/to/m.onnx`` loads nothing."""
    kernel = f"{model}/{task.rpartition('/')[2]}"
    return kernel if kernel_model(kernel) == model else None


@dataclass(frozen=True)
class BufferSpec:
    """One parameter buffer of a kernel."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool

    @property
    def nbytes(self) -> int:
        return int(math.prod(self.shape) * dtype_bytes(self.dtype))


@dataclass(frozen=True)
class KernelInfo:
    """Plain-data description of a kernel (what lists and records show)."""

    name: str
    title: str
    source: str
    spec: str
    params: dict
    buffers: tuple[BufferSpec, ...]
    flops: int
    min_bytes: int

    @property
    def workload_kind(self) -> str:
        """``model_task`` for a model's fused kernel (``source`` ``model:NAME``), else ``kernel``:
        the kind of workload the store files its measurements under."""
        return "model_task" if self.source.startswith(MODEL_SOURCE) else "kernel"

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of compulsory traffic (each buffer read or written once)."""
        return self.flops / self.min_bytes if self.min_bytes else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["buffers"] = [asdict(b) for b in self.buffers]
        d["arithmetic_intensity"] = self.arithmetic_intensity
        return d


@dataclass
class Kernel:
    """A PrimFunc to schedule plus its description and, for built-ins, a numpy reference.

    Without a numpy reference, verification compares against the unscheduled PrimFunc."""

    info: KernelInfo
    func: tvm.tirx.PrimFunc
    reference: Callable[..., list] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def inputs(self) -> list[BufferSpec]:
        return [b for b in self.info.buffers if not b.is_output]

    @property
    def outputs(self) -> list[BufferSpec]:
        return [b for b in self.info.buffers if b.is_output]

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Deterministic inputs: normal floats, small integers (no int32 overflow in sums)."""
        rng = np.random.default_rng(seed)
        return [random_array(b.shape, b.dtype, rng) for b in self.inputs]


def random_array(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Test data for one buffer: normal floats, small integers (no int32 overflow in sums)."""
    if dtype.startswith(("float", "bfloat")):
        return rng.standard_normal(shape).astype(dtype)
    if dtype.startswith("uint") or dtype == "bool":
        return rng.integers(0, 2 if dtype == "bool" else 16, shape).astype(dtype)
    return rng.integers(-8, 8, shape).astype(dtype)


def written_buffers(func: tvm.tirx.PrimFunc) -> set[str]:
    """Names of buffers some block of ``func`` writes."""
    names: set[str] = set()
    for block in blocks(func):
        names.update(w.source.name for w in block.writes)
    return names


def buffer_specs(func: tvm.tirx.PrimFunc) -> tuple[BufferSpec, ...]:
    """Parameter buffers in order; outputs are those some block writes."""
    written = written_buffers(func)
    specs = []
    for buf in func.params:  # in TVM 0.27 a PrimFunc's params are its buffers
        shape = tuple(int(s) for s in buf.shape)
        specs.append(BufferSpec(buf.name, shape, str(buf.dtype), buf.name in written))
    if not any(s.is_output for s in specs) and specs:  # opaque bodies: the last parameter is the output
        last = specs[-1]
        specs[-1] = BufferSpec(last.name, last.shape, last.dtype, True)
    return tuple(specs)


def count_flops(func: tvm.tirx.PrimFunc) -> int:
    """FLOPs of one run, counted from the TIR by TVM (never typed in)."""
    return int(estimate_tir_flops(tvm.IRModule({"main": func})))


def make_kernel(func: tvm.tirx.PrimFunc, *, name: str, title: str, source: str, spec: str, params: dict,
                reference: Callable[..., list] | None = None) -> Kernel:
    func = func.with_attr("global_symbol", "main")
    buffers = buffer_specs(func)
    info = KernelInfo(name=name, title=title, source=source, spec=spec, params=dict(params), buffers=buffers,
                      flops=count_flops(func), min_bytes=sum(b.nbytes for b in buffers))
    return Kernel(info=info, func=func, reference=reference)
