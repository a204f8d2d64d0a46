"""The held-out set's custom architectures (torch modules written here, seeded, no download): what
:mod:`benchmarks.outside.architectures` exports beside the torchvision, timm and transformers ones."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

class FNet(nn.Module):
    """FNet: token mixing by a 2-D Fourier transform (real part), then a feed-forward, twice."""

    def __init__(self, d=128, n=2, vocab=1000):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(
            [nn.ModuleDict(dict(n1=nn.LayerNorm(d), n2=nn.LayerNorm(d), ff=nn.Sequential(
                nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)))) for _ in range(n)]
        )

    def forward(self, input_ids):
        h = self.emb(input_ids)
        for b in self.blocks:
            h = b["n1"](h + torch.fft.fft2(h.to(torch.complex64)).real)
            h = b["n2"](h + b["ff"](h))
        return h


class MoE(nn.Module):
    """A mixture-of-experts feed-forward: a router picks each token's top 2 of 4 experts (data-
    dependent routing, computed densely as a weighted sum over the experts' outputs)."""

    def __init__(self, d=128, experts=4, hidden=256):
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) * 0.05)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) * 0.05)

    def forward(self, x):  # [tokens, d]
        logits = self.router(x)
        top, idx = logits.topk(2, dim=-1)
        gate = torch.zeros_like(logits).scatter(-1, idx, top.softmax(-1))  # [tokens, experts]
        h = F.gelu(torch.einsum("td,edh->eth", x, self.w1))
        y = torch.einsum("eth,ehd->etd", h, self.w2)
        return torch.einsum("te,etd->td", gate, y)


class SelectiveScan(nn.Module):
    """A Mamba-style block: input-dependent decay and a scan over 32 time steps, unrolled."""

    def __init__(self, d=64, state=16, steps=32):
        super().__init__()
        self.steps = steps
        self.inp = nn.Linear(d, 2 * d)
        self.dt = nn.Linear(d, d)
        self.b = nn.Linear(d, state)
        self.c = nn.Linear(d, state)
        self.a = nn.Parameter(-torch.rand(d, state))
        self.out = nn.Linear(d, d)

    def forward(self, x):  # [1, steps, d]
        u, z = self.inp(x).chunk(2, -1)
        dt = F.softplus(self.dt(u))
        bmat, cmat = self.b(u), self.c(u)
        h = torch.zeros(x.shape[0], u.shape[-1], self.a.shape[1])
        ys = []
        for t in range(self.steps):
            decay = torch.exp(dt[:, t, :, None] * self.a)
            h = decay * h + dt[:, t, :, None] * bmat[:, t, None, :] * u[:, t, :, None]
            ys.append((h * cmat[:, t, None, :]).sum(-1))
        return self.out(torch.stack(ys, 1) * F.silu(z))


