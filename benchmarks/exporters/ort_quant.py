"""ONNX Runtime's quantizer on small float models: the graphs ``quantize_dynamic`` and
``quantize_static`` (QOperator and QDQ forms) write.

The float models are plain PyTorch modules with random weights, exported by ``torch.onnx.export``
(TorchScript exporter, opset 17) at a fixed shape: a ResNet-like CNN, a MobileNet-like CNN
(depthwise convolutions, ReLU6), a transformer encoder layer and a two-layer LSTM.
:func:`export_float_models` writes them (``benchmarks.exporters.fp16`` converts the same ones).
Then:

- ``quantize_dynamic`` (int8 weights, activations quantized at run time): ``ConvInteger``,
  ``MatMulInteger``, ``DynamicQuantizeLinear`` and, on the LSTM, ``com.microsoft``
  ``DynamicQuantizeLSTM``;
- ``quantize_static`` in QOperator form: ``QLinearConv``, ``QLinearMatMul``, ``com.microsoft``
  ``QLinearAdd``, ``QLinearGlobalAveragePool``, ``QGemm``..., with a calibration reader of random
  inputs (seeded);
- ``quantize_static`` in QDQ form (QuantizeLinear/DequantizeLinear pairs around float operators),
  per tensor and per channel.

Run: ``python -m benchmarks.exporters.ort_quant OUTDIR`` (prints the entries as JSON).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.exporters import Model, build_each, main

EXPORTER = "onnxruntime.quantization"
REQUIREMENTS: tuple[str, ...] = ()  # the project's .venv: torch, onnx, onnxruntime

SEED = 0
CALIBRATION_INPUTS = 8

# name -> (input name, input shape); every float model takes one float32 input
FLOAT_INPUTS = {
    "cnn": ("image", (1, 3, 64, 64)),
    "mobile": ("image", (1, 3, 64, 64)),
    "encoder": ("tokens", (1, 16, 64)),
    "lstm": ("frames", (1, 20, 32)),
}


def float_modules():
    import torch
    from torch import nn

    class Residual(nn.Module):
        def __init__(self, c: int):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
            self.b = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):
            return torch.relu(x + self.b(self.a(x)))

    class Cnn(nn.Module):  # ResNet-like: stem, two residual stages, pool, classifier
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU())
            self.stage1 = Residual(16)
            self.down = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU())
            self.stage2 = Residual(32)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = self.stage2(self.down(self.stage1(self.stem(x))))
            return self.fc(torch.flatten(self.pool(x), 1))

    def inverted(c_in: int, c_out: int, stride: int) -> nn.Module:
        mid = c_in * 4
        return nn.Sequential(
            nn.Conv2d(c_in, mid, 1), nn.ReLU6(),
            nn.Conv2d(mid, mid, 3, stride=stride, padding=1, groups=mid), nn.ReLU6(),
            nn.Conv2d(mid, c_out, 1))

    class Mobile(nn.Module):  # MobileNetV2-like: inverted residuals with depthwise convolutions
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU6())
            self.block1 = inverted(16, 16, 1)
            self.block2 = inverted(16, 24, 2)
            self.head = nn.Linear(24, 10)

        def forward(self, x):
            x = self.stem(x)
            x = x + self.block1(x)
            x = self.block2(x)
            return self.head(x.mean(dim=(2, 3)))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
            self.out = nn.Linear(64, 8)

        def forward(self, x):
            return self.out(self.layer(x))

    class Lstm(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(32, 48, num_layers=2, batch_first=True)
            self.out = nn.Linear(48, 6)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.out(y)

    return {"cnn": Cnn, "mobile": Mobile, "encoder": Encoder, "lstm": Lstm}


def export_float_models(folder: Path, names: tuple[str, ...] = tuple(FLOAT_INPUTS)) -> dict[str, Path]:
    """Write the float32 models (random weights, eval mode, seeded) as ONNX files in ``folder``."""
    import torch

    torch.manual_seed(SEED)
    classes = float_modules()
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in names:
        module = classes[name]().eval()
        input_name, shape = FLOAT_INPUTS[name]
        path = folder / f"{name}_fp32.onnx"
        # with grad enabled: eval-mode TransformerEncoderLayer under no_grad takes a fused fast path
        # (aten::_transformer_encoder_layer_fwd) the TorchScript exporter cannot write
        torch.onnx.export(module, (torch.randn(*shape),), str(path), input_names=[input_name],
                          output_names=["output"], opset_version=17, dynamo=False)
        paths[name] = path
    return paths


def shapes_of(name: str) -> str:
    input_name, shape = FLOAT_INPUTS[name]
    return f"{input_name}:{'x'.join(map(str, shape))}"


class RandomReader:
    """ONNX Runtime's ``CalibrationDataReader`` protocol over seeded standard-normal inputs."""

    def __init__(self, input_name: str, shape: tuple[int, ...], count: int = CALIBRATION_INPUTS):
        rng = np.random.default_rng(SEED)
        self._batches = iter([{input_name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)])

    def get_next(self):
        return next(self._batches, None)

    def rewind(self):  # pragma: no cover - the quantizer reads once
        pass


