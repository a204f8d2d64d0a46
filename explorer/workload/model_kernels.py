"""The fused kernels of a model: its tasks after the tuning pipeline (FuseOps + FuseTIR, weights marked), equal
ones merged and weighted by how often the model calls them (see :mod:`explorer.workload.task`)."""

from __future__ import annotations

from explorer.errors import ExplorerError
from explorer.kernels import MODEL_SOURCE, Kernel, kernel_model, load_kernel as load_builtin, make_kernel
from explorer.models.source import LoadedModel
from explorer.workload.fusion import fused_module
from explorer.workload.task import module_tasks


def model_kernels(loaded: LoadedModel) -> list[Kernel]:
    """Kernels of ``loaded`` after the tuning pipeline, most FLOPs-weighted first.

    ``params["calls"]`` says how often the model runs each one; ``params["funcs"]`` which
    PrimFuncs of the fused module it stands for."""
    mod = fused_module(loaded.mod, loaded.name)
    kernels = []
    for task in module_tasks(mod, loaded.name):
        func_name = task.name.split("/", 1)[1]
        kernels.append(make_kernel(task.mod["main"], name=task.name, title=func_name, source=f"{MODEL_SOURCE}{loaded.name}",
                                   spec=task.name, params={"calls": task.calls, "funcs": list(task.funcs)}))
    return kernels


def load_kernel(spec: str, *, shapes: str | None = None, model_kernels_by_name: dict[str, Kernel] | None = None
                ) -> Kernel:
    """The kernel a spec names: a built-in (``matmul:M=512``) or a model's fused kernel
    (``resnet18/fused_transpose_conv2d_add_relu``, the model loaded with ``shapes``)."""
    model = kernel_model(spec)
    if model is not None:
        if model_kernels_by_name is None:
            from explorer.models import load_model

            model_kernels_by_name = {k.name: k for k in model_kernels(load_model(model, shapes))}
        func = spec.rpartition("/")[2]
        if spec not in model_kernels_by_name:
            # a model given by path (``models/net.onnx/fused_conv``) names its kernels by the model's name
            by_func = {name.rpartition("/")[2]: kernel for name, kernel in model_kernels_by_name.items()}
            if func in by_func:
                return by_func[func]
            raise ExplorerError(f"model {model} has no fused kernel {func!r}; it has: "
                                f"{', '.join(k.rpartition('/')[2] for k in list(model_kernels_by_name)[:20])}")
        return model_kernels_by_name[spec]
    return load_builtin(spec)


__all__ = ["load_kernel", "model_kernels"]
