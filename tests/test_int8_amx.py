"""int8 convolutions and matmuls on AMX-INT8 tiles (``tdpbusd``): the default rule's choice per
target (compile only, any host), and exact int32 results against numpy where the host has the
instructions (the flags schedx reads: ``SCHEDX_CPU_FLAGS`` can hide them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from tvm import te

from explorer.passes.qdq_int8 import conv2d_nhwc_int8, dense_int8
from explorer.schedule import amx_int8
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.target.environment import cpu_flags
from tests.quantized_models import amx_int8_cnn, ort_quantize

ROOT = Path(__file__).resolve().parents[1]

HAS_AMX_INT8 = {"amx_int8", "amx_tile"} <= cpu_flags()
NEEDS_AMX_INT8 = pytest.mark.skipif(not HAS_AMX_INT8, reason="this CPU has no AMX-INT8 (amx_int8 not in its flags)")


def _conv(size, stride: int = 1, cin: int = 64, cout: int = 32, kernel=3, weight_max: int = 63):
    """A conv2d_nhwc_int8 kernel as the QDQ pass writes it, numpy inputs and the exact result;
    ``size`` (the output map) and ``kernel`` an int (square) or ``(rows, columns)``."""
    (oh, ow), (kh, kw) = (size, size) if isinstance(size, int) else size, \
        (kernel, kernel) if isinstance(kernel, int) else kernel
    x_shape = (1, (oh - 1) * stride + kh, (ow - 1) * stride + kw, cin)
    w_shape = (cout // 16, kh, kw, cin // 4, 16, 4)
    x, w = te.placeholder(x_shape, "uint8", name="X"), te.placeholder(w_shape, "int8", name="W")
    func = te.create_prim_func([x, w, conv2d_nhwc_int8(x, w, stride, stride, oh, ow, weight_max)])
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 256, x_shape).astype("uint8")
    ws = rng.integers(-weight_max, weight_max + 1, w_shape).astype("int8")
    plain = ws.transpose(0, 4, 1, 2, 3, 5).reshape(cout, kh, kw, cin).astype(np.int64)
    rows, cols = (oh - 1) * stride + 1, (ow - 1) * stride + 1
    ref = sum(np.einsum("nhwc,oc->nhwo", xs[:, a:a + rows:stride, b:b + cols:stride].astype(np.int64), plain[:, a, b])
              for a in range(kh) for b in range(kw))
    return func, [xs, ws, np.zeros(ref.shape, "int32")], ref


def _dense(m: int, n: int, k: int, weight_max: int = 127):
    x = te.placeholder((m, k), "uint8", name="X")
    w_shape = (n // 16, k // 4, 16, 4)
    w = te.placeholder(w_shape, "int8", name="W")
    func = te.create_prim_func([x, w, dense_int8(x, w, weight_max)])
    rng = np.random.default_rng(1)
    xs = rng.integers(0, 256, (m, k)).astype("uint8")
    ws = rng.integers(-weight_max - 1, weight_max + 1, w_shape).astype("int8")
    plain = ws.transpose(0, 2, 1, 3).reshape(n, k).astype(np.int64)
    return func, [xs, ws, np.zeros((m, n), "int32")], xs.astype(np.int64) @ plain.T


def _built(spec: str, func):
    target = parse_target(spec)
    scheduled, choice = default_schedule(func, target.cpu_spec())
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=target.tvm())
    return lib, choice.steps[0]


def _asm(lib) -> str:
    return lib.mod.inspect_source("asm")


TILE_INSTRUCTIONS = ("tdpbusd", "tileloadd", "ldtilecfg", "tilestored", "tilerelease")  # released: no config left behind


def test_sapphirerapids_computes_a_3x3_conv_on_amx_tiles_and_asks_linux_for_tile_state():
    assert parse_target("cpu:sapphirerapids").cpu_spec().int8_amx
    lib, step = _built("cpu:sapphirerapids", _conv(14)[0])
    assert "schedx_amx_u8i8_14x1x2_k64_s1_t3x3" in step and "AMX tdpbusd" in step, step
    asm = _asm(lib)
    assert all(i in asm for i in TILE_INSTRUCTIONS), [i for i in TILE_INSTRUCTIONS if i not in asm]
    # arch_prctl(ARCH_REQ_XCOMP_PERM=0x1023, XFEATURE_XTILEDATA=18) through syscall(158, ...), once per process
    assert "syscall" in asm and "$158" in asm and "$4131" in asm and "$18" in asm


def test_input_heavy_convolutions_take_a_column_of_4_x_1_tiles_and_weights_heavy_ones_2_x_2():
    lib, step = _built("cpu:sapphirerapids", _conv(56, cin=64, cout=32)[0])  # 215 KB of input, 18 KB of weights
    assert "schedx_amx_u8i8_14x4x1_k64_s1_t3x3" in step and "4 x 1 tiles of 14 rows" in step, step
    assert all(i in _asm(lib) for i in TILE_INSTRUCTIONS)
    _, heavy = _built("cpu:sapphirerapids", _conv(56, cin=64, cout=512)[0])  # 295 KB of weights, 215 KB of input
    assert "schedx_amx_u8i8_14x2x2_k64_s1_t3x3" in heavy, heavy


def test_weights_heavy_7_pixel_rows_take_all_the_output_rows_in_one_call(monkeypatch):
    """ResNet's layer4 (7-wide maps, weights outweigh the input): a 2 x 2 grid over two output rows at
    a time, the last row alone, all in one call: each B tile feeds four tdpbusd instead of two."""
    from explorer.schedule.defaults import int8_amx

    lib, step = _built("cpu:sapphirerapids", _conv(7, cin=64, cout=128)[0])  # 74 KB of weights, 5 KB of input
    assert "schedx_amx_u8i8_7x2x2_k64_s1_t3x3_z_y7" in step and "7 output rows a call" in step, step
    assert all(i in _asm(lib) for i in TILE_INSTRUCTIONS)
    _, pointwise = _built("cpu:sapphirerapids", _conv(7, stride=2, cin=256, cout=512, kernel=1)[0])
    assert amx_int8.NAME_PREFIX in pointwise and "_y" not in pointwise, pointwise  # 1x1: a row a call
    monkeypatch.setattr(int8_amx, "ROWS_A_CALL", 0)  # off: a row (one 7-row tile) a call, as before
    _, one_row = _built("cpu:sapphirerapids", _conv(7, cin=64, cout=128)[0])
    assert "schedx_amx_u8i8_7x1x2_k64_s1_t3x3_z " in one_row, one_row


@pytest.mark.parametrize("spec, instruction", [("cpu:icelake-server", "vpdpbusd"), ("cpu:znver4", "vpdpbusd"),
                                               ("cpu:znver3", "vpmaddubsw")])
def test_cpus_without_amx_int8_keep_the_vector_instructions(spec, instruction):
    assert not parse_target(spec).cpu_spec().int8_amx
    lib, step = _built(spec, _conv(14)[0])
    asm = _asm(lib)
    assert amx_int8.NAME_PREFIX not in step and instruction in asm, step
    assert not any(i in asm for i in TILE_INSTRUCTIONS)


def _stem(size: int = 14, weight_max: int = 63):
    """A quantized image's stem as the QDQ pass writes it: 7x7, stride 2, 3 channels padded to 4."""
    return _conv(size, stride=2, cin=4, cout=64, kernel=7, weight_max=weight_max)


