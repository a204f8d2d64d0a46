"""Kernels to schedule: built-in operators (``matmul:M=1024``), and what every kernel is (a
PrimFunc with its buffers, FLOPs and reference).

A built-in's spec is ``NAME`` or ``NAME:P=V,P=V`` (``conv2d_nchw:K=128,stride=2``); a model's fused
kernel (``resnet18/fused_transpose_conv2d_add_relu``) comes from :mod:`explorer.workload`.
"""

from __future__ import annotations

import re

from tvm import te

from explorer.errors import ExplorerError
from explorer.kernels.builtin import BUILTINS, BuiltinKernel
from explorer.kernels.kernel import MODEL_SOURCE, BufferSpec, Kernel, KernelInfo, fused_kernel_spec, kernel_model, make_kernel


class KernelError(ExplorerError):
    """A kernel spec could not be understood or built."""


# Parameters that may be 0 (all others are sizes and must be at least 1).
MAY_BE_ZERO = frozenset({"pad"})
# The largest value a parameter may take: TVM indexes buffers with 32-bit integers.
MAX_PARAM = 2**31 - 1
_NUMBER = re.compile(r"-?[0-9]+")


def parse_spec(spec: str) -> tuple[str, dict]:
    """``matmul:M=256,N=128`` -> ``("matmul", {"M": 256, "N": 128})``.

    Values are whole numbers written with ASCII digits (Python's ``int()`` also reads full-width
    and other Unicode digits, which a spec must not silently accept), each parameter once, sizes
    at least 1 (``pad`` at least 0) and below 2**31."""
    name, _, rest = spec.strip().partition(":")
    params: dict = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise KernelError(f"cannot read {part!r} in {spec!r}: write NAME=VALUE, e.g. M=512")
        key, value = key.strip(), value.strip()
        if key in params:
            raise KernelError(f"{key} is given twice in {spec!r}; give each parameter once")
        if key == "dtype":
            params[key] = value
            continue
        if not _NUMBER.fullmatch(value):
            raise KernelError(f"{key} must be a whole number written with the digits 0-9, got {value[:40]!r}")
        if len(value.lstrip("+-")) > 12:
            raise KernelError(f"{key}={value[:24]}... is far too large (at most {MAX_PARAM})")
        number = int(value)
        low = 0 if key in MAY_BE_ZERO else 1
        if number < low:
            raise KernelError(f"{key} must be {'at least 0' if low == 0 else 'positive'}, got {number}")
        if number > MAX_PARAM:
            raise KernelError(f"{key}={number} is too large (at most {MAX_PARAM})")
        params[key] = number
    return name.strip(), params


def builtin_kernel(name: str, **overrides) -> Kernel:
    """A built-in operator with its default shapes, any of which ``overrides`` replaces."""
    entry: BuiltinKernel | None = BUILTINS.get(name)
    if entry is None:
        raise KernelError(f"unknown kernel {name!r}; built-ins are: {', '.join(BUILTINS)}")
    unknown = set(overrides) - set(entry.defaults) - {"dtype"}
    if unknown:
        raise KernelError(f"{name} has no parameter {', '.join(sorted(unknown))}; "
                          f"its parameters are {', '.join(entry.defaults)} and dtype")
    params = {**entry.defaults, **{k: v for k, v in overrides.items() if k != "dtype"}}
    dtype = overrides.get("dtype", entry.dtype)
    if name == "matmul_int8" and (params["N"] % 16 or params["K"] % 4):
        raise KernelError("matmul_int8 needs N divisible by 16 and K by 4 (the dot_16x4 layout)")
    try:
        tensors = entry.build(**params, dtype=dtype)
    except Exception as err:
        raise KernelError(f"could not build {name} with {params}: {err}") from err
    func = te.create_prim_func(tensors)
    shape_text = "_".join(f"{k}{v}" for k, v in params.items())
    spec = f"{name}:" + ",".join(f"{k}={v}" for k, v in params.items()) + (f",dtype={dtype}" if "dtype" in overrides else "")

    def reference(*inputs):
        return entry.reference(*inputs, **params)

    return make_kernel(func, name=f"{name}_{shape_text}_{dtype}", title=entry.title, source=f"builtin:{name}",
                       spec=spec, params={**params, "dtype": dtype}, reference=reference)


def load_kernel(spec: str) -> Kernel:
    """The built-in kernel a spec names (``matmul:M=512``). A model's fused kernel
    (``resnet18/fused_...``) is loaded by :func:`explorer.workload.load_kernel`."""
    if kernel_model(spec) is not None:
        raise KernelError(f"{spec!r} names a model's fused kernel: load it with explorer.workload.load_kernel")
    name, params = parse_spec(spec)
    return builtin_kernel(name, **params)


__all__ = ["BUILTINS", "MODEL_SOURCE", "BufferSpec", "Kernel", "KernelError", "KernelInfo", "builtin_kernel",
           "fused_kernel_spec", "kernel_model", "load_kernel",
           "make_kernel", "parse_spec"]