class NeRF(nn.Module):
    """A NeRF MLP over 4096 rays' samples: sine/cosine positional encoding, a skip, density and colour."""

    def __init__(self, freqs=10, width=128):
        super().__init__()
        self.register_buffer("bands", 2.0 ** torch.arange(freqs))
        enc = 3 + 6 * freqs
        self.l1 = nn.Sequential(nn.Linear(enc, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.l2 = nn.Sequential(nn.Linear(width + enc, width), nn.ReLU(), nn.Linear(width, width + 1))
        self.rgb = nn.Linear(width, 3)

    def forward(self, points):  # [n, 3]
        x = points[..., None] * self.bands
        enc = torch.cat([points, x.sin().flatten(1), x.cos().flatten(1)], -1)
        h = self.l2(torch.cat([self.l1(enc), enc], -1))
        return torch.cat([torch.sigmoid(self.rgb(h[:, 1:])), F.relu(h[:, :1])], -1)


class KNNPoints(nn.Module):
    """A point-cloud layer over k nearest neighbours: pairwise distances, top-k, gathered features."""

    def __init__(self, k=16, c=64):
        super().__init__()
        self.k = k
        self.lift = nn.Linear(3, c)
        self.mlp = nn.Sequential(nn.Linear(2 * c, c), nn.ReLU(), nn.Linear(c, c))

    def forward(self, pts):  # [n, 3]
        f = self.lift(pts)
        d = torch.cdist(pts, pts)
        idx = d.topk(self.k, largest=False).indices  # [n, k]
        nb = f[idx]  # [n, k, c]
        edge = torch.cat([nb - f[:, None], f[:, None].expand_as(nb)], -1)
        return self.mlp(edge).max(1).values


class ResT(nn.Module):
    def __init__(self, c, t):
        super().__init__()
        self.n1 = nn.GroupNorm(32, c)
        self.c1 = nn.Conv2d(c, c, 3, padding=1)
        self.t = nn.Linear(t, c)
        self.n2 = nn.GroupNorm(32, c)
        self.c2 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x, e):
        h = self.c1(F.silu(self.n1(x))) + self.t(F.silu(e))[:, :, None, None]
        return x + self.c2(F.silu(self.n2(h)))


class Attn2d(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n = nn.GroupNorm(32, c)
        self.qkv = nn.Conv2d(c, 3 * c, 1)
        self.o = nn.Conv2d(c, c, 1)

    def forward(self, x):
        B, C, H, W = x.shape
        q, k, v = self.qkv(self.n(x)).reshape(B, 3, C, H * W).unbind(1)
        a = torch.softmax(q.transpose(1, 2) @ k / math.sqrt(C), -1)
        return x + self.o((v @ a.transpose(1, 2)).reshape(B, C, H, W))


class TinyUNet(nn.Module):
    def __init__(self, c=64, t=128):
        super().__init__()
        self.t = t
        self.mlp = nn.Sequential(nn.Linear(t, t), nn.SiLU(), nn.Linear(t, t))
        self.inp = nn.Conv2d(4, c, 3, padding=1)
        self.r1 = ResT(c, t)
        self.down = nn.Conv2d(c, 2 * c, 3, 2, 1)
        self.r2 = ResT(2 * c, t)
        self.at = Attn2d(2 * c)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.uc = nn.Conv2d(2 * c, c, 3, padding=1)
        self.r3 = ResT(c, t)
        self.out = nn.Conv2d(c, 4, 3, padding=1)

    def forward(self, x, ts):
        half = self.t // 2
        fr = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
        a = ts[:, None].float() * fr[None]
        e = self.mlp(torch.cat([a.sin(), a.cos()], -1))
        h = self.r1(self.inp(x), e)
        d = self.at(self.r2(self.down(h), e))
        u = self.r3(self.uc(self.up(d)) + h, e)
        return self.out(F.silu(u))


class PointNet(nn.Module):
    def __init__(self, k=16):
        super().__init__()

        def blk(i, o):
            return nn.Sequential(nn.Conv1d(i, o, 1), nn.BatchNorm1d(o), nn.ReLU())

        self.tnet = nn.Sequential(blk(3, 64), blk(64, 128), blk(128, 512))
        self.tfc = nn.Linear(512, 9)
        self.f = nn.Sequential(blk(3, 64), blk(64, 128), blk(128, 1024))
        self.head = nn.Sequential(nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, k))

    def forward(self, pts):
        t = self.tfc(self.tnet(pts).amax(-1)).view(-1, 3, 3) + torch.eye(3)
        x = torch.bmm(t, pts)
        return self.head(self.f(x).amax(-1))


class TCN(nn.Module):
    def __init__(self, c=64, n=6):
        super().__init__()
        self.inp = nn.Conv1d(16, c, 1)
        self.convs = nn.ModuleList([nn.Conv1d(c, c, 3, dilation=2**i, padding=2 * 2**i) for i in range(n)])
        self.out = nn.Conv1d(c, 8, 1)

    def forward(self, x):
        h = self.inp(x)
        for c in self.convs:
            y = c(h)[:, :, : -c.padding[0]]
            h = h + F.relu(y)
        return self.out(h)


class Mixer(nn.Module):
    def __init__(self, d=192, p=16, n=4, tok=196):
        super().__init__()
        self.stem = nn.Conv2d(3, d, p, p)
        self.blocks = nn.ModuleList(
            [
                nn.ModuleDict(
                    dict(
                        n1=nn.LayerNorm(d),
                        t1=nn.Linear(tok, 384),
                        t2=nn.Linear(384, tok),
                        n2=nn.LayerNorm(d),
                        c1=nn.Linear(d, 768),
                        c2=nn.Linear(768, d),
                    )
                )
                for _ in range(n)
            ]
        )
        self.n = nn.LayerNorm(d)
        self.head = nn.Linear(d, 100)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        for b in self.blocks:
            x = x + b["t2"](F.gelu(b["t1"](b["n1"](x).transpose(1, 2)))).transpose(1, 2)
            x = x + b["c2"](F.gelu(b["c1"](b["n2"](x))))
        return self.head(self.n(x).mean(1))


class ESPCN(nn.Module):
    def __init__(self, r=3):
        super().__init__()
        self.f = nn.Sequential(
            nn.Conv2d(1, 64, 5, padding=2),
            nn.Tanh(),
            nn.Conv2d(64, 32, 3, padding=1),
            nn.Tanh(),
            nn.Conv2d(32, r * r, 3, padding=1),
        )
        self.ps = nn.PixelShuffle(r)

    def forward(self, x):
        return torch.sigmoid(self.ps(self.f(x)))


class QBlock(nn.Module):
    def __init__(self, i, o, k, n=3):
        super().__init__()
        layers = []
        for j in range(n):
            c = i if j == 0 else o
            layers += [nn.Conv1d(c, c, k, padding=k // 2, groups=c), nn.Conv1d(c, o, 1), nn.BatchNorm1d(o)] + (
                [nn.ReLU()] if j < n - 1 else []
            )
        self.b = nn.Sequential(*layers)
        self.res = nn.Sequential(nn.Conv1d(i, o, 1), nn.BatchNorm1d(o))

    def forward(self, x):
        return F.relu(self.b(x) + self.res(x))


class QuartzNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Sequential(
            nn.Conv1d(64, 64, 33, 2, 16, groups=64), nn.Conv1d(64, 256, 1), nn.BatchNorm1d(256), nn.ReLU()
        )
        self.bs = nn.Sequential(
            QBlock(256, 256, 33), QBlock(256, 256, 39), QBlock(256, 512, 51), QBlock(512, 512, 63), QBlock(512, 512, 75)
        )
        self.out = nn.Conv1d(512, 29, 1)

    def forward(self, mel):
        return self.out(self.bs(self.c1(mel))).log_softmax(1)


class DETRHead(nn.Module):
    def __init__(self, d=128, q=50):
        super().__init__()
        self.bb = nn.Sequential(
            nn.Conv2d(3, 64, 7, 4, 3), nn.ReLU(), nn.Conv2d(64, d, 3, 2, 1), nn.ReLU(), nn.Conv2d(d, d, 3, 2, 1)
        )
        self.q = nn.Parameter(torch.randn(1, q, d))
        self.pos = nn.Parameter(torch.randn(1, 256, d))
        self.dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(d, 4, 256, batch_first=True, dropout=0.0), 2)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 256, batch_first=True, dropout=0.0), 2)
        self.cls = nn.Linear(d, 21)
        self.box = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 4))

    def forward(self, x):
        f = self.bb(x).flatten(2).transpose(1, 2)
        m = self.enc(f + self.pos)
        h = self.dec(self.q.expand(x.shape[0], -1, -1), m)
        return self.cls(h), self.box(h).sigmoid()


