"""Parse the input shapes a user gives for a model with symbolic or unknown dimensions.

Accepted forms, comma- or semicolon-separated, freely mixed:
  ``input:1x3x224x224``   a whole input shape by input name (``x`` or ``*`` between dims);
  ``batch=1``             a value for a named symbolic dimension (ONNX ``dim_param``);
and the same as a dict: ``{"input": [1, 3, 224, 224], "batch": 1}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from explorer.errors import ShapeSpecError

_DIM_SPLIT = re.compile(r"[x*]")


@dataclass(frozen=True)
class ShapeSpec:
    """Whole-input shapes and named-dimension values a user asked for."""

    inputs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    dims: dict[str, int] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not self.inputs and not self.dims


def _dim(text: str, where: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ShapeSpecError(f"{where}: {text.strip()!r} is not a whole number") from None
    if value <= 0:
        raise ShapeSpecError(f"{where}: dimensions must be positive, got {value}")
    return value


def parse_shape_spec(spec: str | Mapping | ShapeSpec | None) -> ShapeSpec:
    """Parse ``spec`` (see the module docstring); raise :class:`ShapeSpecError` naming the bad part."""
    if spec is None:
        return ShapeSpec()
    if isinstance(spec, ShapeSpec):
        return spec
    inputs: dict[str, tuple[int, ...]] = {}
    dims: dict[str, int] = {}
    if isinstance(spec, Mapping):
        for key, value in spec.items():
            if isinstance(value, int):
                dims[str(key)] = _dim(str(value), f"dimension {key!r}")
            elif isinstance(value, (list, tuple)) and value:
                inputs[str(key)] = tuple(_dim(str(v), f"input {key!r}") for v in value)
            else:
                raise ShapeSpecError(f"shape for {key!r} must be an integer or a list of integers, got {value!r}")
        return ShapeSpec(inputs, dims)
    for part in re.split(r"[;,]\s*(?=[^\d])", spec.strip()):
        part = part.strip()
        if not part:
            continue
        if "=" in part:
            name, _, value = part.partition("=")
            dims[name.strip()] = _dim(value, f"dimension {name.strip()!r}")
        elif ":" in part:
            name, _, shape = part.rpartition(":")
            if not shape.strip():
                raise ShapeSpecError(f"{part!r}: no dimensions after ':' (write e.g. {name}:1x3x224x224)")
            inputs[name.strip()] = tuple(_dim(d, f"input {name.strip()!r}") for d in _DIM_SPLIT.split(shape))
        else:
            raise ShapeSpecError(
                f"cannot read {part!r}: write NAME:1x3x224x224 for an input or DIM=1 for a named dimension")
    return ShapeSpec(inputs, dims)
