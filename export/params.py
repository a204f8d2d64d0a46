"""Parameters in a separate file: every tensor constant of ``main`` becomes a parameter.

The module is first fused exactly as for tuning (constants embedded, so the kernels and their
workload keys are the ones the search tuned); then each non-scalar constant of ``main`` is
replaced by a new trailing parameter of ``main`` and its value is kept aside. The library then
takes ``(inputs..., params...)``: new weights of the same shapes need a new parameter file, not
a new library. A parameter whose bytes equal an ONNX initializer is named after it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of the exported ``main``, after the inputs: name, shape, dtype, and where its
    value came from (``onnx:<initializer>``; ``packed:<initializer>``: that weight in the layout its
    kernel's schedule reads; ``folded``: computed from weights at compile time)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    source: str

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def value_digest(array: np.ndarray) -> str:
    """A constant's identity: its dtype and bytes (shape left out)."""
    return hashlib.sha1(np.ascontiguousarray(array).tobytes() + str(array.dtype).encode()).hexdigest()


def initializer_names(onnx_model) -> dict[str, str]:
    """ONNX initializers by the digest of their values (dtype and bytes, shape left out)."""
    if onnx_model is None:
        return {}
    from onnx import numpy_helper

    out: dict[str, str] = {}
    for init in onnx_model.graph.initializer:
        try:
            out.setdefault(value_digest(numpy_helper.to_array(init)), init.name)
        except Exception:  # noqa: BLE001 - an initializer numpy cannot read: unnamed
            continue
    return out


def _safe(name: str) -> str:
    name = re.sub(r"\W", "_", name).strip("_") or "param"
    return name if not name[0].isdigit() else f"p_{name}"


@mutator
class _Lift(PyExprMutator):
    """Replaces tensor constants by fresh variables, one per distinct value (dtype, shape and
    bytes): a weight two kernels use is one parameter."""

    def __init__(self, mod: tvm.IRModule, names: dict[str, str], packed_from: dict[str, str]) -> None:
        super().__init__(mod)
        self.names = names
        self.packed_from = packed_from
        self.found: list[tuple[relax.Var, np.ndarray, str]] = []
        self.used: set[str] = set()
        self.seen: dict[tuple, relax.Var] = {}

    def visit_generic_const_(self, op):  # noqa: N802 - TVM's visitor name
        value = op.value.numpy()
        if value.ndim == 0:
            return op
        digest = value_digest(value)
        if (digest, value.shape) in self.seen:
            return self.seen[(digest, value.shape)]
        onnx_name = self.names.get(digest)
        packed_of = self.names.get(self.packed_from.get(digest, ""))
        if packed_of:  # a weight packed for its kernel at build time (export.weight_layouts)
            base, source = f"{_safe(packed_of)}_packed", f"packed:{packed_of}"
        else:
            base = _safe(onnx_name) if onnx_name else f"const_{len(self.found)}"
            source = f"onnx:{onnx_name}" if onnx_name else "folded"
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        var = relax.Var(name, op.ty)
        self.found.append((var, value, source))
        self.seen[(digest, value.shape)] = var
        return var


def lift_constants(mod: tvm.IRModule, onnx_model=None, packed_from: dict[str, str] | None = None,
                   ) -> tuple[tvm.IRModule, list[ParamSpec], list[np.ndarray]]:
    """``mod`` with ``main``'s tensor constants turned into trailing parameters, their specs and
    values (``packed_from``: digests of weights packed at build time -> those of their originals)."""
    main = mod["main"]
    lifter = _Lift(mod, initializer_names(onnx_model), packed_from or {})
    body = lifter.visit_expr(main.body)
    if not lifter.found:
        return mod, [], []
    params = list(main.params) + [v for v, _, _ in lifter.found]
    new_main = relax.Function(params, body, main.ret_ty, main.is_pure, main.attrs, main.span)
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    out["main"] = new_main
    specs = [ParamSpec(v.name, tuple(int(d) for d in value.shape), str(value.dtype), source)
             for v, value, source in lifter.found]
    return out, specs, [value for _, value, _ in lifter.found]


__all__ = ["ParamSpec", "initializer_names", "lift_constants", "value_digest"]