class HRLite(nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, c, 3, 2, 1),
            nn.BatchNorm2d(c),
            nn.ReLU(),
            nn.Conv2d(c, c, 3, 2, 1),
            nn.BatchNorm2d(c),
            nn.ReLU(),
        )
        self.b1 = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.ReLU())
        self.d2 = nn.Conv2d(c, 2 * c, 3, 2, 1)
        self.b2 = nn.Sequential(nn.Conv2d(2 * c, 2 * c, 3, 1, 1), nn.ReLU())
        self.d3 = nn.Conv2d(2 * c, 4 * c, 3, 2, 1)
        self.b3 = nn.Sequential(nn.Conv2d(4 * c, 4 * c, 3, 1, 1), nn.ReLU())
        self.f2 = nn.Conv2d(2 * c, c, 1)
        self.f3 = nn.Conv2d(4 * c, c, 1)
        self.head = nn.Conv2d(3 * c, 17, 1)

    def forward(self, x):
        x = self.stem(x)
        a = self.b1(x)
        b = self.b2(self.d2(a))
        c3 = self.b3(self.d3(b))
        up2 = F.interpolate(self.f2(b), size=a.shape[-2:], mode="bilinear", align_corners=False)
        up3 = F.interpolate(self.f3(c3), size=a.shape[-2:], mode="bilinear", align_corners=True)
        return self.head(torch.cat([a, up2, up3], 1))


class ConvMixer(nn.Module):
    def __init__(self, d=256, depth=6, k=9, p=7):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, d, p, p), nn.GELU(), nn.BatchNorm2d(d))
        self.blocks = nn.ModuleList(
            [
                nn.ModuleDict(
                    dict(
                        dw=nn.Sequential(nn.Conv2d(d, d, k, groups=d, padding="same"), nn.GELU(), nn.BatchNorm2d(d)),
                        pw=nn.Sequential(nn.Conv2d(d, d, 1), nn.GELU(), nn.BatchNorm2d(d)),
                    )
                )
                for _ in range(depth)
            ]
        )
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b["pw"](x + b["dw"](x))
        return self.head(x.mean((2, 3)))


class ModConv(nn.Module):
    """StyleGAN2 modulated conv: weights computed from the style at run time, grouped per sample."""

    def __init__(self, i, o, w=128):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(o, i, 3, 3))
        self.aff = nn.Linear(w, i)
        self.o, self.i = o, i

    def forward(self, x, wl):
        b = x.shape[0]
        st = self.aff(wl).view(b, 1, self.i, 1, 1)
        wt = self.weight.unsqueeze(0) * st
        d = torch.rsqrt((wt**2).sum([2, 3, 4]) + 1e-8)
        wt = wt * d.view(b, self.o, 1, 1, 1)
        y = F.conv2d(x.reshape(1, b * self.i, *x.shape[2:]), wt.reshape(b * self.o, self.i, 3, 3), padding=1, groups=b)
        return F.leaky_relu(y.reshape(b, self.o, *y.shape[2:]), 0.2)


