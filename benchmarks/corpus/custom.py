"""The corpus's hand-written models: recurrent taggers, a text recognizer, 1-D and upsampling
networks, detectors, a Conformer encoder, a LLaMA-style decoder and a style-transfer net, each a
torch module with seeded weights and its example inputs (the registry is
:mod:`benchmarks.corpus.architectures`)."""

from __future__ import annotations

IMAGE = (1, 3, 224, 224)


def seeded():
    """torch, its generator seeded (every corpus model's weights and inputs are the same each build)."""
    import torch

    torch.manual_seed(0)
    return torch


def image(shape=IMAGE):
    torch = seeded()
    return {"input": torch.randn(*shape)}


def lstm_tagger():
    """Token tagger: embedding, 2-layer bidirectional LSTM, linear."""
    torch = seeded()

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
    torch = seeded()

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
    torch = seeded()

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
    torch = seeded()
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
    torch = seeded()
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
    torch = seeded()
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
    torch = seeded()
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
    torch = seeded()
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
    torch = seeded()
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
    return Yolo().eval(), image((1, 3, 320, 320))


def text_detector_dbnet():
    """A DBNet-style text detector: a small ResNet-like encoder, an FPN with nearest upsampling, a
    probability head upsampled by two transposed convolutions."""
    torch = seeded()
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
    return Db().eval(), image((1, 3, 256, 256))


def conformer_encoder():
    """A Conformer speech encoder block (ASR): two strided 3x3 convs subsampling 80 filterbank
    features, half-step feed-forwards, self-attention, and the conv module (pointwise conv, GLU,
    31-tap depthwise conv1d, batch norm, SiLU). Its exported graph squeezes an axis spelt -1, which
    TVM's layout conversion cannot take (``explorer.passes.layout``)."""
    torch = seeded()
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
    torch = seeded()
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
    torch = seeded()
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
