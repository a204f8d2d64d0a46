"""The kernel of an inverted-residual block's first half: a 1x1 expansion conv (with its bias and
activation) and the depthwise conv that reads it, as one PrimFunc whose blocks the default rule
(:mod:`explorer.schedule.defaults.expand_depthwise`) runs by bands of output rows.

The expansion is computed over the depthwise conv's *padded* map: its input is padded with zeros
(``input``), the product covers every padded pixel (``expand``), and the map (``map``) is the
activation inside and zero on the border. Every block then has a band of whole rows with no
border test in a loop (the first prototype, the expansion on the unpadded pixels with predicates,
ran 1.7x slower than the two kernels alone). The padded width is rounded up to a multiple of
:data:`EXPANSION_PIXELS` (the expansion's register tile: no tail); the extra columns are computed
and never read.

Blocks carry :data:`ROLE_ATTR` (their role) so that the rule finds them after FuseTIR has renamed
them; the depthwise block's consumers (bias, activation, a bf16 rounding) fuse in after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import te, tirx

ROLE_ATTR = "schedx.expand_depthwise"
INPUT, EXPAND, MAP, DEPTHWISE = "input", "expand", "map", "depthwise"
# the expansion's register tile in pixels (6 pixels x 2 vectors of channels: 12 accumulators);
# 6 divides 114, the padded width of a 112-wide map
EXPANSION_PIXELS = 6
OUT_EWISE_FUSABLE = 4  # TVM's kOutEWiseFusable: FuseOps fuses the depthwise conv's element-wise consumers


@dataclass(frozen=True)
class EpilogueStep:
    """One element-wise step of the expansion after its product: ``add`` a per-channel constant (an
    argument of the kernel), or ``max``/``min`` against a scalar."""

    op: str  # add, max, min
    value: float = 0.0

    def to_dict(self) -> dict:
        return {"op": self.op, "value": self.value}


def _ceil(v: int, m: int) -> int:
    return -(-v // m) * m


def expand_depthwise(x: te.Tensor, w1: te.Tensor, adds: list[te.Tensor], wd: te.Tensor, *,
                     steps: tuple[EpilogueStep, ...], strides: tuple[int, int],
                     padding: tuple[int, int, int, int]) -> te.Tensor:
    """``depthwise(act(conv1x1(x, w1)), wd)`` in NHWC (weights HWIO), without the depthwise
    conv's own epilogue; ``adds`` are the ``add`` steps' constants, in order."""
    n, h, w, ci = (int(d) for d in x.shape)
    co = int(w1.shape[3])
    kh, kw = int(wd.shape[0]), int(wd.shape[1])
    top, left, bottom, right = padding
    sh, sw = strides
    oh, ow = (h + top + bottom - kh) // sh + 1, (w + left + right - kw) // sw + 1
    hp, wp = h + top + bottom, _ceil(w + left + right, EXPANSION_PIXELS)

    def inside(yy, xx):
        return tirx.all(yy >= top, yy < top + h, xx >= left, xx < left + w)

    xp = te.compute((n, hp, wp, ci), lambda b, yy, xx, c: tirx.if_then_else(
        inside(yy, xx), x[b, yy - top, xx - left, c], tirx.const(0, x.dtype)), name="expand_input",
        attrs={ROLE_ATTR: INPUT})
    k = te.reduce_axis((0, ci), "k")
    prod = te.compute((n, hp, wp, co), lambda b, yy, xx, c: te.sum(xp[b, yy, xx, k] * w1[0, 0, k, c], axis=k),
                      name="expand", attrs={ROLE_ATTR: EXPAND})

    def act(b, yy, xx, c):
        v = prod[b, yy, xx, c]
        added = iter(adds)
        for step in steps:
            if step.op == "add":
                a = next(added)
                v = v + a[(0,) * (len(a.shape) - 1) + (c,)]
            elif step.op == "max":
                v = te.max(v, tirx.const(step.value, x.dtype))
            else:
                v = te.min(v, tirx.const(step.value, x.dtype))
        return tirx.if_then_else(inside(yy, xx), v, tirx.const(0, x.dtype))

    mp = te.compute((n, hp, wp, co), act, name="expand_map", attrs={ROLE_ATTR: MAP})
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    return te.compute((n, oh, ow, co), lambda b, yy, xx, c: te.sum(
        mp[b, yy * sh + ry, xx * sw + rx, c] * wd[ry, rx, 0, c], axis=[ry, rx]),
        name="depthwise", attrs={ROLE_ATTR: DEPTHWISE})


def expand_depthwise_func(x_shape, w1_shape, add_shapes, wd_shape, *, steps: tuple[EpilogueStep, ...],
                          strides: tuple[int, int], padding: tuple[int, int, int, int],
                          dtype: str = "float32") -> tvm.tirx.PrimFunc:
    """:func:`expand_depthwise` as a PrimFunc ``(x, w1, *adds, wd, y)`` (int64 indices, as
    ``BlockBuilder.call_te`` makes them), marked as a kernel its element-wise consumers fuse into."""
    x = te.placeholder([int(d) for d in x_shape], dtype, "x")
    w1 = te.placeholder([int(d) for d in w1_shape], dtype, "w1")
    adds = [te.placeholder([int(d) for d in s], dtype, f"bias{i}") for i, s in enumerate(add_shapes)]
    wd = te.placeholder([int(d) for d in wd_shape], dtype, "wd")
    y = expand_depthwise(x, w1, adds, wd, steps=steps, strides=strides, padding=padding)
    func = te.create_prim_func([x, w1, *adds, wd, y], "int64")
    return func.with_attr("op_pattern", OUT_EWISE_FUSABLE)


__all__ = ["DEPTHWISE", "EXPAND", "EXPANSION_PIXELS", "INPUT", "MAP", "ROLE_ATTR", "EpilogueStep",
           "expand_depthwise", "expand_depthwise_func"]
