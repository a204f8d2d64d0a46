"""Turn what a user types (``matmul:M=1024``, ``resnet18``, ``resnet18/fused_conv2d_add_relu``,
``model.onnx``) into search tasks."""

from __future__ import annotations

from explorer.errors import ExplorerError
from explorer.kernels import BUILTINS, load_kernel
from search.errors import SearchError
from search.tune import Task, kernel_tasks, model_tasks


def is_kernel_spec(spec: str) -> bool:
    name, _, params = spec.partition(":")
    return (name in BUILTINS or "=" in params
            or ("/" in spec and ":" not in spec and not spec.endswith(".onnx")))


def resolve_tasks(spec: str, target: dict, shapes: str | None = None) -> tuple[list[Task], str]:
    """Tasks for a kernel or a whole model, and the source name records get."""
    try:
        if is_kernel_spec(spec):
            kernel = load_kernel(spec)
            return kernel_tasks(kernel), kernel.info.source
        from explorer.models import load_model

        loaded = load_model(spec, shapes)
        return model_tasks(loaded, target), f"model:{loaded.name}"
    except SearchError:
        raise
    except ExplorerError as err:
        raise SearchError(str(err)) from err
