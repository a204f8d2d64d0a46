"""The split product (:mod:`explorer.passes.bf16_conv_split`): short-reduction convolutions on AMX
tiles as two bf16 products a value, the weights at about fp32's accuracy, the input rounded once. The rule and the packing anywhere;
the compiled kernel for a Sapphire Rapids target on any host; its numbers where the CPU has AMX."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from explorer.passes.bf16_conv import MIN_REDUCTION_DIRECT, MIN_SPLIT_WORK, bf16_convs, split_fits, split_product, why_fp32
from explorer.passes.bf16_conv_nhwc import INPUT_NAME
from explorer.passes.bf16_conv_split import PARTS, pack_split_weights, split_conv_func, split_group
from explorer.passes.bf16_dense import bf16_round
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from tests.direct_bf16_conv import conv_out_size, reference_conv_nhwc  # (NHWC reference in float64, output size)
from tests.cpu_marks import NEEDS_AMX

# n, c, h, w, oc, kernel, stride, pad: MobileNetV2's 1x1 expansion (64 -> 384) at a small map, 24
# input channels (parts of 32), a strided 1x1, a padded 3x3 (its taps read both parts too)
SHAPES = [(1, 64, 14, 14, 384, 1, 1, 0), (1, 24, 8, 8, 144, 1, 1, 0), (1, 32, 16, 16, 64, 1, 2, 0),
          (1, 32, 8, 8, 32, 3, 1, 1)]
IDS = ["expand-1x1", "24-channels", "strided-1x1", "padded-3x3"]


def _func(n, c, h, w, oc, k, s, p) -> tvm.tirx.PrimFunc:
    packed = pack_split_weights(np.zeros((oc, c, k, k), np.float32))
    return split_conv_func((n, h, w, c), packed.shape, strides=(s, s), padding=(p, p),
                           out_hw=(conv_out_size(h, k, s, p), conv_out_size(w, k, s, p)))


def test_the_rule_splits_short_reductions_with_enough_work_per_pixel_and_says_why_the_others_stay_fp32():
    assert split_product((384, 64, 1, 1)) and split_product((576, 96, 1, 1))  # K x C_out 24576, 55296
    assert not split_product((192, 32, 1, 1)) and not split_product((128, 64, 1, 1))  # 6144, 8192: too little
    assert not split_product((960, 160, 1, 1))  # K = 160: long enough for plain bf16
    assert why_fp32((384, 64, 1, 1), direct=True, splittable=True) is None
    assert why_fp32((384, 64, 1, 1), direct=True) is not None  # the kernel takes no split of it: fp32
    assert why_fp32((64, 64, 1, 1), direct=True, splittable=True) == (
        f"64x1x1 -> 64: reduction K = 64 < {MIN_REDUCTION_DIRECT}, too short for bf16 to pay (K x C_out = 4096 < "
        f"{MIN_SPLIT_WORK} for a split product)")
    assert split_fits((384, 64, 1, 1), 14) and not split_fits((384, 16, 1, 1), 14)  # 16 -> 32 channels: no
    assert not split_fits((384, 64, 1, 1), 5)  # 5-pixel rows: no tiling of the split kernel


def test_weights_pack_as_hi_lo_parts_of_whole_tile_rows_whose_sum_is_the_fp32_weight():
    assert split_group(64) == 64 and split_group(24) == 32 and split_group(16) is None
    w = np.random.default_rng(0).standard_normal((20, 24, 1, 1)).astype(np.float32)
    packed = pack_split_weights(w)
    assert PARTS == 2 and packed.shape == (2, 1, 1, 32, 16, 2) and packed.dtype == np.uint16  # 2 parts of 32
    widened = (packed.astype(np.uint32) << 16).view(np.float32)
    by_channel = widened[:, 0, 0].transpose(0, 2, 1, 3).reshape(32, 64)[:20]  # [output, input channel]
    hi, lo = by_channel[:, :24], by_channel[:, 32:56]
    assert np.array_equal(hi, bf16_round(w[:, :, 0, 0]))
    assert np.abs(hi + lo - w[:, :, 0, 0]).max() <= 2.0 ** -16 * np.abs(w).max()  # Wh + Wl: ~fp32
    assert by_channel[:, 24:32].max() == 0 and by_channel[:, 56:].max() == 0  # padded channels are zero


def test_the_packed_input_is_stored_as_nhwc_pixels_of_two_parts_that_the_kernel_reads_as_channels():
    func = _func(*SHAPES[1])
    assert [[int(d) for d in b.shape] for b in func.body.block.alloc_buffers] == [[1, 8, 8, 64]]  # 2 x 32 channels
    assert int(func.attrs["op_pattern"]) == 4  # its bias, activation and residual add fuse into it
    text = func.script().replace("T.int64(", "(")
    assert f"T.reads({INPUT_NAME}[v_b, v_yy, v_xx, v_rc]" in text  # the product reads pixels of 64 channels
    assert f"T.writes({INPUT_NAME}[v_b, v_yy, v_q // (2), v_q % (2) * (32) + v_ci])" in text  # two columns a pixel


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_sapphirerapids_split_product_runs_on_amx_tiles_and_its_trace_replays(shape):
    import tvm_ffi

    from explorer.schedule.trace import replay
    from explorer.workload.keys import owned_task_module

    target = parse_target("cpu:sapphirerapids")
    func, choice = default_schedule(_func(*shape), target.cpu_spec())
    assert "direct NHWC, no im2col" in choice.steps[0] and f"K={PARTS * split_group(shape[1])}" in choice.steps[0], choice
    assert tvm_ffi.structural_equal(replay(owned_task_module(_func(*shape)), choice.trace).mod["main"], func)  # records
    asm = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm()).mod.inspect_source("asm")
    assert "tdpbf16ps" in asm and "tilerelease" in asm


@NEEDS_AMX
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_split_product_matches_the_rounded_input_by_fp32_weights_where_plain_bf16_is_off_by_its_rounding(shape):
    n, c, h, w, oc, k, s, p = shape
    target = parse_target("cpu")
    func, _ = default_schedule(_func(*shape), target.cpu_spec())
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm())
    rng = np.random.default_rng(1)
    x, wt = rng.standard_normal((n, h, w, c)).astype("float32"), rng.standard_normal((oc, c, k, k)).astype("float32")
    out_shape = (n, conv_out_size(h, k, s, p), conv_out_size(w, k, s, p), -(-oc // 16) * 16)
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(pack_split_weights(wt)), out)
    got, ref = out.numpy()[..., :oc], reference_conv_nhwc(bf16_round(x), wt, s, p)  # Xh by the fp32 weights
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() <= 5e-5 * scale  # ~fp32: the sums' own rounding
    plain_bf16 = reference_conv_nhwc(bf16_round(x), bf16_round(wt), s, p)
    assert np.abs(plain_bf16 - ref).max() > 5e-4 * scale  # what plain bf16 is off by


def test_amx_models_compute_short_expansions_as_split_products_and_keep_narrow_ones_fp32():
    from tvm import relax
    from tvm.script import relax as R

    rng = np.random.default_rng(0)
    expand = relax.const(rng.standard_normal((384, 64, 1, 1)).astype("float32"))  # K 64 x 384: split
    project = relax.const(rng.standard_normal((64, 384, 1, 1)).astype("float32"))  # K 384: plain bf16
    narrow = relax.const(rng.standard_normal((32, 64, 1, 1)).astype("float32"))  # K 64 x 32: fp32

    @R.function
    def main(x: R.Tensor((1, 64, 14, 14), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, expand)
            z = R.nn.conv2d(y, project)
            d = R.nn.conv2d(z, narrow)
            R.output(d)
        return d

    mod, converted, kept = bf16_convs(tvm.IRModule({"main": main}), amx=True)
    assert converted == 2 and kept == (f"64x1x1 -> 32: reduction K = 64 < {MIN_REDUCTION_DIRECT}, too short for bf16 "
                                       f"to pay (K x C_out = 2048 < {MIN_SPLIT_WORK} for a split product)",)
    bf16 = [tuple(int(d) for d in b.shape) for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
            for b in f.params if str(b.dtype) == "uint16"]
    weights = sorted(shape for shape in bf16 if len(shape) == 6)  # packed panels; the rest are activations
    assert weights == [(4, 1, 1, 192, 16, 2), (24, 1, 1, 64, 16, 2)]  # plain 384; split 2 x 64 in pairs
    # the expansion's output, read only by the plain bf16 conv, is written rounded (bf16_conv_bits)
    assert (1, 14, 14, 384) in bf16
