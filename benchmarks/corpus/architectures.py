"""The corpus's architectures: what a user brings, built here from the package registries with
seeded weights (no download at run time).

Each entry names the module that builds it and its example inputs; `build.py` exports them to
ONNX as a user would (the exporter's default opset; some with the TorchScript exporter and a
dynamic batch, as older exports are) and writes the manifest. Families: torchvision
classification, segmentation and detection (backbone and heads, the part deployed without the
Python post-processing), timm (ConvNeXt, EfficientNet, RegNet, MobileViT, ViT/DeiT, LeViT, ...),
transformers from small configs (BERT, GPT-2, ViT, Whisper encoder, wav2vec2), recurrent models,
hand-written detectors and heads, the ONNX package's own models, int8 versions of a few.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

IMAGE = (1, 3, 224, 224)


@dataclass(frozen=True)
class Arch:
    """One corpus model: how to build it (a torch module and inputs), or where its file comes from."""

    name: str
    family: str
    source: str  # torchvision, timm, transformers, custom, onnx-package, quantized
    build: Callable[[], tuple[object, dict]] | None = None
    exporter: str = "dynamo"  # or "torchscript"
    dynamic_batch: bool = False
    base: str | None = None  # quantized: the corpus model it quantizes
    quantize: str | None = None  # "qdq" (static, QOperator-free) or "dynamic"
    package_file: str | None = None  # onnx-package: the file under onnx/backend/test/data
    notes: str = ""
    shapes: dict = field(default_factory=dict)  # --shapes a user would give (dynamic models)


def _seeded():
    import torch

    torch.manual_seed(0)
    return torch


def _image(shape=IMAGE):
    torch = _seeded()
    return {"input": torch.randn(*shape)}


def torchvision_classifier(name: str, shape=IMAGE):
    def build():
        from benchmarks.corpus.shims import torchvision

        model = getattr(torchvision.models, name)(weights=None)
        return model.eval(), _image(shape)
    return build


def torchvision_segmenter(name: str, shape=(1, 3, 256, 256)):
    def build():
        from benchmarks.corpus.shims import torchvision

        torch = _seeded()
        seg = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None, aux_loss=False)

        class Out(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.seg = seg

            def forward(self, x):
                return self.seg(x)["out"]
        return Out().eval(), _image(shape)
    return build


def torchvision_video(name: str, shape=(1, 3, 8, 112, 112)):
    """A torchvision video classifier (3-D convolutions) on a short clip, seeded weights."""
    def build():
        from benchmarks.corpus.shims import torchvision

        _seeded()
        return getattr(torchvision.models.video, name)(weights=None).eval(), _image(shape)
    return build


def ssdlite_heads():
    """SSDlite320 (MobileNetV3 backbone): the raw box and class heads, as deployed before NMS."""
    from benchmarks.corpus.shims import torchvision

    torch = _seeded()
    det = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)

    class Heads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.head = det.backbone, det.head

        def forward(self, x):
            feats = list(self.backbone(x).values())
            out = self.head(feats)
            return out["bbox_regression"], out["cls_logits"]
    return Heads().eval(), _image((1, 3, 320, 320))


def fasterrcnn_fpn_rpn():
    """Faster R-CNN (MobileNetV3-large 320 FPN): backbone, FPN and the RPN head's maps."""
    from benchmarks.corpus.shims import torchvision

    torch = _seeded()
    det = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None)

    class Rpn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.head = det.backbone, det.rpn.head

        def forward(self, x):
            feats = list(self.backbone(x).values())
            logits, boxes = self.head(feats)
            return tuple(logits) + tuple(boxes)
    return Rpn().eval(), _image((1, 3, 320, 320))


def timm_model(name: str, shape=IMAGE):
    def build():
        from benchmarks.corpus.shims import timm

        _seeded()
        return timm.create_model(name, pretrained=False).eval(), _image(shape)
    return build


def bert_small():
    import transformers

    torch = _seeded()
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=512, max_position_embeddings=64)
    model = transformers.BertModel(cfg).eval()

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    ids = torch.randint(0, 1000, (1, 32))
    return Bert().eval(), {"input_ids": ids, "attention_mask": torch.ones(1, 32, dtype=torch.int64)}


