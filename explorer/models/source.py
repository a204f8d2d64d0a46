"""What every model source yields: a Relax IRModule, its parameters and a description."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import tvm

InputSpec = tuple[str, tuple[int, ...], str]


@dataclass(frozen=True)
class ModelInfo:
    """Plain-data description of a loaded model (what the UI lists and the CLI prints)."""

    name: str
    origin: str  # "zoo", "onnx", "example", "torch"
    inputs: tuple[InputSpec, ...]
    outputs: tuple[InputSpec, ...]
    source: str  # zoo name, file path or module class name
    notes: tuple[str, ...] = ()  # what schedx did to import it (rewrites, folding), for people
    import_log: tuple[str, ...] = ()  # what the importer printed or warned, kept off stdout

    def note_lines(self, *, verbose: bool = False) -> list[str]:
        """The notes, and with ``verbose`` what the importer printed: TVM's messages matter when
        someone investigates an import, not when schedx recovered from them."""
        lines = list(self.notes)
        if verbose and self.import_log:
            lines += [f"importer: {ln}" for ln in self.import_log]
        return lines

    def to_dict(self) -> dict:
        d = asdict(self)
        d["inputs"] = [{"name": n, "shape": list(s), "dtype": t} for n, s, t in self.inputs]
        d["outputs"] = [{"name": n, "shape": list(s), "dtype": t} for n, s, t in self.outputs]
        d["notes"], d["import_log"] = list(self.notes), list(self.import_log)
        return d


@dataclass
class LoadedModel:
    """A model ready for the compiler: ``mod`` has a ``main`` Relax function whose parameters are
    the model inputs (weights are embedded as constants unless ``params`` holds them).

    ``onnx_model`` is kept when the model came from ONNX so that ONNX Runtime can serve as the
    reference and the baseline."""

    info: ModelInfo
    mod: tvm.IRModule
    params: dict[str, np.ndarray] = field(default_factory=dict)
    onnx_model: object | None = None

    @property
    def name(self) -> str:
        return self.info.name
