"""Kernels to schedule: built-in operators (``matmul:M=1024``) and the fused PrimFuncs of a model.

A kernel spec is ``NAME`` or ``NAME:P=V,P=V`` for a built-in (``conv2d_nchw:K=128,stride=2``) and
``MODEL/FUNC`` for a fused kernel of a model (``resnet18/fused_conv2d_add_relu``).
"""

from __future__ import annotations

from tvm import te

from explorer.errors import ExplorerError
from explorer.kernels.builtin import BUILTINS, BuiltinKernel
from explorer.kernels.kernel import BufferSpec, Kernel, KernelInfo, make_kernel


class KernelError(ExplorerError):
    """A kernel spec could not be understood or built."""


def parse_spec(spec: str) -> tuple[str, dict]:
    """``matmul:M=256,N=128`` -> ``("matmul", {"M": 256, "N": 128})``."""
    name, _, rest = spec.strip().partition(":")
    params: dict = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise KernelError(f"cannot read {part!r} in {spec!r}: write NAME=VALUE, e.g. M=512")
        key = key.strip()
        if key == "dtype":
            params[key] = value.strip()
            continue
        try:
            params[key] = int(value)
        except ValueError:
            raise KernelError(f"{key} must be a whole number, got {value.strip()!r}") from None
        if params[key] <= 0 and key != "pad":
            raise KernelError(f"{key} must be positive, got {params[key]}")
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


def load_kernel(spec: str, model_kernels: dict[str, Kernel] | None = None) -> Kernel:
    """The kernel a spec names (see the module docstring)."""
    if "/" in spec and ":" not in spec:
        model, _, func = spec.partition("/")
        kernels = model_kernels if model_kernels is not None else _model_kernels(model)
        if spec not in kernels:
            raise KernelError(f"model {model} has no fused kernel {func!r}; it has: "
                              f"{', '.join(k.split('/', 1)[1] for k in list(kernels)[:20])}")
        return kernels[spec]
    name, params = parse_spec(spec)
    return builtin_kernel(name, **params)


def _model_kernels(model: str) -> dict[str, Kernel]:
    from explorer.kernels.from_model import model_kernels
    from explorer.models import load_model

    return {k.name: k for k in model_kernels(load_model(model))}


__all__ = ["BUILTINS", "BufferSpec", "Kernel", "KernelError", "KernelInfo", "builtin_kernel", "load_kernel",
           "make_kernel", "parse_spec"]
