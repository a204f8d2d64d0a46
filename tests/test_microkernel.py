"""The fp32 FMA micro-kernel: one intrinsic per vector width, a hand-tensorized matmul that matches
numpy and compiles to FMA instructions of the target's width, MetaSchedule sketches that tile
around it (and leave alone what it does not fit), and the search option that turns it on."""

from __future__ import annotations


import pytest

from explorer.kernels import builtin_kernel
from explorer.measure import check
from explorer.schedule import microkernel
from explorer.schedule.codegen import asm_stats
from explorer.target import host_target, parse_target
from search.errors import SearchError
from search.params import SearchParams
from search.sketches import space_generator
from tests.kernel_cases import tensorized_matmul

HOST = host_target()
needs_fma = pytest.mark.skipif(microkernel.for_target(HOST) is None,
                               reason=f"no micro-kernel here: {microkernel.why_not(HOST)}")
x86_only = pytest.mark.skipif(HOST.arch != "x86_64", reason="spells x86 CPUs as this machine's (cpu:MCPU)")


def _fmas(asm: str, lanes: int) -> int:
    """FMA instructions on fp32 vectors of ``lanes`` in an assembly listing, whatever their operand
    order (AVX-512 puts a broadcast memory operand first: ``vfmadd231ps (%rax){1to16}, %zmm1, %zmm2``)."""
    return asm_stats(asm).fma.get(32 * lanes, 0)


def _asm(mod, target) -> str:
    import tvm

    return tvm.compile(mod, target=target.tvm()).mod.inspect_source("asm")


@x86_only
@pytest.mark.parametrize("spec, lanes", [("cpu:x86-64-v3", 8), ("cpu:x86-64-v4", 16), ("cpu:haswell", 8)])
def test_the_kernel_follows_the_vector_width(spec, lanes):
    mk = microkernel.for_target(parse_target(spec))
    assert (mk.mr, mk.nr, mk.kr) == (microkernel.MR, lanes, microkernel.KR)
    assert mk.name == f"schedx_fma_f32_{microkernel.MR}x{lanes}x{microkernel.KR}" in microkernel.MICROKERNEL_NAMES
    assert microkernel.MicroKernel.from_name(mk.name) == mk


@x86_only
def test_targets_without_fma_get_none():
    assert microkernel.for_target(parse_target("cpu:x86-64")) is None  # SSE2 only
    assert "FMA" in microkernel.why_not(parse_target("cpu:x86-64"))
    assert "not a CPU" in microkernel.why_not(parse_target("cuda"))


@needs_fma
def test_the_hosts_intrinsic_registers_once_and_from_a_trace():
    from tvm.s_tir import TensorIntrin

    mk = microkernel.for_target(HOST)
    assert microkernel.register(mk) == microkernel.register(mk) == mk.name
    assert TensorIntrin.get(mk.name) is not None
    other = next(n for n in microkernel.MICROKERNEL_NAMES if n != mk.name)
    microkernel.register_for_trace(f'[["Tensorize", [], ["{other}"]]]')
    assert TensorIntrin.get(other, allow_missing=True) is not None
    microkernel.register_for_trace("schedx_fma_f32_8x100000x4")  # not a shape schedx makes: ignored
    assert TensorIntrin.get("schedx_fma_f32_8x100000x4", allow_missing=True) is None


@needs_fma
def test_hand_tensorized_matmul_matches_numpy_and_uses_fma_of_the_hosts_width():
    mk = microkernel.for_target(HOST)
    k = builtin_kernel("matmul", M=64, N=4 * mk.nr, K=32)
    sch = tensorized_matmul(k, mk)
    assert "T.Broadcast" in sch.mod.script()
    assert check(k, sch.mod, target=HOST, isolate=False) == (True, "")
    assert _fmas(_asm(sch.mod, HOST), mk.nr) > 0


@x86_only
def test_avx512_kernel_builds_to_zmm_fma_without_running():
    target = parse_target("cpu:x86-64-v4")
    mk = microkernel.for_target(target)
    sch = tensorized_matmul(builtin_kernel("matmul", M=16, N=32, K=8), mk)
    assert _fmas(_asm(sch.mod, target), 16) > 0  # built for AVX-512; not run here


def _spaces(kernel):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from explorer.tvm_fast import light_tensor_intrin

    light_tensor_intrin(HOST.intrinsics)
    ctx = ms.TuneContext(mod=tvm.IRModule({"main": kernel.func}), target=HOST.tvm(),
                         space_generator=space_generator(HOST, None, microkernel=True), search_strategy="evolutionary",
                         num_threads=2)
    return ctx, ctx.generate_design_space()


