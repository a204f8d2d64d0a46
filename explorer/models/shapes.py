"""Parse the input shapes a user gives for a model with symbolic or unknown dimensions.

Accepted forms, comma- or semicolon-separated, freely mixed:
  ``input:1x3x224x224``   a whole input shape by input name (``x`` or ``*`` between dims);
  ``batch=1``             a value for a named symbolic dimension (ONNX ``dim_param``), or, where
                          the name is a scalar input's (silero-vad's ``sr=16000``), that input's
                          value: it becomes a constant and the ``If`` nodes it decides fold
                          (:func:`explorer.models.control_flow.pin_scalar_inputs`; positive
                          whole numbers only, as for dimensions);
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


# TVM indexes a tensor with 32-bit integers: a dimension, and a whole input, stay below 2**31.
MAX_ELEMENTS = 2**31 - 1
_NUMBER = re.compile(r"[+-]?[0-9]+")


def _dim(text: str, where: str) -> int:
    """A dimension written with ASCII digits (``int()`` would also read full-width digits), in
    1..2**31-1."""
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        raise ShapeSpecError(f"{where}: {text[:40]!r} is not a whole number (digits 0-9)")
    if len(text.lstrip("+-")) > 12:
        raise ShapeSpecError(f"{where}: {text[:24]}... is far too large (at most {MAX_ELEMENTS})")
    value = int(text)
    if value <= 0:
        raise ShapeSpecError(f"{where}: dimensions must be positive, got {value}")
    if value > MAX_ELEMENTS:
        raise ShapeSpecError(f"{where}: {value} is too large (at most {MAX_ELEMENTS})")
    return value


def _shape(dims: tuple[int, ...], where: str) -> tuple[int, ...]:
    elements = 1
    for d in dims:
        elements *= d
    if elements > MAX_ELEMENTS:
        raise ShapeSpecError(f"{where}: {'x'.join(map(str, dims))} has {elements:.3g} elements; schedx handles at "
                             f"most {MAX_ELEMENTS} per input (TVM indexes tensors with 32-bit integers)")
    return dims


def _put(table: dict, name: str, value, spec) -> None:
    if not name:
        raise ShapeSpecError(f"a shape needs a name before ':' or '=' in {str(spec)[:80]!r}")
    if name in table:
        raise ShapeSpecError(f"{name!r} is given twice in {str(spec)[:80]!r}; give each input or dimension once")
    table[name] = value


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
            if isinstance(value, int) and not isinstance(value, bool):
                _put(dims, str(key), _dim(str(value), f"dimension {key!r}"), spec)
            elif isinstance(value, (list, tuple)) and value and not any(isinstance(v, bool) for v in value):
                where = f"input {key!r}"
                _put(inputs, str(key), _shape(tuple(_dim(str(v), where) for v in value), where), spec)
            else:
                raise ShapeSpecError(f"shape for {key!r} must be an integer or a list of integers, got {value!r}")
        return ShapeSpec(inputs, dims)
    for part in re.split(r"[;,]\s*(?=[^\d])", spec.strip()):
        part = part.strip()
        if not part:
            continue
        if "=" in part:
            name, _, value = part.partition("=")
            _put(dims, name.strip(), _dim(value, f"dimension {name.strip()!r}"), spec)
        elif ":" in part:
            name, _, shape = part.rpartition(":")
            if not shape.strip():
                raise ShapeSpecError(f"{part!r}: no dimensions after ':' (write e.g. {name}:1x3x224x224)")
            where = f"input {name.strip()!r}"
            _put(inputs, name.strip(), _shape(tuple(_dim(d, where) for d in _DIM_SPLIT.split(shape)), where), spec)
        else:
            raise ShapeSpecError(
                f"cannot read {part!r}: write NAME:1x3x224x224 for an input or DIM=1 for a named dimension")
    return ShapeSpec(inputs, dims)