def test_sapphirerapids_computes_a_few_channel_stem_on_amx_tiles_a_kernel_row_per_tdpbusd():
    """The 7x7 stem's kernel rows folded into K (7 x 4 = 28 bytes a tile row, rows 8 bytes apart)."""
    lib, step = _built("cpu:sapphirerapids", _stem()[0])
    assert "schedx_amx_u8i8_14x1x2_k4_s2_t7x7_f" in step and "kw folded" in step and "K=28" in step, step
    asm = _asm(lib)
    assert all(i in asm for i in TILE_INSTRUCTIONS), [i for i in TILE_INSTRUCTIONS if i not in asm]


@pytest.mark.parametrize("spec, instruction", [("cpu:icelake-server", "vpdpbusd"), ("cpu:znver3", "vpmaddubsw")])
def test_the_stem_keeps_the_vector_instructions_without_amx_int8(spec, instruction):
    lib, step = _built(spec, _stem()[0])
    asm = _asm(lib)
    assert amx_int8.NAME_PREFIX not in step and instruction in asm, step
    assert not any(i in asm for i in TILE_INSTRUCTIONS)


# Inception's 1x7 and 7x1 (rows of 16: a 17-wide row splits into no tiles of 7-16 and stays on vpdpbusd), a
# 3x1 and a 1x3 at stride 2: TVM's blockize drops a tap axis of extent 1, the tile call's description too
ASYMMETRIC = [((17, 16), 1, 192, 192, (1, 7)), ((17, 16), 1, 192, 192, (7, 1)), ((14, 14), 2, 128, 64, (3, 1)),
              ((14, 14), 2, 128, 64, (1, 3))]