@needs_fma
def test_the_rule_makes_sketches_around_the_kernel_and_samples_verify():
    from tvm import s_tir

    from explorer.ir.plain import to_plain
    from explorer.schedule.session import ScheduleSession
    from explorer.schedule.trace import trace_to_steps

    k = builtin_kernel("matmul", M=64, N=64, K=64)
    ctx, spaces = _spaces(k)
    mk = microkernel.for_target(HOST)
    assert spaces and all(mk.name in str(s.trace) for s in spaces)  # the meta_schedule.auto_tensorize mark
    for attempt in range(20):
        sch = s_tir.Schedule(k.func, seed=attempt + 1)
        spaces[0].trace.apply_to_schedule(sch, True, lambda inst, inputs, attrs, decision:
                                          None if inst.kind.name.startswith("Sample") else decision)
        if all(p.apply(sch) for p in ctx.space_generator.postprocs):
            break
    kinds = [inst.kind.name for inst in sch.trace.insts]
    assert "Tensorize" in kinds and "T.Broadcast" in sch.mod.script()
    assert check(k, sch.mod, target=HOST, isolate=False) == (True, "")
    steps = trace_to_steps(k.func, to_plain(sch.trace.as_json()))  # what a record shows
    assert any(s.primitive == "tensorize" and s.args["intrin"] == mk.name for s in steps)
    session = ScheduleSession(k.func)  # and the steps apply again as a hand schedule
    session.apply_all(steps)
    assert check(k, session.mod, target=HOST, isolate=False) == (True, "")


@needs_fma
@pytest.mark.parametrize("spec", ["matmul:M=60,N=60,K=60", "conv2d_nchw:C=8,H=8,W=8,K=8"])
def test_blocks_the_kernel_does_not_fit_keep_the_default_tiling(spec):
    from explorer.kernels import load_kernel

    _, spaces = _spaces(load_kernel(spec))  # 60 is no multiple of 8; NCHW's W is no B row
    assert spaces and not any(microkernel.NAME_PREFIX in str(s.trace) for s in spaces)
    assert all("meta_schedule.tiling_structure" in str(s.trace) for s in spaces)


@x86_only
def test_search_option_is_off_by_default_and_refused_without_fma():
    from search.tune import _space_generator

    assert SearchParams().microkernel is False
    assert SearchParams.from_dict(SearchParams(microkernel=True).to_dict()).microkernel is True
    from types import SimpleNamespace

    import tvm

    float_task = SimpleNamespace(mod=tvm.IRModule())  # no int8 kernel in it: MetaSchedule's own defaults
    assert _space_generator(HOST, SearchParams())(float_task) == "post-order-apply"
    with pytest.raises(SearchError, match="micro-kernel"):
        _space_generator(parse_target("cpu:x86-64"), SearchParams(microkernel=True))


@needs_fma
def test_a_search_with_the_option_records_tensorized_candidates(tmp_path):
    from explorer.workload import kernel_task
    from search.job_spec import ValidJob
    from search.tune import tune
    from store import Store
    from tests.fake_measure import FakeBuilder, FakeRunner

    store = Store(tmp_path / "s.db")
    params = SearchParams(trials=8, per_batch=8, cost_model="random", population=16, generations=1,
                          init_min_unmeasured=8, microkernel=True, defaults_first=False)
    tune(ValidJob.of_tasks([kernel_task(builtin_kernel("matmul", M=64, N=64, K=64))], HOST), store, params,
         builder=FakeBuilder(), runner=FakeRunner())
    records = store.records()
    assert records and all(microkernel.for_target(HOST).name in str(r.trace) for r in records)


def test_tune_has_the_flag():
    from click.testing import CliRunner

    from app.cli_search import tune

    out = CliRunner().invoke(tune, ["--help"]).output
    assert "--microkernel" in out and "micro-kernel" in out


@needs_fma
def test_sketches_command_shows_the_micro_kernel_sketches_and_samples_them():
    import json

    from click.testing import CliRunner

    from app.cli import cli

    spec = "matmul:M=64,N=64,K=64"
    plain = json.loads(CliRunner().invoke(cli, ["sketches", spec, "--json"]).output)
    assert not any("MultiLevelTilingWithIntrin" in s["rules"] for s in plain["sketches"])
    r = CliRunner().invoke(cli, ["sketches", spec, "--microkernel", "--sample", "1", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    tiled = [s for s in data["sketches"] if "MultiLevelTilingWithIntrin" in s["rules"]]
    assert tiled and microkernel.NAME_PREFIX in json.dumps(tiled[0]["trace"])
    assert tiled[0]["samples"] and microkernel.NAME_PREFIX in json.dumps(tiled[0]["samples"][0])
    refused = CliRunner().invoke(cli, ["sketches", spec, "--microkernel", "--target", "cpu:x86-64"])
    assert refused.exit_code != 0 and "micro-kernel" in refused.output
