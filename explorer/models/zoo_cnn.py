"""ONNX graph builder and the convolutional models of the built-in zoo.

The zoo ships no weight files: every model is written node by node with ``onnx.helper`` and
filled with weights drawn from a seeded ``numpy`` generator, so the same seed always gives the
same bytes and nothing is downloaded. The weights are random but scaled (He-style normals, batch
norm statistics near identity) so activations stay finite and of order one through the network;
that is enough for compiling, timing and checking numerics, not for classifying images.

:class:`OnnxGraphBuilder` is the small helper every zoo builder writes into (the transformer
builders in :mod:`explorer.models.zoo_transformer` use it too). The model functions here take a
builder and the name of the input tensor, add their nodes, and return the output's name and shape.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # the IR version that opset 17 shipped with; old enough for every runtime here

# (expansion t, output channels c, repeats n, first stride s), as in the MobileNetV2 paper
_MOBILENET_V2_SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


# Batch norm in inference mode with near-identity statistics does not normalise, so every
# identity Add would roughly double the activations' variance (about 100x in output scale over
# ResNet-18's 8 blocks). Damping the last conv of each residual branch, as Fixup does, keeps the
# output of order one while the weights stay He-shaped.
_RESIDUAL_GAIN = 0.25


def he_std(fan_in: int, gain: float = 2.0) -> float:
    """Standard deviation that keeps the second moment of activations constant across a layer.

    ``gain=2`` suits layers followed by ReLU, ``gain=1`` linear layers (projections, logits).
    """
    return math.sqrt(gain / fan_in)


class OnnxGraphBuilder:
    """Collects nodes and initialisers for one ONNX graph, drawing weights from a seeded generator.

    Weights are drawn in the order the layers are added, so a builder function that always adds
    the same layers in the same order yields byte-identical models for the same seed.
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._constants: dict[str, str] = {}

    # -- primitives -------------------------------------------------------------------------------

    def add_initializer(self, name: str, array: np.ndarray) -> str:
        """Store ``array`` as an initialiser called ``name`` and return the name."""
        self.initializers.append(numpy_helper.from_array(np.asarray(array, order="C"), name))
        return name

    def normal(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> str:
        """Add a float32 initialiser drawn from N(mean, std^2)."""
        values = self.rng.normal(mean, std, size=shape).astype(np.float32)
        return self.add_initializer(name, values)

    def constant(self, name: str, value: float | list[int], dtype: type = np.float32) -> str:
        """Add (once) a named constant initialiser shared by every node that uses it.

        Constants such as ReLU6's bounds or reshape targets are shared by name so the graph holds
        a single copy.
        """
        if name not in self._constants:
            self._constants[name] = self.add_initializer(name, np.asarray(value, dtype=dtype))
        return self._constants[name]

    def node(self, op_type: str, inputs: list[str], name: str, **attrs: object) -> str:
        """Add one node whose single output is named after the node; return that output name."""
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def finish(
        self,
        graph_name: str,
        inputs: list[onnx.ValueInfoProto],
        output: tuple[str, tuple[int, ...]],
    ) -> onnx.ModelProto:
        """Wrap the collected nodes into an opset-17 model with one float32 output."""
        out_name, out_shape = output
        graph = helper.make_graph(
            self.nodes,
            graph_name,
            inputs,
            [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, list(out_shape))],
            initializer=self.initializers,
        )
        return helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="schedx-zoo",
        )

    # -- layers -----------------------------------------------------------------------------------

    def conv(
        self,
        x: str,
        name: str,
        in_ch: int,
        out_ch: int,
        kernel: int,
        *,
        stride: int = 1,
        group: int = 1,
        bias: bool = False,
        gain: float = 2.0,
    ) -> str:
        """Square convolution with 'same'-style padding ``kernel // 2``; bias only if asked."""
        fan_in = (in_ch // group) * kernel * kernel
        inputs = [x, self.normal(f"{name}.weight", (out_ch, in_ch // group, kernel, kernel),
                                 he_std(fan_in, gain))]
        if bias:
            inputs.append(self.normal(f"{name}.bias", (out_ch,), 0.01))
        pad = kernel // 2
        return self.node(
            "Conv", inputs, name,
            kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4, group=group,
        )

    def batch_norm(self, x: str, name: str, channels: int) -> str:
        """Inference-mode batch norm with statistics close to, but not exactly, the identity."""
        scale = self.normal(f"{name}.weight", (channels,), 0.1, mean=1.0)
        shift = self.normal(f"{name}.bias", (channels,), 0.05)
        mean = self.normal(f"{name}.running_mean", (channels,), 0.05)
        var = self.rng.uniform(0.5, 1.5, size=channels).astype(np.float32)
        var_name = self.add_initializer(f"{name}.running_var", var)
        return self.node("BatchNormalization", [x, scale, shift, mean, var_name], name,
                         epsilon=1e-5)

    def relu6(self, x: str, name: str) -> str:
        """ReLU6 written as ``Clip`` with constant min 0 and max 6 inputs."""
        low = self.constant("relu6.min", 0.0)
        high = self.constant("relu6.max", 6.0)
        return self.node("Clip", [x, low, high], name)

    def classifier(self, x: str, name: str, in_features: int, classes: int) -> str:
        """Global average pool, flatten and a ``Gemm`` producing ``classes`` logits."""
        pooled = self.node("GlobalAveragePool", [x], f"{name}.avgpool")
        flat = self.node("Flatten", [pooled], f"{name}.flatten", axis=1)
        weight = self.normal(f"{name}.weight", (classes, in_features), he_std(in_features, 1.0))
        bias = self.normal(f"{name}.bias", (classes,), 0.01)
        return self.node("Gemm", [flat, weight, bias], name, transB=1)


# -- models ---------------------------------------------------------------------------------------


def small_cnn(g: OnnxGraphBuilder, x: str) -> tuple[str, tuple[int, ...]]:
    """Three-conv CNN for 32x32 images, 10 classes; fast enough to compile in tests."""
    in_ch = 3
    for index, out_ch in enumerate((16, 32), start=1):
        x = g.conv(x, f"conv{index}", in_ch, out_ch, 3)
        x = g.batch_norm(x, f"bn{index}", out_ch)
        x = g.node("Relu", [x], f"relu{index}")
        x = g.node("MaxPool", [x], f"pool{index}", kernel_shape=[2, 2], strides=[2, 2])
        in_ch = out_ch
    x = g.conv(x, "conv3", in_ch, 64, 3, bias=True)
    x = g.node("Relu", [x], "relu3")
    return g.classifier(x, "fc", 64, 10), (1, 10)


def _conv_bn(g: OnnxGraphBuilder, x: str, prefix: str, conv_name: str, bn_name: str,
             in_ch: int, out_ch: int, kernel: int, stride: int, gain: float = 2.0) -> str:
    """Bias-free convolution followed by batch norm (the pattern FoldBatchnormToConv2D folds)."""
    x = g.conv(x, f"{prefix}.{conv_name}", in_ch, out_ch, kernel, stride=stride, gain=gain)
    return g.batch_norm(x, f"{prefix}.{bn_name}", out_ch)


def _basic_block(g: OnnxGraphBuilder, x: str, prefix: str, in_ch: int, out_ch: int,
                 stride: int) -> str:
    """ResNet BasicBlock: two 3x3 conv-BN pairs plus a shortcut (1x1 conv-BN when shapes change)."""
    y = _conv_bn(g, x, prefix, "conv1", "bn1", in_ch, out_ch, 3, stride)
    y = g.node("Relu", [y], f"{prefix}.relu1")
    y = _conv_bn(g, y, prefix, "conv2", "bn2", out_ch, out_ch, 3, 1, gain=_RESIDUAL_GAIN)
    shortcut = x
    if stride != 1 or in_ch != out_ch:
        shortcut = _conv_bn(g, x, prefix, "downsample.0", "downsample.1", in_ch, out_ch, 1, stride)
    y = g.node("Add", [y, shortcut], f"{prefix}.add")
    return g.node("Relu", [y], f"{prefix}.relu2")


def resnet18(g: OnnxGraphBuilder, x: str) -> tuple[str, tuple[int, ...]]:
    """torchvision's ResNet-18 topology with node names following its module names."""
    x = g.conv(x, "conv1", 3, 64, 7, stride=2)
    x = g.batch_norm(x, "bn1", 64)
    x = g.node("Relu", [x], "relu")
    x = g.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    in_ch = 64
    for stage, out_ch in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            x = _basic_block(g, x, f"layer{stage}.{block}", in_ch, out_ch, stride)
            in_ch = out_ch
    return g.classifier(x, "fc", 512, 1000), (1, 1000)


def _conv_bn_relu6(g: OnnxGraphBuilder, x: str, prefix: str, in_ch: int, out_ch: int,
                   kernel: int, stride: int = 1, group: int = 1) -> str:
    """MobileNetV2's Conv2dNormActivation: conv, batch norm, ReLU6."""
    x = g.conv(x, f"{prefix}.conv", in_ch, out_ch, kernel, stride=stride, group=group)
    x = g.batch_norm(x, f"{prefix}.bn", out_ch)
    return g.relu6(x, f"{prefix}.relu6")


def _inverted_residual(g: OnnxGraphBuilder, x: str, prefix: str, in_ch: int, out_ch: int,
                       stride: int, expansion: int) -> str:
    """Expand (1x1), depthwise 3x3, linear project (1x1); residual Add when shapes allow."""
    hidden = in_ch * expansion
    y = x
    if expansion != 1:
        y = _conv_bn_relu6(g, y, f"{prefix}.expand", in_ch, hidden, 1)
    y = _conv_bn_relu6(g, y, f"{prefix}.depthwise", hidden, hidden, 3, stride, group=hidden)
    y = g.conv(y, f"{prefix}.project.conv", hidden, out_ch, 1, gain=1.0)
    y = g.batch_norm(y, f"{prefix}.project.bn", out_ch)
    if stride == 1 and in_ch == out_ch:
        y = g.node("Add", [x, y], f"{prefix}.add")
    return y


def mobilenet_v2(g: OnnxGraphBuilder, x: str) -> tuple[str, tuple[int, ...]]:
    """torchvision's MobileNetV2 (width 1.0); ``features.N`` numbering matches torchvision's."""
    x = _conv_bn_relu6(g, x, "features.0", 3, 32, 3, stride=2)
    in_ch, index = 32, 1
    for expansion, out_ch, repeats, first_stride in _MOBILENET_V2_SETTINGS:
        for repeat in range(repeats):
            stride = first_stride if repeat == 0 else 1
            x = _inverted_residual(g, x, f"features.{index}", in_ch, out_ch, stride, expansion)
            in_ch, index = out_ch, index + 1
    x = _conv_bn_relu6(g, x, f"features.{index}", in_ch, 1280, 1)
    return g.classifier(x, "classifier", 1280, 1000), (1, 1000)
