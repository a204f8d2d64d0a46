"""onnxconverter-common's fp16 conversion: float32 models rewritten with float16 weights and
activations (``float16.convert_float_to_float16``), the graph users get when they halve a model.

The float models are :mod:`benchmarks.exporters.ort_quant`'s (a ResNet-like CNN, a MobileNet-like
CNN, a transformer encoder layer; random weights, TorchScript exporter, opset 17), each converted
twice, after onnxscript's optimizer folded its shape arithmetic (see :func:`convert`): with ``keep_io_types=True`` (inputs and outputs stay float32, ``Cast`` nodes at the edges)
and without (the model takes and returns float16). The LSTM is left out: ONNX Runtime has no
float16 LSTM kernel on CPU, so such a file could not be compared.

Run: ``python -m benchmarks.exporters.fp16 OUTDIR`` (prints the entries as JSON).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benchmarks.exporters import Model, build_each, main
from benchmarks.exporters.ort_quant import export_float_models, shapes_of

EXPORTER = "onnxconverter-common"
# its own venv: onnxconverter-common is not in the project's; torch (the CPU build found beside pip's
# find-links, never a CUDA one) writes the float models it converts
REQUIREMENTS: tuple[str, ...] = ("torch==2.13.0+cpu", "onnx", "onnxscript", "onnxruntime",
                                 "onnxconverter-common==1.16.0")

# (model name, float model, keep_io_types)
VARIANTS = (
    ("fp16_cnn_io32", "cnn", True),
    ("fp16_cnn", "cnn", False),
    ("fp16_mobile_io32", "mobile", True),
    ("fp16_encoder_io32", "encoder", True),
    ("fp16_encoder", "encoder", False),
)


def convert(src: Path, dst: Path, keep_io_types: bool) -> None:
    import onnx
    import onnxscript.optimizer
    from onnxconverter_common import float16

    # shape arithmetic folded first, as users do: onnxconverter-common 1.16 retypes the output of
    # a Cast(to=float) of a shape (the attention's 1/sqrt(head_dim)) as float16 but keeps `to`,
    # a file ONNX Runtime refuses ("Type (tensor(float16)) of output arg ... does not match")
    model = onnxscript.optimizer.optimize(onnx.load(str(src)))
    model = float16.convert_float_to_float16(model, keep_io_types=keep_io_types)
    onnx.save(model, str(dst))


def models(work: Path) -> list[Model]:
    import functools

    @functools.cache
    def fp32(name: str) -> Path:
        return export_float_models(work, (name,))[name]

    def maker(name: str, keep: bool):
        return lambda path: convert(fp32(name), path, keep)

    return [Model(stem, maker(name, keep), shapes_of(name),
                  f"convert_float_to_float16 of the {name} model, keep_io_types={keep}: "
                  f"{'float32 inputs/outputs, Casts at the edges' if keep else 'float16 inputs and outputs'}")
            for stem, name, keep in VARIANTS]


def build(outdir: Path) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="schedx-fp16-") as tmp:
        return build_each(outdir, EXPORTER, models(Path(tmp)))


if __name__ == "__main__":
    sys.exit(main(build))