ASYMMETRIC_IDS = ["1x7-192ch-16px", "7x1-192ch-16px", "3x1-stride2", "1x3-stride2"]


@pytest.mark.parametrize("size, stride, cin, cout, kernel", ASYMMETRIC, ids=ASYMMETRIC_IDS)
def test_a_1xn_or_nx1_convolution_computes_on_amx_tiles(size, stride, cin, cout, kernel):
    lib, step = _built("cpu:sapphirerapids", _conv(size, stride, cin, cout, kernel)[0])
    assert f"_t{kernel[0]}x{kernel[1]}" in step and "AMX tdpbusd" in step, step
    asm = _asm(lib)
    assert all(i in asm for i in TILE_INSTRUCTIONS), [i for i in TILE_INSTRUCTIONS if i not in asm]


@NEEDS_AMX_INT8
@pytest.mark.parametrize("size, stride, cin, cout, kernel", ASYMMETRIC, ids=ASYMMETRIC_IDS)
def test_a_1xn_or_nx1_amx_kernel_computes_exactly_on_this_cpu(size, stride, cin, cout, kernel):
    func, args, ref = _conv(size, stride, cin, cout, kernel, weight_max=127)
    lib, step = _built("cpu", func)
    assert amx_int8.NAME_PREFIX in step, step
    nd = [tvm.runtime.tensor(a) for a in args]
    lib(*nd)
    assert np.array_equal(nd[2].numpy(), ref)


@pytest.mark.parametrize("kh, kw, k, folds", [(7, 7, 4, True), (3, 3, 16, True), (3, 3, 20, True),
                                              (3, 3, 32, False), (1, 1, 16, False), (1, 7, 4, False),
                                              (3, 3, 64, False)])
def test_a_kernel_row_folds_into_k_where_it_fits_one_tile_row(kh, kw, k, folds):
    assert amx_int8.foldable(kh, kw, k) is folds


def test_a_dense_fills_two_by_two_tiles_of_16_rows():
    lib, step = _built("cpu:sapphirerapids", _dense(64, 64, 512)[0])
    assert "schedx_amx_u8i8_16x2x2_k512" in step and "tdpbusd" in _asm(lib), step


@pytest.mark.parametrize("make, why", [(lambda: _conv(14, cin=32), "32 input channels"),
                                       (lambda: _conv(28, kernel=1, cout=64), "a 1x1 convolution of 64 channels"),
                                       (lambda: _conv(8, cin=128, cout=64, kernel=1), "1x1 at 8x8: too little work"),
                                       (lambda: _dense(1, 64, 1024), "one row")])
def test_kernels_that_do_not_fill_the_tiles_stay_on_vpdpbusd(make, why):
    lib, step = _built("cpu:sapphirerapids", make()[0])
    assert "schedx_dot_u8i8_vnni" in step and amx_int8.NAME_PREFIX not in step, (why, step)
    assert "tdpbusd" not in _asm(lib)


