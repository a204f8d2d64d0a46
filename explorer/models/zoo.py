"""The built-in model zoo: named ONNX models with seeded weights, built locally with no download.

Each entry is a :class:`ZooModel` (a frozen description the UI and CLI can list and serialise)
paired with a builder that writes the graph with ``onnx.helper``. :func:`build_onnx` is
deterministic (same name and seed, same bytes), so a model can be rebuilt anywhere instead of
stored, and :func:`sample_inputs` gives matching random inputs for running it.

The builders live in :mod:`explorer.models.zoo_cnn` and :mod:`explorer.models.zoo_transformer`;
this module only holds the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from explorer.errors import ModelLoadError
from explorer.models import zoo_cnn, zoo_transformer
from explorer.models.zoo_cnn import OnnxGraphBuilder

__all__ = [
    "DEFAULT_MODEL",
    "ZOO",
    "UnknownZooModelError",
    "ZooModel",
    "build_onnx",
    "get_zoo_model",
    "sample_inputs",
    "zoo_names",
]

InputSpec = tuple[str, tuple[int, ...], str]
_Body = Callable[[OnnxGraphBuilder, str], tuple[str, tuple[int, ...]]]

# Inputs are drawn from a stream separate from the weights' so they are not the same numbers.
_INPUT_STREAM = 1


class UnknownZooModelError(ModelLoadError, ValueError):
    """A zoo model name that is not in :data:`ZOO`; a ``ValueError`` for plain callers too."""


@dataclass(frozen=True)
class ZooModel:
    """What the zoo says about one model: names for people, and the inputs it expects."""

    name: str
    title: str
    description: str
    inputs: tuple[InputSpec, ...]

    def to_dict(self) -> dict:
        """JSON-serialisable summary, with each input as ``{"name", "shape", "dtype"}``."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputs": [
                {"name": name, "shape": list(shape), "dtype": dtype}
                for name, shape, dtype in self.inputs
            ],
        }


def _image_input(size: int) -> tuple[InputSpec, ...]:
    """One NCHW float32 image input called ``input``."""
    return (("input", (1, 3, size, size), "float32"),)


_BERT_SHAPE = (1, zoo_transformer.SEQ_LEN, zoo_transformer.HIDDEN)

ZOO: dict[str, ZooModel] = {
    model.name: model
    for model in (
        ZooModel(
            "small_cnn",
            "Small CNN",
            "Three-conv CNN with batch norm and a 10-class head, 1x3x32x32, seeded weights "
            "(about 24k parameters, quick to compile)",
            _image_input(32),
        ),
        ZooModel(
            "resnet18",
            "ResNet-18",
            "ResNet-18 (torchvision topology), 1x3x224x224, seeded weights",
            _image_input(224),
        ),
        ZooModel(
            "mobilenet_v2",
            "MobileNetV2",
            "MobileNetV2 (torchvision topology, width 1.0, depthwise convs, ReLU6), "
            "1x3x224x224, seeded weights",
            _image_input(224),
        ),
        ZooModel(
            "bert_encoder",
            "BERT encoder layer",
            "One BERT-base encoder layer (12 heads, hidden 768, FFN 3072), 1x128x768 hidden "
            "states, seeded weights",
            (("hidden_states", _BERT_SHAPE, "float32"),),
        ),
    )
}

DEFAULT_MODEL = "resnet18"

_BODIES: dict[str, _Body] = {
    "small_cnn": zoo_cnn.small_cnn,
    "resnet18": zoo_cnn.resnet18,
    "mobilenet_v2": zoo_cnn.mobilenet_v2,
    "bert_encoder": zoo_transformer.bert_encoder,
}


def zoo_names() -> list[str]:
    """Names of the zoo models, in display order."""
    return list(ZOO)


def get_zoo_model(name: str) -> ZooModel:
    """Look a model up by name; an unknown name raises an error listing the valid ones."""
    try:
        return ZOO[name]
    except KeyError:
        choices = ", ".join(ZOO)
        raise UnknownZooModelError(
            f"unknown zoo model {name!r}; choose one of: {choices}"
        ) from None


def _value_info(spec: InputSpec) -> onnx.ValueInfoProto:
    """Graph input declaration for one ``(name, shape, dtype)`` spec."""
    name, shape, dtype = spec
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_value_info(name, elem_type, list(shape))


def build_onnx(name: str, *, seed: int = 0) -> onnx.ModelProto:
    """Build zoo model ``name`` as an opset-17 ONNX model with weights drawn from ``seed``.

    Deterministic: the same name and seed give byte-identical ``SerializeToString()`` output.
    """
    model = get_zoo_model(name)
    builder = OnnxGraphBuilder(seed)
    input_name = model.inputs[0][0]  # every zoo model has a single input
    output = _BODIES[name](builder, input_name)
    return builder.finish(name, [_value_info(spec) for spec in model.inputs], output)


def sample_inputs(name: str, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs matching the model's input specs, reproducible from ``seed``."""
    model = get_zoo_model(name)
    rng = np.random.default_rng([seed, _INPUT_STREAM])
    return {
        input_name: rng.standard_normal(shape).astype(dtype)
        for input_name, shape, dtype in model.inputs
    }
