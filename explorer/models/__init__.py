"""Model sources: the built-in zoo, ONNX files, the onnx package's examples, PyTorch modules.

:func:`load_model` takes one string a user can type:
``resnet18`` or ``zoo:resnet18`` (zoo), ``example:resnet50`` (onnx package), or a path to an
``.onnx`` file (with ``shapes`` for symbolic dimensions). PyTorch modules go through
:func:`import_torch`.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from explorer.errors import ModelLoadError
from explorer.models.examples import example_names, example_path
from explorer.models.onnx_import import import_onnx, read_onnx
from explorer.models.source import LoadedModel, ModelInfo
from explorer.models.torch_import import import_torch
from explorer.models.zoo import (
    DEFAULT_MODEL,
    ZOO,
    build_onnx,
    get_zoo_model,
    sample_inputs,
    zoo_names,
)


def _unknown_spec(spec: str) -> ModelLoadError:
    return ModelLoadError(
        f"cannot tell what model {spec!r} is: give a zoo name ({', '.join(zoo_names())}), "
        f"example:NAME ({', '.join(example_names())}) or a path to an .onnx file")


def load_zoo(name: str, shapes: str | dict | None = None, *, seed: int = 0) -> LoadedModel:
    """A zoo model imported into Relax; ``shapes`` may override its (static) input shapes."""
    entry = get_zoo_model(name)
    loaded = import_onnx(build_onnx(name, seed=seed), shapes, name=name, origin="zoo")
    loaded.info = ModelInfo(name=name, origin="zoo", inputs=loaded.info.inputs, outputs=loaded.info.outputs,
                            source=f"zoo:{name}", notes=(entry.description, *loaded.info.notes),
                            import_log=loaded.info.import_log)
    return loaded


def load_model(spec: str, shapes: str | dict | None = None) -> LoadedModel:
    """Load a model from a spec string (see the module docstring)."""
    spec = spec.strip()
    if spec.startswith("zoo:") or spec in ZOO:
        return load_zoo(spec.removeprefix("zoo:"), shapes)
    if spec.startswith("example:"):
        name = spec.removeprefix("example:")
        loaded = import_onnx(example_path(name), shapes, name=name, origin="example")
        return loaded
    if spec.lower().endswith(".onnx") or Path(spec).is_file():
        return import_onnx(spec, shapes)
    raise _unknown_spec(spec)


def model_onnx(spec: str) -> tuple[onnx.ModelProto, str]:
    """The ONNX model a spec names (zoo, example or file), without importing it into TVM, and a
    short label for it."""
    spec = spec.strip()
    if spec.startswith("zoo:") or spec in ZOO:
        name = spec.removeprefix("zoo:")
        return build_onnx(name), name
    if spec.startswith("example:"):
        name = spec.removeprefix("example:")
        return read_onnx(example_path(name)), name
    if spec.lower().endswith(".onnx") or Path(spec).is_file():
        return read_onnx(spec), Path(spec).stem
    raise _unknown_spec(spec)


def model_choices() -> list[str]:
    """Every spec :func:`load_model` accepts without a file: zoo names, then examples."""
    return list(zoo_names()) + [f"example:{n}" for n in example_names()]


__all__ = [
    "DEFAULT_MODEL", "ZOO", "LoadedModel", "ModelInfo", "build_onnx", "example_names", "get_zoo_model",
    "import_onnx", "import_torch", "load_model", "load_zoo", "model_choices", "model_onnx", "sample_inputs",
    "zoo_names",
]
