"""``WinogradConv3x3``: a 3x3 convolution of stride 1 as Winograd's minimal filtering F(m x m, 3 x 3),
in matrix multiplications that the default schedules run near the machine's peak.

Lavin and Gray (2016) compute each m x m tile of a 3x3 convolution's output from an (m+2) x (m+2)
tile of its input in three linear steps: the input tile is transformed (``B^T d B``), multiplied
element by element with the transformed filter (``G g G^T``, computed once here: the weights are
constants) and summed over the input channels, and the result transformed back (``A^T M A``).
Summed over channels, the middle step is one matrix product per position of the (m+2)^2 tile:
``(m+2)^2`` batched ``tiles x C_in`` by ``C_in x C_out`` products, ``(m+2)^2 / (9 m^2)`` of the direct
convolution's multiply-adds (0.25x for F(4x4, 3x3)), plus the transforms' own.

TVM's Relay had these kernels in TOPI (``conv2d_winograd``) chosen by its op strategy; Relax 0.27
has none. Here the three steps are Relax operators, so that the kernels they become are scheduled,
searched, exported and verified as any other: the input transform in its two separable halves (a
gather of the input tiles straight into ``B^T d``, zeros for the padding, then the product by ``B``
on the other side: 12 multiply-adds per value, where one product by the dense ``kron(B^T, B^T)``
took 36; as many kernels as before, the gather now sharing its kernel with the first half), the batched product by the transformed weights, the
output transform as a product by ``kron(A^T, A^T)``, and a gather of the output tiles into NHWC,
which the epilogue (bias, activation, residual) follows as before.

A grouped convolution (ResNeSt's split attention, groups of 64-256 channels) runs one product per
point and group: its tiles ordered group, tile, channel, its weights one ``[C_in/g, C_out/g]``
matrix per point and group, and the few channels a group of ResNeXt's or RegNet's holds keep the
direct convolution (:func:`winograd_pays` by the channels of one group).

Only float32, channels-last convolutions with constant weights, no dilation, and a map
large enough that the products are efficient (at least :data:`MIN_TILES` tiles): smaller maps (a
ResNet's last stage, 7x7) keep the direct convolution, whose kernel runs near the peak already.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te

from explorer.passes.call_rewrite import rewrite_calls, static_ints
from explorer.passes.pass_target import cpu_rewrite

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")

# the transforms for F(4x4, 3x3) at the points 0, 1, -1, 2, -2 and infinity (Lavin and Gray, 2016)
_BT = np.array([[4, 0, -5, 0, 1, 0],
                [0, -4, -4, 1, 1, 0],
                [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0],
                [0, 4, 0, -5, 0, 1]], dtype=np.float64)
_G = np.array([[1 / 4, 0, 0],
               [-1 / 6, -1 / 6, -1 / 6],
               [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6],
               [1 / 24, -1 / 12, 1 / 6],
               [0, 0, 1]], dtype=np.float64)
_AT = np.array([[1, 1, 1, 1, 1, 0],
                [0, 1, -1, 2, -2, 0],
                [0, 1, 1, 4, 4, 0],
                [0, 1, -1, 8, -8, 1]], dtype=np.float64)
TILE = 4  # m: output pixels per tile side
ALPHA = TILE + 2  # input pixels per tile side
MIN_TILES = 16  # GEMM rows (tiles in the batch) below which the products run too thin (a 7x7 map has 4)
MIN_MACS = 10_000_000  # direct multiply-adds below which five kernels cost more than they save
# Winograd's multiply-adds (transforms included) at most this share of the direct ones: where 0.6 was
# measured with the dense input transform, the same boundary (37 channels in and out, 0.44x)
MAX_WORK = 0.44


def winograd_macs(tiles: int, c_in: int, c_out: int) -> int:
    """Multiply-adds of F(4x4, 3x3) over ``tiles`` tiles: the input transform (``ALPHA`` per value
    for each separable half, per tile and channel), the batched product, the output transform (a dense
    ``TILE^2 x ALPHA^2`` product)."""
    a2, m2 = ALPHA * ALPHA, TILE * TILE
    return tiles * (2 * ALPHA * a2 * c_in + a2 * c_in * c_out + m2 * a2 * c_out)


def winograd_pays(batch: int, out_h: int, out_w: int, c_in: int, c_out: int, groups: int = 1) -> bool:
    """Whether a 3x3 stride-1 convolution with this output runs faster as Winograd products: enough
    tiles for the products' rows, enough work to amortize five kernels, and few enough multiply-adds
    with the transforms counted (few channels make the transforms cost what they save); a grouped
    convolution by the channels of one group (its products are one batch per group)."""
    tiles = batch * -(-out_h // TILE) * -(-out_w // TILE)
    direct = batch * out_h * out_w * 9 * c_in * c_out  # per group (``c_in``, ``c_out``: a group's channels)
    return (tiles >= MIN_TILES and groups * direct >= MIN_MACS
            and winograd_macs(tiles, c_in, c_out) <= MAX_WORK * direct)


def winograd_weights(weight_hwio: np.ndarray) -> np.ndarray:
    """The transformed filter ``G g G^T`` of HWIO 3x3 weights, as ``[ALPHA*ALPHA, C_in, C_out]``."""
    u = np.einsum("ea,nb,abck->enck", _G, _G, weight_hwio.astype(np.float64))
    return u.reshape(ALPHA * ALPHA, *weight_hwio.shape[2:]).astype(weight_hwio.dtype)


def conv_by_winograd(x: np.ndarray, weight_hwio: np.ndarray, pads: tuple[int, int, int, int]) -> np.ndarray:
    """The convolution this pass builds, in numpy (NHWC ``x``; pads top, left, bottom, right):
    the reference its tests compare with a direct convolution."""
    n, h, w, c = x.shape
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    th, tw = -(-oh // TILE), -(-ow // TILE)
    padded = np.zeros((n, th * TILE + 2, tw * TILE + 2, c), x.dtype)
    rows, cols = min(h, padded.shape[1] - pads[0]), min(w, padded.shape[2] - pads[1])
    padded[:, pads[0]:pads[0] + rows, pads[1]:pads[1] + cols] = x[:, :rows, :cols]
    tiles = np.stack([padded[:, i:i + th * TILE:TILE, j:j + tw * TILE:TILE]
                      for i in range(ALPHA) for j in range(ALPHA)])
    rows = np.einsum("ai,ijnyxc->ajnyxc", _BT, tiles.reshape(ALPHA, ALPHA, *tiles.shape[1:]))
    v = np.einsum("bj,ajnyxc->abnyxc", _BT, rows).reshape(tiles.shape)
    m = np.einsum("enyxc,eck->enyxk", v, winograd_weights(weight_hwio))
    y = np.einsum("oe,enyxk->onyxk", np.kron(_AT, _AT), m).reshape(TILE, TILE, n, th, tw, -1)
    return y.transpose(2, 3, 0, 4, 1, 5).reshape(n, th * TILE, tw * TILE, -1)[:, :oh, :ow].astype(x.dtype)


def _gather_row_transform(x: te.Tensor, bt: te.Tensor, pads: tuple[int, int], th: int, tw: int,
                          groups: int = 1) -> te.Tensor:
    """``[ALPHA, ALPHA, groups*N*th*tw*(C/groups)]``: the input tiles with ``B^T`` applied to their
    rows (``B^T d``), read straight from the map (zeros where a tile reads padding): the first half
    of the separable input transform, six multiply-adds per value where the dense ``kron(B^T, B^T)``
    took 36. Grouped, the values are ordered group, tile, channel: one product per group follows."""
    n, h, w, c = (int(d) for d in x.shape)
    tiles = th * tw
    cg, count = c // groups, n * tiles  # a group's channels, the tiles
    i = te.reduce_axis((0, ALPHA), name="i")

    def row(a, j, q):
        if groups == 1:
            p, ch = q // c, q % c
        else:
            g, r = q // (count * cg), q % (count * cg)
            p, ch = r // cg, g * cg + r % cg
        img, t = p // tiles, p % tiles
        y = (t // tw) * TILE + i - pads[0]
        z = (t % tw) * TILE + j - pads[1]
        inside = tvm.tirx.all(y >= 0, y < h, z >= 0, z < w)
        pixel = tvm.tirx.if_then_else(inside, x[img, y, z, ch], tvm.tirx.const(0.0, x.dtype))
        return te.sum(bt[a, i] * pixel, axis=i)

    return te.compute((ALPHA, ALPHA, n * tiles * c), row, name="winograd_input_rows")


def _scatter_tiles(y: te.Tensor, n: int, oh: int, ow: int, th: int, tw: int, k: int, groups: int = 1) -> te.Tensor:
    """NHWC output from ``[TILE*TILE, N*th*tw*K]`` tiles (the pixels past the map dropped; grouped,
    ordered group, tile, channel)."""
    kg, count = k // groups, n * th * tw

    def pixel(img, row, col, ch):
        p = (img * th + row // TILE) * tw + col // TILE
        at = p * k + ch if groups == 1 else ((ch // kg) * count + p) * kg + ch % kg
        return y[(row % TILE) * TILE + col % TILE, at]

    return te.compute((n, oh, ow, k), pixel, name="winograd_output_tiles")


def _winograd(call: relax.Call, builder: relax.BlockBuilder):
    if not call.op.same_as(_CONV2D):
        return None
    data, weight = call.args
    a = call.attrs
    shape = static_ints(getattr(getattr(data, "ty", None), "shape", None) or [])
    if (not shape or str(getattr(data.ty, "dtype", "")) != "float32" or str(call.ty.dtype) != "float32"
            or not isinstance(weight, tvm.ir.Constant) or str(weight.value.dtype) != "float32"
            or str(a.data_layout) != "NHWC" or str(a.kernel_layout) != "HWIO"
            or str(a.out_layout or a.data_layout) != "NHWC"
            or static_ints(a.strides) != [1, 1] or static_ints(a.dilation) != [1, 1]):
        return None
    w = weight.value.numpy()
    if w.shape[:2] != (3, 3):
        return None
    pads = static_ints(a.padding)
    pads = pads * 2 if len(pads) == 2 else pads  # (top, left, bottom, right)
    n, h, wd, c = shape
    oh, ow = h + pads[0] + pads[2] - 2, wd + pads[1] + pads[3] - 2
    th, tw = -(-oh // TILE), -(-ow // TILE)
    k, groups = int(w.shape[3]), int(a.groups)
    cg, kg = c // groups, k // groups
    if w.shape[2] != cg or k % groups or not winograd_pays(n, oh, ow, cg, kg, groups):
        return None
    bt = relax.const(_BT.astype(np.float32))
    rows = builder.emit(builder.call_te(_gather_row_transform, data, bt, (pads[0], pads[1]), th, tw, groups,
                                        primfunc_name_hint="winograd_input_rows"))
    v = builder.emit(relax.op.matmul(bt, rows))  # [a, b, (group,) tile x channel]: B^T d B
    v = builder.emit(relax.op.reshape(v, (ALPHA * ALPHA * groups, n * th * tw, cg)))
    u = winograd_weights(w)  # [a, cg, k]; grouped: one [cg, kg] matrix per point and group
    u = u.reshape(ALPHA * ALPHA, cg, groups, kg).transpose(0, 2, 1, 3).reshape(ALPHA * ALPHA * groups, cg, kg)
    m = builder.emit(relax.op.matmul(v, relax.const(np.ascontiguousarray(u))))
    m = builder.emit(relax.op.reshape(m, (ALPHA * ALPHA, n * th * tw * k)))
    y = builder.emit(relax.op.matmul(relax.const(np.kron(_AT, _AT).astype(np.float32)), m))
    return builder.call_te(_scatter_tiles, y, n, oh, ow, th, tw, k, groups, primfunc_name_hint="winograd_output_tiles")


@tvm.transform.module_pass(opt_level=0, name="WinogradConv3x3")
@cpu_rewrite
def WinogradConv3x3(mod: tvm.IRModule, target) -> tvm.IRModule:
    """3x3 stride-1 convolutions as Winograd F(4x4, 3x3) products (see the module docstring)."""
    return rewrite_calls(mod, _winograd)


__all__ = ["ALPHA", "MAX_WORK", "MIN_MACS", "MIN_TILES", "TILE", "WinogradConv3x3", "conv_by_winograd", "winograd_macs",
           "winograd_pays", "winograd_weights"]