def gpt2_small():
    import transformers

    torch = _seeded()
    cfg = transformers.GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=2, n_positions=64, use_cache=False)
    model = transformers.GPT2LMHeadModel(cfg).eval()

    class Gpt2(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits
    return Gpt2().eval(), {"input_ids": torch.randint(0, 1000, (1, 32))}


def hf_vit_small():
    import transformers

    torch = _seeded()
    cfg = transformers.ViTConfig(image_size=96, patch_size=16, hidden_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=256)
    model = transformers.ViTModel(cfg, add_pooling_layer=False).eval()

    class Vit(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, pixel_values):
            return self.m(pixel_values=pixel_values).last_hidden_state
    return Vit().eval(), {"pixel_values": torch.randn(1, 3, 96, 96)}


def whisper_encoder_small():
    import transformers

    torch = _seeded()
    cfg = transformers.WhisperConfig(d_model=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=256,
                                     decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=256,
                                     num_mel_bins=40, max_source_positions=100, vocab_size=1000,
                                     pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    encoder = transformers.WhisperModel(cfg).get_encoder().eval()

    class Enc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = encoder

        def forward(self, input_features):
            return self.m(input_features=input_features).last_hidden_state
    return Enc().eval(), {"input_features": torch.randn(1, 40, 200)}


def wav2vec2_small():
    import transformers

    torch = _seeded()
    cfg = transformers.Wav2Vec2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=256, conv_dim=(64, 64, 64, 64, 64, 64, 64),
                                      num_conv_pos_embeddings=32, num_conv_pos_embedding_groups=4,
                                      do_stable_layer_norm=False, feat_extract_norm="group")
    model = transformers.Wav2Vec2Model(cfg).eval()

    class W2v(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_values):
            return self.m(input_values=input_values).last_hidden_state
    return W2v().eval(), {"input_values": torch.randn(1, 8000)}


def lstm_tagger():
    """Token tagger: embedding, 2-layer bidirectional LSTM, linear."""
    torch = _seeded()

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(1000, 64)
            self.rnn = torch.nn.LSTM(64, 96, num_layers=2, bidirectional=True, batch_first=True)
            self.out = torch.nn.Linear(192, 12)

        def forward(self, tokens):
            h, _ = self.rnn(self.emb(tokens))
            return self.out(h)
    return Tagger().eval(), {"tokens": torch.randint(0, 1000, (1, 40))}


def gru_tagger():
    torch = _seeded()

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(1000, 64)
            self.rnn = torch.nn.GRU(64, 96, num_layers=2, bidirectional=True, batch_first=True)
            self.out = torch.nn.Linear(192, 12)

        def forward(self, tokens):
            h, _ = self.rnn(self.emb(tokens))
            return self.out(h)
    return Tagger().eval(), {"tokens": torch.randint(0, 1000, (1, 40))}


def gru_voice_activity():
    """Speech activity on 40 filterbank features per 10 ms frame: a GRU and a sigmoid per frame."""
    torch = _seeded()

    class Vad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(40, 64)
            self.rnn = torch.nn.GRU(64, 64, batch_first=True)
            self.out = torch.nn.Linear(64, 1)

        def forward(self, features):
            h, _ = self.rnn(torch.relu(self.proj(features)))
            return torch.sigmoid(self.out(h))
    return Vad().eval(), {"features": torch.randn(1, 100, 40)}


def crnn():
    """Text line recognizer: a conv stack to a width sequence, a BiLSTM, per-step classes (CTC)."""
    torch = _seeded()
    nn = torch.nn

    def block(i, o, pool):
        return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(pool)]

    class Crnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(*block(1, 32, 2), *block(32, 64, 2), *block(64, 128, (2, 1)),
                                     *block(128, 128, (4, 1)))
            self.rnn = nn.LSTM(128, 96, bidirectional=True, batch_first=True)
            self.out = nn.Linear(192, 80)

        def forward(self, image):
            f = self.cnn(image).squeeze(2).permute(0, 2, 1)
            h, _ = self.rnn(f)
            return self.out(h).log_softmax(-1)
    return Crnn().eval(), {"image": torch.randn(1, 1, 32, 128)}


