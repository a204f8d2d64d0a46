"""The transformer model of the built-in zoo: one BERT-base encoder layer.

Written with plain ONNX operators (MatMul, Softmax, Erf, LayerNormalization, ...) rather than
fused contrib ops, so TVM's ONNX importer and ONNX Runtime both read it. Every ``Reshape`` target
is a static int64 initialiser: TVM's importer rejects shapes computed at run time
(Shape -> Gather -> Concat), so the graph never computes one.
"""

from __future__ import annotations

import math

import numpy as np

from explorer.models.zoo_cnn import OnnxGraphBuilder, he_std

HIDDEN = 768
HEADS = 12
HEAD_DIM = HIDDEN // HEADS
FFN = 3072
SEQ_LEN = 128
LAYER_NORM_EPS = 1e-12  # BERT's value


def _linear(g: OnnxGraphBuilder, x: str, name: str, in_features: int, out_features: int,
            gain: float = 1.0) -> str:
    """``x @ W + b`` as MatMul then Add, the way exporters write a Linear on 3-D input."""
    weight = g.normal(f"{name}.weight", (in_features, out_features), he_std(in_features, gain))
    bias = g.normal(f"{name}.bias", (out_features,), 0.01)
    y = g.node("MatMul", [x, weight], f"{name}.matmul")
    return g.node("Add", [y, bias], name)


def _layer_norm(g: OnnxGraphBuilder, x: str, name: str) -> str:
    """Opset-17 ``LayerNormalization`` over the hidden axis with near-identity affine weights."""
    scale = g.normal(f"{name}.weight", (HIDDEN,), 0.05, mean=1.0)
    bias = g.normal(f"{name}.bias", (HIDDEN,), 0.02)
    return g.node("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=LAYER_NORM_EPS)


def _split_heads(g: OnnxGraphBuilder, x: str, name: str, seq: int, perm: list[int]) -> str:
    """Reshape 1xSx768 to 1xSx12x64, then transpose so the heads lead (``perm`` picks K^T)."""
    shape = g.constant(f"shape.1x{seq}x{HEADS}x{HEAD_DIM}", [1, seq, HEADS, HEAD_DIM], np.int64)
    y = g.node("Reshape", [x, shape], f"{name}.reshape")
    return g.node("Transpose", [y], f"{name}.transpose", perm=perm)


def _self_attention(g: OnnxGraphBuilder, x: str, prefix: str, seq: int) -> str:
    """Multi-head scaled dot-product self-attention, heads merged back to 1xSx768."""
    heads_first = [0, 2, 1, 3]
    q = _split_heads(g, _linear(g, x, f"{prefix}.query", HIDDEN, HIDDEN), f"{prefix}.q",
                     seq, heads_first)
    k = _split_heads(g, _linear(g, x, f"{prefix}.key", HIDDEN, HIDDEN), f"{prefix}.k",
                     seq, [0, 2, 3, 1])
    v = _split_heads(g, _linear(g, x, f"{prefix}.value", HIDDEN, HIDDEN), f"{prefix}.v",
                     seq, heads_first)
    scores = g.node("MatMul", [q, k], f"{prefix}.scores")
    scale = g.constant("attention.scale", 1.0 / math.sqrt(HEAD_DIM))
    scores = g.node("Mul", [scores, scale], f"{prefix}.scale")
    probs = g.node("Softmax", [scores], f"{prefix}.softmax", axis=-1)
    context = g.node("MatMul", [probs, v], f"{prefix}.context")
    context = g.node("Transpose", [context], f"{prefix}.context.transpose", perm=heads_first)
    merged = g.constant(f"shape.1x{seq}x{HIDDEN}", [1, seq, HIDDEN], np.int64)
    return g.node("Reshape", [context, merged], f"{prefix}.context.reshape")


def _gelu(g: OnnxGraphBuilder, x: str, name: str) -> str:
    """Exact GELU as BERT writes it: ``0.5 * x * (1 + erf(x / sqrt(2)))``."""
    scaled = g.node("Div", [x, g.constant("gelu.sqrt2", math.sqrt(2.0))], f"{name}.div")
    erf = g.node("Erf", [scaled], f"{name}.erf")
    one_plus = g.node("Add", [erf, g.constant("gelu.one", 1.0)], f"{name}.add")
    gated = g.node("Mul", [x, one_plus], f"{name}.mul")
    return g.node("Mul", [gated, g.constant("gelu.half", 0.5)], name)


def bert_encoder(g: OnnxGraphBuilder, x: str) -> tuple[str, tuple[int, ...]]:
    """One post-norm BERT-base encoder layer (12 heads, hidden 768, FFN 3072) on 1x128x768."""
    seq = SEQ_LEN
    prefix = "encoder.layer.0"
    context = _self_attention(g, x, f"{prefix}.attention.self", seq)
    attn_out = _linear(g, context, f"{prefix}.attention.output.dense", HIDDEN, HIDDEN)
    attn_out = g.node("Add", [attn_out, x], f"{prefix}.attention.output.residual")
    attn_out = _layer_norm(g, attn_out, f"{prefix}.attention.output.LayerNorm")
    hidden = _linear(g, attn_out, f"{prefix}.intermediate.dense", HIDDEN, FFN, gain=2.0)
    hidden = _gelu(g, hidden, f"{prefix}.intermediate.gelu")
    out = _linear(g, hidden, f"{prefix}.output.dense", FFN, HIDDEN)
    out = g.node("Add", [out, attn_out], f"{prefix}.output.residual")
    return _layer_norm(g, out, f"{prefix}.output.LayerNorm"), (1, seq, HIDDEN)
