"""Quantized models computed in integers: the QDQ rewrite, the int8 dot-product intrinsics, their
default schedules and the search around them, verified against ONNX Runtime and numpy."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest
import tvm
from click.testing import CliRunner

from app.cli import cli
from explorer.models import import_onnx
from explorer.models.qdq import output_steps
from explorer.passes.qdq_int8 import QDQToInt8Kernels
from explorer.schedule import int8_dot
from explorer.schedule.defaults import CpuSpec, default_schedule
from explorer.target import parse_target
from tests.conftest import tiny_cnn
from tests.onnx_cases import ort_run, random_feeds, tvm_run
from tests.kernel_cases import int8_conv_kernel
from tests.quantized_models import ort_quantize, small_mlp


def _int8_kernels(mod: tvm.IRModule) -> list[str]:
    return sorted(gv.name_hint for gv, f in mod.functions.items()
                  if isinstance(f, tvm.tirx.PrimFunc) and int8_dot.has_int8_kernel(f))


@pytest.mark.parametrize("make, per_channel", [(tiny_cnn, True), (tiny_cnn, False), (small_mlp, True)],
                         ids=["cnn-per-channel", "cnn-per-tensor", "mlp"])
def test_qdq_convolutions_and_matmuls_become_int8_kernels_that_match_onnx_runtime(tmp_path, make, per_channel):
    model = ort_quantize(make(), tmp_path, per_channel=per_channel)
    loaded = import_onnx(model)
    rewritten = QDQToInt8Kernels(loaded.mod)
    kernels = _int8_kernels(rewritten)
    assert kernels and all(k.startswith(("conv2d_nhwc_int8", "dense_int8")) for k in kernels)
    assert "R.nn.conv2d" not in rewritten.script() and "R.matmul" not in rewritten.script()
    loaded = SimpleNamespace(mod=rewritten, info=loaded.info)
    step = next(iter(output_steps(model).values()))
    for seed in (1, 2, 3):  # the integer sum is exact: at most one rounding step from ONNX Runtime
        feeds = random_feeds(model, seed)
        assert np.abs(tvm_run(loaded, feeds)[0] - ort_run(model, feeds)[0]).max() <= step + 1e-6


def test_float_models_are_left_alone():
    loaded = import_onnx(tiny_cnn())
    assert QDQToInt8Kernels(loaded.mod).same_as(loaded.mod)


@pytest.mark.parametrize("config, rewritten", [
    ({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}, False),
    ({"kind": "llvm", "mcpu": "cascadelake"}, True), ({"kind": "llvm", "mcpu": "haswell"}, True),
    ({"kind": "llvm", "mcpu": "x86-64"}, False), ({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}, False),
    ({"kind": "llvm"}, None)], ids=["aarch64", "vnni", "avx2", "sse2-only", "aarch64-triple", "this-machine"])
def test_the_rewrite_follows_the_cpu_it_compiles_for(tmp_path, config, rewritten):
    """Without int8 dot products the int32 kernels would be slower than the float ones."""
    loaded = import_onnx(ort_quantize(tiny_cnn(), tmp_path))
    if rewritten is None:  # a generic llvm target (what pipelines run under): this machine decides
        rewritten = bool(_cpu("cpu").int8_dot)
    with tvm.target.Target(config):
        out = QDQToInt8Kernels(loaded.mod)
    assert bool(_int8_kernels(out)) == rewritten


def _cpu(spec: str) -> CpuSpec:
    t = parse_target(spec)
    return CpuSpec.of(vector_width=t.vector_width, features=t.features, arch=t.arch, cores=2)


@pytest.mark.parametrize("size, stride, rows", [(8, 1, 4), (7, 1, 7), (6, 1, 2), (5, 1, 1), (8, 2, 1)],
                         ids=["4 rows", "7 rows", "2 rows", "1 row", "strided: 1 row"])
def test_default_schedule_tensorizes_and_computes_exactly_on_this_cpu(size, stride, rows):
    cpu = dataclasses.replace(_cpu("cpu"), int8_amx=False)  # the vector instructions (AMX: tests/test_int8_amx.py)
    if not cpu.int8_dot:
        pytest.skip("this CPU has no int8 dot-product instructions schedx knows")
    func, args, ref = int8_conv_kernel(size, 63, stride)
    scheduled, choice = default_schedule(func, cpu)
    assert choice.rule == "full" and int8_dot.NAME_PREFIX in choice.steps[0], choice
    assert f"_{rows}x" in choice.steps[0]
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target("cpu").tvm())
    nd = [tvm.runtime.tensor(a) for a in args]
    lib(*nd)
    assert np.array_equal(nd[2].numpy(), ref)


@pytest.mark.parametrize("spec, isa, instruction", [("cpu:cascadelake", "vnni", "vpdpbusd"),
                                                    ("cpu:skylake-avx512", "avx512bw", "vpmaddubsw"),
                                                    ("cpu:haswell", "avx2", "vpmaddubsw")])
def test_each_vector_width_builds_its_instruction(spec, isa, instruction):
    """Built for each x86 width (run only where the host has it: the test above)."""
    cpu = _cpu(spec)
    assert cpu.int8_dot == isa
    func, _, _ = int8_conv_kernel(8, 63)
    scheduled, choice = default_schedule(func, cpu)
    assert f"{int8_dot.NAME_PREFIX}{isa}_4x" in choice.steps[0]
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target(spec).tvm())
    asm = (lib.mod.imports[0] if lib.mod.imports else lib.mod).inspect_source("asm")
    assert instruction in asm


@pytest.mark.parametrize("spec, size, rows, panels", [("cpu:cascadelake", 8, 4, 2), ("cpu:cascadelake", 7, 7, 2),
                                                      ("cpu:haswell", 8, 4, 2), ("cpu:haswell", 7, 7, 1)])
def test_two_weight_panels_per_tile_where_the_registers_hold_their_accumulators(spec, size, rows, panels):
    """Two panels double the accumulators (rows x 2): 7 rows x 2 + 2 panels + the broadcast fit
    AVX-512's 32 registers, not AVX2's 16. Built for each (compile only): the instruction is there,
    as many calls of it as accumulators in the unrolled tile."""
    from explorer.schedule.defaults.int8 import _panels

    cpu = _cpu(spec)
    func, _, _ = int8_conv_kernel(size, 63)
    scheduled, choice = default_schedule(func, cpu)
    assert f"_{rows}x" in choice.steps[0] and (f"x {panels} panel" in choice.steps[0]), choice.steps[0]
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=parse_target(spec).tvm())
    asm = (lib.mod.imports[0] if lib.mod.imports else lib.mod).inspect_source("asm")
    instruction = "vpdpbusd" if cpu.int8_dot == "vnni" else "vpmaddubsw"
    assert asm.count(instruction) >= rows * panels
    lanes = int8_dot.LANES[cpu.int8_dot]
    assert _panels(3 * lanes, int8_dot.Int8Dot(cpu.int8_dot, 4), cpu) == 1  # an odd number of panels: one


def test_weights_that_would_saturate_get_no_saturating_intrinsic():
    func, _, _ = int8_conv_kernel(8, 100)  # int8 weights up to 100: vpmaddubsw's int16 pair sums can overflow
    block = next(b for b in _blocks(func) if int8_dot.weight_max(b) is not None)
    assert not int8_dot.fits(int8_dot.Int8Dot("avx2", 4), block)
    assert int8_dot.fits(int8_dot.Int8Dot("vnni", 4), block)  # vpdpbusd sums in int32: exact
    _, choice = default_schedule(func, _cpu("cpu:haswell"))
    assert int8_dot.NAME_PREFIX not in " ".join(choice.steps) and "saturate" in " ".join(choice.steps)
    _, choice = default_schedule(func, _cpu("cpu:cascadelake"))
    assert int8_dot.NAME_PREFIX in " ".join(choice.steps)


def test_a_strided_convolution_is_offered_only_the_one_row_intrinsic():
    func, _, _ = int8_conv_kernel(8, 63, stride=2)
    block = next(b for b in _blocks(func) if int8_dot.weight_max(b) is not None)
    assert int8_dot.row_stride(block) == 2
    assert [d.rows for d in int8_dot.for_target(parse_target("cpu:haswell")) if int8_dot.fits(d, block)] == [1]


def _blocks(func):
    from explorer.ir.tir_walk import blocks

    return blocks(func)


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, (args, result.output)
    return result.output


@pytest.mark.slow  # about 60 s: a real search; the int8 kernels and their export are tested above
def test_a_quantized_cnn_is_searched_around_the_intrinsic_and_exported_verified(tmp_path):
    """The journey: QDQ model -> int8 kernels -> search (records tensorized) -> export replays them,
    verified in a fresh process against ONNX Runtime."""
    import onnx

    if not _cpu("cpu").int8_dot:
        pytest.skip("this CPU has no int8 dot-product instructions schedx knows")
    path, db = tmp_path / "cnn-int8.onnx", tmp_path / "q.db"
    onnx.save(ort_quantize(tiny_cnn(), tmp_path), path)
    from explorer.workload import load_workload
    from search.job_spec import ValidJob
    from search.params import SearchParams
    from search.tune import tune
    from store import Store

    convs = [t for t in load_workload(str(path)).tasks() if "conv2d_nhwc_int8" in t.name]
    assert convs
    with Store(db) as store:  # the search on the int8 convolution alone (the CLI tunes every task)
        summary = tune(ValidJob.of_tasks(convs, "cpu", source="cnn-int8"), store, SearchParams(trials=8, per_batch=8))
        assert summary.trials > 0
        records = store.records(source="search")
        assert any(r.trace and int8_dot.NAME_PREFIX in json.dumps(r.trace) for r in records)
    out = _run("export", str(path), "--db", str(db), "-o", str(tmp_path / "bundle"), "--json")
    report = json.loads(out[out.index("{"):])
    assert report["ok"] and report["verification"]["fresh_process"]["ok"], report["verification"]
    convs = [t for t in report["tasks"] if "conv2d_nhwc_int8" in t["name"]]
    assert convs and all(not t["error"] for t in convs)