def byte_conv_classifier():
    """Content classifier over raw bytes: embedding, strided 1-D convs, a slice, max pooling."""
    torch = _seeded()
    nn = torch.nn

    class Bytes(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(257, 16)
            self.conv = nn.Conv1d(16, 128, 16, stride=4)
            self.conv2 = nn.Conv1d(128, 128, 8, stride=4)
            self.out = nn.Linear(128, 20)

        def forward(self, data):
            x = self.emb(data).transpose(1, 2)
            x = torch.relu(self.conv(x))[:, :, 1:-1]
            x = torch.relu(self.conv2(x)).amax(-1)
            return self.out(x)
    return Bytes().eval(), {"data": torch.randint(0, 257, (1, 4096))}


def pix2pix_unet():
    """An image-to-image U-Net (pix2pix): 4x4 stride-2 convolutions down, 4x4 stride-2 transposed
    convolutions up (padding 1), skip connections concatenated, tanh out."""
    torch = _seeded()
    nn = torch.nn

    def down(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2))

    def up(cin, cout):
        return nn.Sequential(nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.downs = nn.ModuleList([down(3, 32), down(32, 64), down(64, 128), down(128, 256), down(256, 256)])
            self.ups = nn.ModuleList([up(256, 256), up(512, 128), up(256, 64), up(128, 32)])
            self.out = nn.ConvTranspose2d(64, 3, 4, 2, 1)

        def forward(self, image):
            skips, x = [], image
            for d in self.downs:
                x = d(x)
                skips.append(x)
            for u, skip in zip(self.ups, reversed(skips[:-1])):
                x = torch.cat([u(x), skip], 1)
            return torch.tanh(self.out(x))
    return UNet().eval(), {"image": torch.randn(1, 3, 128, 128)}


def dcgan_generator():
    """A DCGAN generator: a 100-d code to a 64x64 image by 4x4 transposed convolutions (stride 2,
    padding 1), batch-norm and ReLU, tanh out."""
    torch = _seeded()
    nn = torch.nn

    def up(cin, cout, stride=2, pad=1):
        return [nn.ConvTranspose2d(cin, cout, 4, stride, pad, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
    net = nn.Sequential(*up(100, 512, 1, 0), *up(512, 256), *up(256, 128), *up(128, 64),
                        nn.ConvTranspose2d(64, 3, 4, 2, 1, bias=False), nn.Tanh())
    return net.eval(), {"code": torch.randn(1, 100, 1, 1)}


def melgan_vocoder():
    """A MelGAN-style vocoder: 80 mel bands to a waveform through 1-D transposed convolutions
    (kernel 16 stride 8, then kernel 4 stride 2, padding half the stride), dilated residual 1-D
    convolutions, leaky ReLU, tanh out."""
    torch = _seeded()
    nn = torch.nn

    class Residual(nn.Module):
        def __init__(self, channels, dilation):
            super().__init__()
            self.block = nn.Sequential(nn.LeakyReLU(0.2), nn.Conv1d(channels, channels, 3, dilation=dilation,
                                                                     padding=dilation),
                                       nn.LeakyReLU(0.2), nn.Conv1d(channels, channels, 1))

        def forward(self, x):
            return x + self.block(x)

    def stage(cin, cout, kernel, stride):
        return [nn.LeakyReLU(0.2), nn.ConvTranspose1d(cin, cout, kernel, stride, padding=(kernel - stride) // 2),
                *(Residual(cout, 3 ** i) for i in range(3))]
    net = nn.Sequential(nn.Conv1d(80, 256, 7, padding=3), *stage(256, 128, 16, 8), *stage(128, 64, 16, 8),
                        *stage(64, 32, 4, 2), *stage(32, 16, 4, 2), nn.LeakyReLU(0.2),
                        nn.Conv1d(16, 1, 7, padding=3), nn.Tanh())
    return net.eval(), {"mel": torch.randn(1, 80, 32)}


def yolo_nano():
    """A YOLOv5n-style detector: Conv-BN-SiLU, C3 blocks, SPPF, a PAN neck with nearest upsampling
    and concatenation, three detection heads decoded with a sigmoid and grids."""
    torch = _seeded()
    nn = torch.nn

    class Conv(nn.Module):
        def __init__(self, i, o, k=1, s=1):
            super().__init__()
            pad = 2 if k == 6 else k // 2  # YOLOv5's stem: a 6x6 stride-2 conv padded by 2
            self.conv, self.bn, self.act = nn.Conv2d(i, o, k, s, pad, bias=False), nn.BatchNorm2d(o), nn.SiLU()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c, shortcut=True):
            super().__init__()
            self.a, self.b, self.add = Conv(c, c, 1), Conv(c, c, 3), shortcut

        def forward(self, x):
            y = self.b(self.a(x))
            return x + y if self.add else y

    class C3(nn.Module):
        def __init__(self, i, o, n=1, shortcut=True):
            super().__init__()
            h = o // 2
            self.cv1, self.cv2, self.cv3 = Conv(i, h), Conv(i, h), Conv(2 * h, o)
            self.m = nn.Sequential(*[Bottleneck(h, shortcut) for _ in range(n)])

        def forward(self, x):
            return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], 1))

    class Sppf(nn.Module):
        def __init__(self, i, o):
            super().__init__()
            self.cv1, self.cv2, self.pool = Conv(i, i // 2), Conv(i * 2, o), nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            x = self.cv1(x)
            a = self.pool(x)
            b = self.pool(a)
            return self.cv2(torch.cat([x, a, b, self.pool(b)], 1))

    class Yolo(nn.Module):
        def __init__(self, classes=20):
            super().__init__()
            self.no = classes + 5
            self.b0 = nn.Sequential(Conv(3, 16, 6, 2), Conv(16, 32, 3, 2), C3(32, 32), Conv(32, 64, 3, 2), C3(64, 64, 2))
            self.b1 = nn.Sequential(Conv(64, 128, 3, 2), C3(128, 128, 3))
            self.b2 = nn.Sequential(Conv(128, 256, 3, 2), C3(256, 256), Sppf(256, 256))
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.h1, self.c1 = Conv(256, 128), C3(256, 128, shortcut=False)
            self.h2, self.c2 = Conv(128, 64), C3(128, 64, shortcut=False)
            self.d1, self.c3 = Conv(64, 64, 3, 2), C3(128, 128, shortcut=False)
            self.d2, self.c4 = Conv(128, 128, 3, 2), C3(256, 256, shortcut=False)
            self.heads = nn.ModuleList(nn.Conv2d(c, 3 * self.no, 1) for c in (64, 128, 256))

        def forward(self, x):
            p3 = self.b0(x)
            p4 = self.b1(p3)
            p5 = self.b2(p4)
            t5 = self.h1(p5)
            n4 = self.c1(torch.cat([self.up(t5), p4], 1))
            t4 = self.h2(n4)
            n3 = self.c2(torch.cat([self.up(t4), p3], 1))
            m4 = self.c3(torch.cat([self.d1(n3), t4], 1))
            m5 = self.c4(torch.cat([self.d2(m4), t5], 1))
            outs = []
            for feat, head, stride in zip((n3, m4, m5), self.heads, (8, 16, 32)):
                b, _, h, w = feat.shape
                y = head(feat).view(b, 3, self.no, h, w).permute(0, 1, 3, 4, 2).sigmoid()
                gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
                grid = torch.stack((gx, gy), -1).view(1, 1, h, w, 2).float()
                xy = (y[..., :2] * 2 - 0.5 + grid) * stride
                outs.append(torch.cat([xy, y[..., 2:]], -1).view(b, -1, self.no))
            return torch.cat(outs, 1)
    return Yolo().eval(), _image((1, 3, 320, 320))


def text_detector_dbnet():
    """A DBNet-style text detector: a small ResNet-like encoder, an FPN with nearest upsampling, a
    probability head upsampled by two transposed convolutions."""
    torch = _seeded()
    nn = torch.nn

    def cbr(i, o, s=1):
        return nn.Sequential(nn.Conv2d(i, o, 3, s, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU())

    class Db(nn.Module):
        def __init__(self):
            super().__init__()
            self.s1, self.s2, self.s3, self.s4 = cbr(3, 16, 2), cbr(16, 32, 2), cbr(32, 64, 2), cbr(64, 96, 2)
            self.l2, self.l3, self.l4 = nn.Conv2d(32, 32, 1), nn.Conv2d(64, 32, 1), nn.Conv2d(96, 32, 1)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.head = nn.Sequential(cbr(96, 32), nn.ConvTranspose2d(32, 16, 2, 2), nn.BatchNorm2d(16), nn.ReLU(),
                                      nn.ConvTranspose2d(16, 1, 2, 2), nn.Sigmoid())

        def forward(self, x):
            c2 = self.s2(self.s1(x))
            c3 = self.s3(c2)
            c4 = self.s4(c3)
            p4 = self.l4(c4)
            p3 = self.l3(c3) + self.up(p4)
            p2 = self.l2(c2) + self.up(p3)
            fused = torch.cat([p2, self.up(p3), self.up(self.up(p4))], 1)
            return self.head(fused)
    return Db().eval(), _image((1, 3, 256, 256))


def conformer_encoder():
    """A Conformer speech encoder block (ASR): two strided 3x3 convs subsampling 80 filterbank
    features, half-step feed-forwards, self-attention, and the conv module (pointwise conv, GLU,
    31-tap depthwise conv1d, batch norm, SiLU). Its exported graph squeezes an axis spelt -1, which
    TVM's layout conversion cannot take (``explorer.passes.layout``)."""
    torch = _seeded()
    nn = torch.nn

    def ffn(d):
        return nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))

    class Conformer(nn.Module):
        def __init__(self, d=144, heads=4):
            super().__init__()
            self.sub = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU())
            self.proj = nn.Linear(d * 19, d)
            self.ff1, self.ff2 = ffn(d), ffn(d)
            self.norm_att, self.att = nn.LayerNorm(d), nn.MultiheadAttention(d, heads, batch_first=True)
            self.norm_conv, self.pw1, self.pw2 = nn.LayerNorm(d), nn.Conv1d(d, 2 * d, 1), nn.Conv1d(d, d, 1)
            self.dw, self.bn = nn.Conv1d(d, d, 31, padding=15, groups=d), nn.BatchNorm1d(d)
            self.norm_out = nn.LayerNorm(d)

        def forward(self, features):
            x = self.sub(features.unsqueeze(1))
            b, c, t, f = x.shape
            x = self.proj(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
            x = x + 0.5 * self.ff1(x)
            y = self.norm_att(x)
            x = x + self.att(y, y, y, need_weights=False)[0]
            y = nn.functional.glu(self.pw1(self.norm_conv(x).transpose(1, 2)), dim=1)
            x = x + self.pw2(nn.functional.silu(self.bn(self.dw(y)))).transpose(1, 2)
            return self.norm_out(x + 0.5 * self.ff2(x))
    return Conformer().eval(), {"features": torch.randn(1, 200, 80)}


def llama_decoder():
    """A LLaMA-style decoder (2 layers, 256 wide): RMSNorm, rotary position embeddings, grouped-query
    attention (8 query heads over 2 key/value heads) with a causal mask, a SiLU-gated MLP."""
    torch = _seeded()
    nn = torch.nn

    class RMSNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    class Block(nn.Module):
        def __init__(self, d=256, heads=8, kv_heads=2, hidden=688):
            super().__init__()
            self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
            self.q, self.o = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            self.k, self.v = nn.Linear(d, kv_heads * self.hd, bias=False), nn.Linear(d, kv_heads * self.hd, bias=False)
            self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.down = nn.Linear(hidden, d, bias=False)
            self.n1, self.n2 = RMSNorm(d), RMSNorm(d)

        def forward(self, x, cos, sin):
            b, t, d = x.shape
            y = self.n1(x)
            q = rotate(self.q(y).view(b, t, self.heads, self.hd).transpose(1, 2), cos, sin)
            k = rotate(self.k(y).view(b, t, self.kv_heads, self.hd).transpose(1, 2), cos, sin)
            v = self.v(y).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
            k, v = (z.repeat_interleave(self.heads // self.kv_heads, 1) for z in (k, v))
            mask = torch.triu(torch.full((t, t), float("-inf")), 1)
            a = torch.softmax(q @ k.transpose(-1, -2) / self.hd ** 0.5 + mask, -1) @ v
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            y = self.n2(x)
            return x + self.down(nn.functional.silu(self.gate(y)) * self.up(y))

    class Llama(nn.Module):
        def __init__(self, vocab=2000, d=256, layers=2, context=64):
            super().__init__()
            self.embed, self.norm = nn.Embedding(vocab, d), RMSNorm(d)
            self.blocks = nn.ModuleList([Block(d) for _ in range(layers)])
            self.head = nn.Linear(d, vocab, bias=False)
            hd = d // 8
            freq = torch.outer(torch.arange(context).float(), 1.0 / 10000 ** (torch.arange(0, hd, 2).float() / hd))
            angles = torch.cat([freq, freq], -1)
            self.register_buffer("cos", angles.cos())
            self.register_buffer("sin", angles.sin())

        def forward(self, input_ids):
            t = input_ids.shape[1]
            x = self.embed(input_ids)
            for block in self.blocks:
                x = block(x, self.cos[:t], self.sin[:t])
            return self.head(self.norm(x))
    return Llama().eval(), {"input_ids": torch.randint(0, 2000, (1, 64))}


def style_transfer():
    """A fast neural style-transfer network (Johnson et al.): reflection padding, instance norm,
    five residual blocks, nearest upsampling, and a last 9x9 convolution to the image's 3 channels."""
    torch = _seeded()
    nn = torch.nn

    def layer(i, o, k, stride):
        return [nn.ReflectionPad2d(k // 2), nn.Conv2d(i, o, k, stride), nn.InstanceNorm2d(o, affine=True), nn.ReLU()]

    class Residual(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.body = nn.Sequential(*layer(c, c, 3, 1)[:-1], nn.ReLU(), *layer(c, c, 3, 1)[:-1])

        def forward(self, x):
            return x + self.body(x)

    up = nn.Upsample(scale_factor=2, mode="nearest")
    net = nn.Sequential(*layer(3, 32, 9, 1), *layer(32, 64, 3, 2), *layer(64, 128, 3, 2),
                        *[Residual(128) for _ in range(5)], up, *layer(128, 64, 3, 1), up, *layer(64, 32, 3, 1),
                        nn.ReflectionPad2d(4), nn.Conv2d(32, 3, 9))
    return net.eval(), {"input": torch.randn(1, 3, 256, 256)}


def _tv(name, family, **kw):
    return Arch(name, family, "torchvision", torchvision_classifier(name), **kw)


def _timm(name, family, **kw):
    return Arch(f"timm_{name}", family, "timm", timm_model(name), **kw)


ARCHITECTURES: tuple[Arch, ...] = (
    _tv("resnet18", "cnn"),
    _tv("resnet50", "cnn", exporter="torchscript", dynamic_batch=True, shapes={"input": "1x3x224x224"}),
    _tv("mobilenet_v2", "mobile cnn"),
    _tv("mobilenet_v3_small", "mobile cnn"),
    _tv("efficientnet_b0", "mobile cnn"),
    _tv("squeezenet1_1", "cnn", exporter="torchscript"),
    _tv("shufflenet_v2_x1_0", "mobile cnn"),
    _tv("densenet121", "cnn"),
    _tv("googlenet", "cnn"),
    _tv("regnet_y_400mf", "cnn"),
    _tv("mnasnet0_5", "mobile cnn", exporter="torchscript", dynamic_batch=True, shapes={"input": "1x3x224x224"}),
    _tv("convnext_tiny", "cnn"),
    _tv("swin_t", "vision transformer"),
    Arch("lraspp_mobilenet_v3_large", "segmentation", "torchvision", torchvision_segmenter("lraspp_mobilenet_v3_large")),
    Arch("deeplabv3_mobilenet_v3_large", "segmentation", "torchvision",
         torchvision_segmenter("deeplabv3_mobilenet_v3_large")),
    Arch("ssdlite320_heads", "detection", "torchvision", ssdlite_heads),
    Arch("fasterrcnn_mnv3_fpn_rpn", "detection", "torchvision", fasterrcnn_fpn_rpn),
    _timm("convnext_atto", "cnn"),
    _timm("regnetx_002", "cnn"),
    _timm("efficientnet_lite0", "mobile cnn"),
    _timm("ghostnet_100", "mobile cnn"),
    _timm("lcnet_050", "mobile cnn"),
    Arch("timm_mobilevit_xxs", "vision transformer", "timm", timm_model("mobilevit_xxs", (1, 3, 256, 256))),
    _timm("vit_tiny_patch16_224", "vision transformer"),
    _timm("deit_tiny_patch16_224", "vision transformer", exporter="torchscript"),
    _timm("levit_128s", "vision transformer"),
    _timm("repvit_m0_9", "mobile cnn"),
    Arch("bert_small", "transformer", "transformers", bert_small),
    Arch("gpt2_small", "transformer", "transformers", gpt2_small),
    Arch("hf_vit_small", "vision transformer", "transformers", hf_vit_small),
    Arch("whisper_encoder_small", "speech", "transformers", whisper_encoder_small),
    Arch("wav2vec2_small", "speech", "transformers", wav2vec2_small),
    Arch("conformer_encoder", "speech", "custom", conformer_encoder),
    Arch("llama_decoder", "transformer", "custom", llama_decoder),
    Arch("lstm_tagger", "recurrent", "custom", lstm_tagger),
    Arch("gru_tagger", "recurrent", "custom", gru_tagger, exporter="torchscript"),
    Arch("gru_voice_activity", "recurrent", "custom", gru_voice_activity),
    Arch("crnn", "recurrent", "custom", crnn, exporter="torchscript"),
    Arch("byte_conv_classifier", "1-d cnn", "custom", byte_conv_classifier),
    Arch("yolo_nano", "detection", "custom", yolo_nano, exporter="torchscript"),
    Arch("dbnet_text_detector", "detection", "custom", text_detector_dbnet),
    Arch("r3d_18", "video", "torchvision", torchvision_video("r3d_18")),
    Arch("pix2pix_unet", "image to image", "custom", pix2pix_unet),
    Arch("dcgan_generator", "generative", "custom", dcgan_generator),
    Arch("style_transfer", "image to image", "custom", style_transfer),
    Arch("melgan_vocoder", "speech", "custom", melgan_vocoder),
    Arch("onnx_inception_v1", "cnn", "onnx-package", package_file="light/light_inception_v1.onnx"),
    Arch("onnx_inception_v2", "cnn", "onnx-package", package_file="light/light_inception_v2.onnx"),
    Arch("onnx_shufflenet", "mobile cnn", "onnx-package", package_file="light/light_shufflenet.onnx"),
    Arch("onnx_zfnet512", "cnn", "onnx-package", package_file="light/light_zfnet512.onnx"),
    Arch("onnx_densenet121", "cnn", "onnx-package", package_file="light/light_densenet121.onnx"),
    Arch("resnet18_int8_qdq", "quantized", "quantized", base="resnet18", quantize="qdq"),
    Arch("mobilenet_v2_int8_qdq", "quantized", "quantized", base="mobilenet_v2", quantize="qdq"),
    Arch("bert_small_int8_dynamic", "quantized", "quantized", base="bert_small", quantize="dynamic"),
    Arch("lstm_tagger_int8_dynamic", "quantized", "quantized", base="lstm_tagger", quantize="dynamic"),
)


def by_name(name: str, archs: tuple[Arch, ...] = ARCHITECTURES) -> Arch:
    for arch in archs:
        if arch.name == name:
            return arch
    raise KeyError(f"no model named {name!r}; known: {', '.join(a.name for a in archs)}")
