"""Paddle2ONNX: PaddleOCR-style det (DB head) / rec (CRNN, SVTR-like) / cls nets, a PP-LCNet
(HardSwish, HardSigmoid SE), a PP-YOLOE-style head and an ERNIE-like encoder, written with paddle.nn,
random weights, saved with ``paddle.jit.save`` and converted by paddle2onnx at opsets 11-13. Built in
a venv of its own (REQUIREMENTS: Paddle pins numpy and protobuf apart from the project):
``python -m benchmarks.exporters.build --modules paddle``."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benchmarks.exporters import Model, build_each, main

EXPORTER = "paddle2onnx"
REQUIREMENTS = ("paddlepaddle==3.3.1", "paddle2onnx==2.1.0", "packaging")  # paddle imports packaging undeclared


def _layers():
    """The paddle.nn building blocks (defined on first use: paddle is imported only in the builder venv)."""
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    class ConvBN(nn.Layer):
        def __init__(self, cin, cout, k=3, s=1, groups=1, act="hardswish"):
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, s, (k - 1) // 2, groups=groups, bias_attr=False)
            self.bn = nn.BatchNorm2D(cout)
            self.act = {"hardswish": nn.Hardswish(), "relu": nn.ReLU(), None: nn.Identity()}[act]

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class SE(nn.Layer):
        """PaddleOCR's SE: average pool, 1x1 conv, ReLU, 1x1 conv, hardsigmoid(slope 0.2), scale."""

        def __init__(self, c, r=4):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.c1 = nn.Conv2D(c, c // r, 1)
            self.c2 = nn.Conv2D(c // r, c, 1)

        def forward(self, x):
            s = F.hardsigmoid(self.c2(F.relu(self.c1(self.pool(x)))), slope=0.2, offset=0.5)
            return x * s

    class DepthSep(nn.Layer):
        """PP-LCNet's block: depthwise conv + (SE) + pointwise conv, HardSwish."""

        def __init__(self, cin, cout, s, k=3, se=False):
            super().__init__()
            self.dw = ConvBN(cin, cin, k, s, groups=cin)
            self.se = SE(cin) if se else nn.Identity()
            self.pw = ConvBN(cin, cout, 1)

        def forward(self, x):
            return self.pw(self.se(self.dw(x)))

    class LCNet(nn.Layer):
        """PP-LCNet x0.5 (the cls and det backbone of PaddleOCR v3/v4 and PaddleClas' mobile net)."""

        def __init__(self, scale=0.5, classes=None, stages_out=False):
            super().__init__()
            cfg = [(16, 32, 1, 3, False), (32, 64, 2, 3, False), (64, 64, 1, 3, False), (64, 128, 2, 3, False),
                   (128, 128, 1, 3, False), (128, 256, 2, 3, False), (256, 256, 1, 5, False),
                   (256, 256, 1, 5, False), (256, 512, 2, 5, True), (512, 512, 1, 5, True)]
            c = lambda n: max(8, int(n * scale))  # noqa: E731
            self.stem = ConvBN(3, c(16), 3, 2)
            self.blocks = nn.LayerList([DepthSep(c(i), c(o), s, k, se) for i, o, s, k, se in cfg])
            self.taps = (2, 4, 7, 9)  # strides 4, 8, 16, 32
            self.stages_out = stages_out
            self.channels = [c(cfg[t][1]) for t in self.taps]
            if classes:
                self.head = nn.Sequential(nn.AdaptiveAvgPool2D(1), nn.Conv2D(c(512), 1280, 1), nn.Hardswish(),
                                          nn.Dropout(0.2), nn.Flatten(), nn.Linear(1280, classes))

        def forward(self, x):
            x = self.stem(x)
            outs = []
            for i, b in enumerate(self.blocks):
                x = b(x)
                if i in self.taps:
                    outs.append(x)
            return outs if self.stages_out else self.head(x)

    class Classifier(nn.Layer):
        def __init__(self, body):
            super().__init__()
            self.body = body

        def forward(self, x):
            return F.softmax(self.body(x), axis=-1)

    class DBNet(nn.Layer):
        """PaddleOCR's DB text detector: LCNet backbone, FPN (nearest up-sampling, adds, concat),
        DB head (conv, BN, ReLU, two transposed convs, sigmoid probability map)."""

        def __init__(self):
            super().__init__()
            self.backbone = LCNet(stages_out=True)
            inner = 64
            self.lat = nn.LayerList([nn.Conv2D(c, inner, 1, bias_attr=False) for c in self.backbone.channels])
            self.smooth = nn.LayerList([nn.Conv2D(inner, inner // 4, 3, padding=1, bias_attr=False)
                                        for _ in self.backbone.channels])
            self.head = nn.Sequential(ConvBN(inner, inner // 4, 3, act="relu"),
                                      nn.Conv2DTranspose(inner // 4, inner // 4, 2, 2), nn.BatchNorm2D(inner // 4),
                                      nn.ReLU(), nn.Conv2DTranspose(inner // 4, 1, 2, 2), nn.Sigmoid())

        def forward(self, x):
            # sizes from the shape: paddle2onnx 2.1 refuses an upsample by scale_factor on Paddle 3's
            # program format ("the 0th elementwise MUST be ir::FloatAttribute")
            def up(t, f):
                return F.interpolate(t, size=[t.shape[2] * f, t.shape[3] * f], mode="nearest")
            c2, c3, c4, c5 = [lat(f) for lat, f in zip(self.lat, self.backbone(x))]
            p4 = c4 + up(c5, 2)
            p3 = c3 + up(p4, 2)
            p2 = c2 + up(p3, 2)
            ps = [s(p) for s, p in zip(self.smooth, (p2, p3, p4, c5))]
            fuse = paddle.concat([ps[0]] + [up(p, 2 ** i) for i, p in enumerate(ps[1:], 1)], axis=1)
            return self.head(fuse)

    class CRNN(nn.Layer):
        """PaddleOCR's CRNN recogniser: conv backbone pooled to height 1, squeeze, two-layer
        bidirectional LSTM, CTC linear, softmax."""

        def __init__(self, classes=97):
            super().__init__()
            self.cnn = nn.Sequential(ConvBN(3, 32, 3, 1, act="relu"), nn.MaxPool2D(2, 2),
                                     ConvBN(32, 64, 3, 1, act="relu"), nn.MaxPool2D(2, 2),
                                     ConvBN(64, 128, 3, 1, act="relu"), nn.MaxPool2D((2, 1), (2, 1)),
                                     ConvBN(128, 128, 3, 1, act="relu"), nn.MaxPool2D((6, 1), (6, 1)))
            self.rnn = nn.LSTM(128, 64, num_layers=2, direction="bidirect")
            self.fc = nn.Linear(128, classes)

        def forward(self, x):
            f = self.cnn(x)  # N, C, 1, W/4
            f = paddle.transpose(paddle.squeeze(f, axis=2), [0, 2, 1])
            y, _ = self.rnn(f)
            return F.softmax(self.fc(y), axis=2)

    class Mixer(nn.Layer):
        """An SVTR global mixing block: multi-head self-attention and a GELU MLP, pre-norm."""

        def __init__(self, dim, heads):
            super().__init__()
            self.heads, self.scale = heads, (dim // heads) ** -0.5
            self.n1, self.n2 = nn.LayerNorm(dim, epsilon=1e-6), nn.LayerNorm(dim, epsilon=1e-6)
            self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

        def forward(self, x):
            n, t, d = x.shape[0], x.shape[1], x.shape[2]
            qkv = paddle.reshape(self.qkv(self.n1(x)), [0, -1, 3, self.heads, d // self.heads])
            qkv = paddle.transpose(qkv, [2, 0, 3, 1, 4])
            q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
            attn = F.softmax(paddle.matmul(q, k, transpose_y=True), axis=-1)
            y = paddle.reshape(paddle.transpose(paddle.matmul(attn, v), [0, 2, 1, 3]), [0, -1, d])
            x = x + self.proj(y)
            return x + self.mlp(self.n2(x))

    class SVTR(nn.Layer):
        """An SVTR-like recogniser: conv patch stem, attention mixers, height pooled, CTC linear."""

        def __init__(self, classes=97, dim=96):
            super().__init__()
            self.stem = nn.Sequential(ConvBN(3, dim // 2, 3, 2, act="relu"), ConvBN(dim // 2, dim, 3, 2, act="relu"))
            self.blocks = nn.LayerList([Mixer(dim, 4) for _ in range(3)])
            self.norm = nn.LayerNorm(dim, epsilon=1e-6)
            self.pool = nn.AdaptiveAvgPool2D((1, None))
            self.fc = nn.Linear(dim, classes)
            self.dim = dim

        def forward(self, x):
            f = self.stem(x)  # N, D, H/4, W/4
            h, w = f.shape[2], f.shape[3]
            t = paddle.transpose(paddle.flatten(f, 2), [0, 2, 1])
            for b in self.blocks:
                t = b(t)
            f = paddle.reshape(paddle.transpose(self.norm(t), [0, 2, 1]), [0, self.dim, h, w])
            f = paddle.transpose(paddle.squeeze(self.pool(f), axis=2), [0, 2, 1])
            return F.softmax(self.fc(f), axis=2)

    class YOLOEHead(nn.Layer):
        """A PP-YOLOE-style detector: LCNet backbone, ESE attention (pool, conv, sigmoid), a sigmoid
        class branch and a DFL box branch (softmax over 17 bins, projected by a fixed 1x1 conv), anchor
        points decoded to boxes, all levels concatenated."""

        def __init__(self, classes=80, reg_max=16):
            super().__init__()
            self.backbone = LCNet(stages_out=True)
            chans = self.backbone.channels[1:]
            self.reg_max = reg_max
            self.ese = nn.LayerList([nn.Conv2D(c, c, 1) for c in chans])
            self.stem = nn.LayerList([ConvBN(c, c, 1, act="relu") for c in chans])
            self.cls = nn.LayerList([nn.Conv2D(c, classes, 3, padding=1) for c in chans])
            self.reg = nn.LayerList([nn.Conv2D(c, 4 * (reg_max + 1), 3, padding=1) for c in chans])
            self.proj = nn.Conv2D(reg_max + 1, 1, 1, bias_attr=False)
            self.proj.weight.set_value(paddle.arange(reg_max + 1, dtype="float32").reshape([1, reg_max + 1, 1, 1]))
            self.proj.weight.stop_gradient = True
            self.strides = (8, 16, 32)

        def forward(self, x):
            scores, boxes = [], []
            for i, f in enumerate(self.backbone(x)[1:]):
                n, _, h, w = f.shape
                a = F.sigmoid(self.ese[i](F.adaptive_avg_pool2d(f, 1)))
                f = self.stem[i](f * a) + f
                scores.append(paddle.flatten(F.sigmoid(self.cls[i](f)), 2))
                reg = paddle.transpose(paddle.reshape(self.reg[i](f), [-1, 4, self.reg_max + 1, h * w]), [0, 2, 3, 1])
                dist = paddle.squeeze(self.proj(F.softmax(reg, axis=1)), axis=1)  # N, h*w, 4
                ys, xs = paddle.meshgrid(paddle.arange(h, dtype="float32"), paddle.arange(w, dtype="float32"))
                pts = (paddle.stack([xs, ys], axis=-1).reshape([1, -1, 2]) + 0.5) * self.strides[i]
                lt, rb = paddle.split(dist * self.strides[i], 2, axis=-1)
                boxes.append(paddle.concat([pts - lt, pts + rb], axis=-1))
            return paddle.concat(boxes, axis=1), paddle.concat(scores, axis=2)

    class Ernie(nn.Layer):
        """An ERNIE-like text encoder: int64 token ids, word + position embeddings, two post-norm
        transformer layers (paddle.nn.TransformerEncoder), the [CLS] row through a tanh pooler."""

        def __init__(self, vocab=3000, dim=128, seq=32):
            super().__init__()
            self.word, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
            self.norm = nn.LayerNorm(dim)
            layer = nn.TransformerEncoderLayer(dim, 4, dim * 4, dropout=0.0, activation="gelu")
            self.encoder = nn.TransformerEncoder(layer, 2)
            self.pool = nn.Linear(dim, dim)
            self.seq = seq

        def forward(self, ids):
            pos = paddle.arange(self.seq, dtype="int64").unsqueeze(0)
            x = self.encoder(self.norm(self.word(ids) + self.pos(pos)))
            return paddle.tanh(self.pool(x[:, 0]))

    return {"DBNet": DBNet, "CRNN": CRNN, "SVTR": SVTR, "YOLOE": YOLOEHead, "Ernie": Ernie,
            "cls": lambda: Classifier(LCNet(scale=0.35, classes=2)),
            "LCNet": lambda: Classifier(LCNet(scale=0.5, classes=1000))}


def _randomise_norms(layer) -> None:
    """Random BatchNorm statistics and scales, so no layer is the identity it starts as."""
    import numpy as np
    import paddle

    rng = np.random.default_rng(0)
    for sub in layer.sublayers():
        if isinstance(sub, paddle.nn.BatchNorm2D):
            c = sub._mean.shape[0]
            sub.weight.set_value(rng.uniform(0.5, 1.5, c).astype("float32"))
            sub.bias.set_value(rng.normal(0, 0.1, c).astype("float32"))
            sub._mean.set_value(rng.normal(0, 0.1, c).astype("float32"))
            sub._variance.set_value(rng.uniform(0.5, 1.5, c).astype("float32"))


def _paddle(kind: str, shape: list, opset: int, *, dtype: str = "float32"):
    """A writer: build ``kind``, save it with paddle.jit.save (``None`` dims stay dynamic), convert."""
    def write(path: Path) -> None:
        import paddle
        import paddle2onnx

        paddle.seed(0)
        model = _layers()[kind]()
        _randomise_norms(model)
        model.eval()
        with tempfile.TemporaryDirectory(prefix="schedx-paddle-") as tmp:
            prefix = str(Path(tmp) / "inference")
            paddle.jit.save(model, prefix, input_spec=[paddle.static.InputSpec(shape, dtype, "x")])
            program = next(p for p in (Path(prefix + ".json"), Path(prefix + ".pdmodel")) if p.exists())
            paddle2onnx.export(str(program), prefix + ".pdiparams", str(path), opset_version=opset,
                               auto_upgrade_opset=False, enable_onnx_checker=True, verbose=False)
    return write


MODELS = [
    Model("pd_ocr_det_db_op11", _paddle("DBNet", [None, 3, None, None], 11), "x:1x3x320x320",
          "PaddleOCR-style DB detector (LCNet + FPN + DB head, sigmoid map), dynamic batch/height/width, opset 11"),
    Model("pd_ocr_det_db_op13", _paddle("DBNet", [1, 3, 256, 256], 13), None,
          "PaddleOCR-style DB detector at a fixed 256x256, opset 13"),
    Model("pd_ocr_rec_crnn", _paddle("CRNN", [None, 3, 48, 320], 12), "x:1x3x48x320",
          "PaddleOCR-style CRNN recogniser (conv + 2-layer bidirectional LSTM + CTC softmax), opset 12"),
    Model("pd_ocr_rec_svtr", _paddle("SVTR", [1, 3, 32, 128], 13), None,
          "SVTR-like recogniser (conv stem + attention mixers + CTC softmax), opset 13"),
    Model("pd_ocr_cls", _paddle("cls", [None, 3, 48, 192], 11), "x:1x3x48x192",
          "PaddleOCR-style text-direction classifier (PP-LCNet x0.35), opset 11"),
    Model("pd_pp_lcnet_op13", _paddle("LCNet", [1, 3, 224, 224], 13), None,
          "PP-LCNet x0.5 (HardSwish, SE with HardSigmoid slope 0.2), opset 13"),
    Model("pd_pp_lcnet_op11", _paddle("LCNet", [None, 3, 224, 224], 11), "x:1x3x224x224",
          "PP-LCNet x0.5, dynamic batch, opset 11"),
    Model("pd_pp_yoloe_head", _paddle("YOLOE", [1, 3, 320, 320], 12), None,
          "PP-YOLOE-style head (ESE, sigmoid classes, DFL softmax boxes, anchor decode), opset 12"),
    Model("pd_ernie_encoder", _paddle("Ernie", [1, 32], 13, dtype="int64"), None,
          "ERNIE-like encoder (embeddings, 2 transformer layers, tanh pooler), int64 ids, opset 13"),
]


def build(outdir: Path) -> list[dict]:
    return build_each(outdir, EXPORTER, MODELS)


if __name__ == "__main__":
    sys.exit(main(build))
