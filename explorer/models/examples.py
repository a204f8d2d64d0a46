"""Example models that ship inside the ``onnx`` package (``onnx/backend/test/data/light``).

They are real topologies (ResNet-50, DenseNet-121, Inception, SqueezeNet, VGG-19, ...) whose
weights are filled by ``ConstantOfShape`` so the files stay small: good for looking at graphs
and passes on something bigger than the zoo, without a download.
"""

from __future__ import annotations

from pathlib import Path

from explorer.errors import ModelLoadError


def examples_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def example_names() -> list[str]:
    """Names such as ``resnet50`` for the ``light_resnet50.onnx`` files present."""
    d = examples_dir()
    if not d.is_dir():
        return []
    return sorted(p.stem[len("light_"):] for p in d.glob("light_*.onnx"))


def example_path(name: str) -> Path:
    path = examples_dir() / f"light_{name}.onnx"
    if not path.is_file():
        raise ModelLoadError(f"unknown example {name!r}; the onnx package ships: {', '.join(example_names()) or 'none'}")
    return path
