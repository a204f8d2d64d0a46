"""What kind of workload a user typed: a kernel (``matmul:M=64``, ``matmul``,
``resnet18/fused_transpose_conv2d_add_relu``) or a model (``resnet18``, ``example:densenet121``,
``path/to/model.onnx``). The one place that decides it."""

from __future__ import annotations

from pathlib import Path


def is_kernel_spec(spec: str) -> bool:
    """Whether ``spec`` names a kernel rather than a model (a file that exists is a model)."""
    from explorer.kernels import BUILTINS, kernel_model

    text = spec.strip()
    if text.lower().endswith(".onnx") or Path(text).expanduser().is_file():
        return False
    name, sep, params = text.partition(":")
    if name in BUILTINS:
        return True
    if sep and "=" in params:  # a kernel with parameters, misspelled: load_kernel names the built-ins
        return name != "example"
    return kernel_model(text) is not None and not Path(text).expanduser().exists()


__all__ = ["is_kernel_spec"]
