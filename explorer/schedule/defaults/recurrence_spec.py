"""A recurrent layer as plain data: :class:`RecurrenceSpec` says which cell (LSTM, GRU, RNN and their
ONNX options) over which shapes; it travels as JSON in a PrimFunc's ``schedx.recurrence``
attribute (:func:`spec_of` reads it back).

Arguments of a recurrence kernel, in order (N = gates x H, D directions; ONNX's own layouts for
layout 0): ``xw [T, B, D*N]`` (the input projection with the biases that belong there),
``rt [D, H, N]`` (``R`` transposed), ``h0 [D, B, H]``, then for an LSTM ``c0 [D, B, H]`` and, with
peepholes, ``p [D, 3H]``; for a GRU with ``linear_before_reset`` ``rbh [D, H]``. Outputs
``y [T, D, B, H]``, ``h_last [D, B, H]`` and, for an LSTM, ``c_last [D, B, H]``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # TVM is imported where a kernel is made: the spec is plain data
    import tvm

ATTR = "schedx.recurrence"
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
ACTIVATIONS = ("Sigmoid", "Tanh", "Relu", "Softsign", "Softplus")


@dataclass(frozen=True)
class RecurrenceSpec:
    """One recurrent layer: ``op`` LSTM/GRU/RNN, its sizes, directions and ONNX options."""

    op: str
    seq: int
    batch: int
    hidden: int
    directions: tuple[str, ...] = ("forward",)  # "forward" / "reverse", per direction
    activations: tuple[tuple[str, ...], ...] = ()  # ONNX's f, g(, h) per direction; empty: defaults
    clip: float | None = None
    linear_before_reset: bool = False  # GRU
    peepholes: bool = False  # LSTM
    dtype: str = "float32"

    @property
    def gates(self) -> int:
        return GATES[self.op]

    @property
    def num_dir(self) -> int:
        return len(self.directions)

    def acts(self, d: int) -> tuple[str, ...]:
        return self.activations[d] if self.activations else DEFAULT_ACTIVATIONS[self.op]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RecurrenceSpec:
        d = json.loads(text)
        d["directions"] = tuple(d.get("directions", ("forward",)))
        d["activations"] = tuple(tuple(a) for a in d.get("activations", ()))
        return cls(**d)

    def input_names(self) -> list[str]:
        names = ["xw", "rt", "h0"]
        if self.op == "LSTM":
            names += ["c0"] + (["p"] if self.peepholes else [])
        if self.op == "GRU" and self.linear_before_reset:
            names.append("rbh")
        return names

    def input_shapes(self) -> list[tuple[int, ...]]:
        T, B, H, D, N = self.seq, self.batch, self.hidden, self.num_dir, self.gates * self.hidden
        shape = {"xw": (T, B, D * N), "rt": (D, H, N), "h0": (D, B, H), "c0": (D, B, H), "p": (D, 3 * H),
                 "rbh": (D, H)}
        return [shape[n] for n in self.input_names()]

    def output_names(self) -> list[str]:
        return ["y", "h_last"] + (["c_last"] if self.op == "LSTM" else [])

    def output_shapes(self) -> list[tuple[int, ...]]:
        T, B, H, D = self.seq, self.batch, self.hidden, self.num_dir
        return [(T, D, B, H), (D, B, H)] + ([(D, B, H)] if self.op == "LSTM" else [])

    def macs(self) -> int:
        """Multiply-adds of the recurrence (the matrix-vector products), all steps and directions."""
        return self.num_dir * self.seq * self.batch * self.hidden * self.gates * self.hidden


def spec_of(func: tvm.tirx.PrimFunc) -> RecurrenceSpec | None:
    """The spec a recurrence kernel carries, else None."""
    attrs = func.attrs
    if attrs is None or ATTR not in attrs:
        return None
    return RecurrenceSpec.from_json(str(attrs[ATTR]))


__all__ = ["ACTIVATIONS", "ATTR", "DEFAULT_ACTIVATIONS", "GATES", "RecurrenceSpec", "spec_of"]