class StyleGen(nn.Module):
    def __init__(self):
        super().__init__()
        self.map = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(128, 128), nn.LeakyReLU(0.2))])
        self.const = nn.Parameter(torch.randn(1, 128, 8, 8))
        self.c1 = ModConv(128, 128)
        self.c2 = ModConv(128, 64)
        self.c3 = ModConv(64, 32)
        self.rgb = nn.Conv2d(32, 3, 1)

    def forward(self, z):
        w = self.map(z)
        x = self.c1(self.const, w)
        x = self.c2(F.interpolate(x, scale_factor=2.0, mode="bilinear"), w)
        x = self.c3(F.interpolate(x, scale_factor=2.0, mode="bilinear"), w)
        return self.rgb(x)


class DLRM(nn.Module):
    def __init__(self, tables=8, rows=1000, d=32):
        super().__init__()
        self.emb = nn.ModuleList([nn.EmbeddingBag(rows, d, mode="sum") for _ in range(tables)])
        self.bot = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, d), nn.ReLU())
        n = tables + 1
        self.top = nn.Sequential(nn.Linear(d + n * (n - 1) // 2, 128), nn.ReLU(), nn.Linear(128, 1))
        self.n = n

    def forward(self, dense, sparse):
        x = self.bot(dense)
        feats = [x] + [e(sparse[:, i, :]) for i, e in enumerate(self.emb)]
        T = torch.stack(feats, 1)
        Z = torch.bmm(T, T.transpose(1, 2))
        li, lj = torch.tril_indices(self.n, self.n, -1)
        return torch.sigmoid(self.top(torch.cat([x, Z[:, li, lj]], 1)))


class DFLHead(nn.Module):
    def __init__(self, c=64, reg=16, nc=80):
        super().__init__()
        self.bb = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1),
            nn.SiLU(),
            nn.Conv2d(32, c, 3, 2, 1),
            nn.SiLU(),
            nn.Conv2d(c, c, 3, 2, 1),
            nn.SiLU(),
        )
        self.box = nn.Conv2d(c, 4 * reg, 1)
        self.cls = nn.Conv2d(c, nc, 1)
        self.reg = reg
        self.register_buffer("proj", torch.arange(reg, dtype=torch.float32))

    def forward(self, x):
        f = self.bb(x)
        b, _, h, w = f.shape
        dist = self.box(f).view(b, 4, self.reg, h * w).softmax(2)
        dist = (dist * self.proj.view(1, 1, -1, 1)).sum(2)
        gy, gx = torch.meshgrid(
            torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij"
        )
        anchors = torch.stack([gx, gy], 0).view(1, 2, -1) + 0.5
        boxes = torch.cat([anchors - dist[:, :2], anchors + dist[:, 2:]], 1) * 8.0
        return boxes, self.cls(f).view(b, -1, h * w).sigmoid()


class CenterNetHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.bb = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU())
        self.hm = nn.Conv2d(64, 20, 1)

    def forward(self, x):
        h = torch.sigmoid(self.hm(self.bb(x)))
        m = F.max_pool2d(h, 3, 1, 1)
        return h * (m == h).float()


class GCN(nn.Module):
    def __init__(self, f=64, h=128, c=7):
        super().__init__()
        self.l1 = nn.Linear(f, h)
        self.l2 = nn.Linear(h, c)

    def forward(self, x, adj):
        deg = adj.sum(1)
        dinv = deg.clamp(min=1).rsqrt()
        a = dinv[:, None] * adj * dinv[None]
        return (a @ self.l2(F.relu(a @ self.l1(x)))).log_softmax(-1)


class NHWCNet(nn.Module):
    """Keras-style: NHWC input transposed once, a small CNN, softmax."""

    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1),
            nn.ReLU6(),
            nn.Conv2d(32, 32, 3, 1, 1, groups=32),
            nn.ReLU6(),
            nn.Conv2d(32, 64, 1),
            nn.ReLU6(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(self.f(x.permute(0, 3, 1, 2)).flatten(1)).softmax(-1)


class STFTNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("win", torch.hann_window(400))
        self.conv = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(16, 5)

    def forward(self, wav):
        spec = torch.stft(wav, 400, 160, window=self.win, return_complex=False)
        mag = (spec**2).sum(-1).clamp(min=1e-10).log()
        return self.fc(self.conv(mag.unsqueeze(1)).flatten(1))