@NEEDS_AMX_INT8
@pytest.mark.parametrize("make", [lambda: _conv(14), lambda: _conv(7, stride=2, cin=128, cout=64),
                                  lambda: _conv(8, cin=128, weight_max=127),
                                  lambda: _conv(14, cin=256, cout=64, kernel=1),
                                  lambda: _dense(64, 64, 512), lambda: _dense(112, 48, 448),
                                  lambda: _stem(weight_max=127), lambda: _stem(16, weight_max=127),
                                  lambda: _conv(28, cin=16, kernel=3, weight_max=127),
                                  lambda: _conv(28, cin=16, kernel=4, weight_max=127),
                                  lambda: _conv(56, cin=64, cout=32, weight_max=127),
                                  lambda: _conv(7, cin=64, cout=128, weight_max=127),
                                  lambda: _conv(7, stride=2, cin=128, cout=256, weight_max=127)],
                         ids=["3x3-14px", "3x3-stride2-7px", "3x3-128ch-8px", "1x1-256ch-14px", "dense-64x64x512",
                              "dense-112x48x448", "stem-7x7-s2-14px", "stem-7x7-s2-16px", "3x3-16ch-folded-28px",
                              "4x4-16ch-folded-into-a-whole-tile-row", "3x3-56px-4x1-tiles",
                              "3x3-7px-all-rows-a-call", "3x3-stride2-7px-all-rows-a-call"])
def test_amx_kernels_compute_exactly_on_this_cpu(make):
    func, args, ref = make()
    lib, step = _built("cpu", func)
    assert amx_int8.NAME_PREFIX in step, step
    nd = [tvm.runtime.tensor(a) for a in args]
    lib(*nd)
    assert np.array_equal(nd[2].numpy(), ref)


@pytest.mark.parametrize("dot", [amx_int8.AmxInt8(14, 2, 128, 2, 3, 3), amx_int8.AmxInt8(14, 2, 4, 2, 7, 7, 2, True),
                                 amx_int8.AmxInt8(16, 2, 512, nt=2, zero=True),
                                 amx_int8.AmxInt8(14, 2, 4, 2, 7, 7, 2, True, zero=True),
                                 amx_int8.AmxInt8(7, 2, 512, 1, 3, 3, 2, zero=True, out_rows=7)],
                         ids=["taps", "folded", "dense-from-zero", "folded-from-zero", "output-rows"])
def test_a_trace_names_its_amx_intrinsic_well_enough_to_register_it_again(dot):
    from tvm.s_tir import TensorIntrin

    amx_int8.register_for_trace(f'["tensorize", "{dot.name}"]')
    assert TensorIntrin.get(dot.name, allow_missing=True) is not None


@NEEDS_AMX_INT8
@pytest.mark.skipif(shutil.which("objdump") is None, reason="no objdump to read the bundle's instructions")
@pytest.mark.parametrize("stem, stride, side, stem_on_tiles", [(3, 1, 16, False), (7, 2, 32, True)],
                         ids=["3x3-stem-on-vpdpbusd", "7x7-stride2-stem-on-amx"])
def test_a_quantized_cnn_on_amx_tiles_exports_verified_against_onnx_runtime(tmp_path, stem, stride, side,
                                                                            stem_on_tiles):
    """ONNX Runtime's QDQ quantizer, the default schedules (no records), the export's fresh-process
    verification against ONNX Runtime; the bundle's library holds the tile instructions (and a 7x7
    stride-2 stem on them too: no vpdpbusd left)."""
    path = tmp_path / "amx-qdq.onnx"
    onnx.save(ort_quantize(amx_int8_cnn(stem, stride, side), tmp_path), path)
    bundle = tmp_path / "bundle"
    # as a user runs it: a process of its own. In a pytest worker that had run hundreds of tests before,
    # ONNX Runtime's own int8 run (the reference, on its AMX kernels) died with SIGILL twice on the
    # Intel KVM guest of 2026-12-06; never in a fresh process (see docs/notes/measurements.md, "AMX on a
    # shared VM")
    result = subprocess.run([sys.executable, "-m", "app.cli", "export", str(path), "--no-db", "-o", str(bundle),
                             "--json"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert report["ok"] and report["verification"]["fresh_process"]["ok"], report["verification"]
    disassembly = subprocess.run(["objdump", "-d", str(next(bundle.glob("*.so")))], capture_output=True,
                                 text=True, check=True).stdout
    assert "tdpbusd" in disassembly  # the two 64-channel convs
    # the 3x3 stem: 36 products a sum, too few for the tiles; the 7x7 one a kernel row a tdpbusd
    assert ("vpdpbusd" in disassembly) is not stem_on_tiles