def _preprocess(src: Path, dst: Path) -> Path:
    """ONNX Runtime's own pre-processing (shape inference, BatchNorm folded), as its docs advise."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
    return dst


# (file stem, float model, how, notes)
VARIANTS = (
    ("cnn_dynamic", "cnn", "dynamic", "quantize_dynamic: ConvInteger, MatMulInteger, DynamicQuantizeLinear"),
    ("mobile_dynamic", "mobile", "dynamic", "quantize_dynamic: depthwise ConvInteger (group > 1)"),
    ("encoder_dynamic", "encoder", "dynamic", "quantize_dynamic: MatMulInteger in attention and MLP"),
    ("lstm_dynamic", "lstm", "dynamic", "quantize_dynamic: com.microsoft DynamicQuantizeLSTM x2, MatMulInteger"),
    ("cnn_dynamic_per_channel", "cnn", "dynamic_pc", "quantize_dynamic per_channel: per-channel weight zero points"),
    ("cnn_qoperator", "cnn", "qoperator", "quantize_static QOperator: QLinearConv, QLinearAdd, QLinearGlobalAveragePool, QGemm"),
    ("mobile_qoperator", "mobile", "qoperator", "quantize_static QOperator: QLinearConv (depthwise), QLinearAdd, QLinearMatMul"),
    ("encoder_qoperator", "encoder", "qoperator", "quantize_static QOperator: QLinearMatMul, QLinearAdd, QLinearSoftmax"),
    ("cnn_qdq", "cnn", "qdq", "quantize_static QDQ, per tensor"),
    ("mobile_qdq_per_channel", "mobile", "qdq_pc", "quantize_static QDQ, per-channel weights"),
    ("encoder_qdq", "encoder", "qdq", "quantize_static QDQ: QuantizeLinear/DequantizeLinear around MatMul, Add"),
)


def _quantize(how: str, src: Path, dst: Path, name: str) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    if how.startswith("dynamic"):
        quantize_dynamic(str(src), str(dst), per_channel=how.endswith("_pc"), weight_type=QuantType.QInt8)
        return
    input_name, shape = FLOAT_INPUTS[name]
    fmt = QuantFormat.QOperator if how == "qoperator" else QuantFormat.QDQ
    quantize_static(str(src), str(dst), RandomReader(input_name, shape), quant_format=fmt,
                    per_channel=how.endswith("_pc"), activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)


def models(work: Path) -> list[Model]:
    """One :class:`Model` per variant; the float models are exported into ``work`` once, when the
    first variant that needs one is made."""
    import functools

    @functools.cache
    def prepared(name: str) -> Path:
        src = export_float_models(work, (name,))[name]
        return _preprocess(src, work / f"{name}_pre.onnx")

    def maker(name: str, how: str):
        return lambda path: _quantize(how, prepared(name), path, name)

    return [Model(f"ortq_{stem}", maker(name, how), shapes_of(name), f"{notes} (random weights)")
            for stem, name, how, notes in VARIANTS]


def build(outdir: Path) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="schedx-ortq-") as tmp:
        return build_each(outdir, EXPORTER, models(Path(tmp)))


if __name__ == "__main__":
    sys.exit(main(build))
