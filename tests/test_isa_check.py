"""A schedule whose instructions the target lacks is refused before LLVM sees it (LLVM aborts the process:
``Cannot select: intrinsic %llvm.x86.tilerelease``): the Schedule page opening an AMX record shows why,
``schedx measure --steps`` exits with it, and the check knows each family by the CPU's flags. This CPU is
played without the family's instructions (``SCHEDX_CPU_FLAGS``), so every test runs on any x86 host; the
page and the CLI run in a child process, where a regression kills the child, not the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tvm
from tvm import te

from explorer.kernels import builtin_kernel
from explorer.measure import check
from explorer.passes.qdq_int8 import dense_int8
from explorer.schedule.defaults import default_schedule
from explorer.schedule.isa_check import FAMILIES, family_of, isa_needs, isa_refusal
from explorer.schedule.session import ScheduleSession
from explorer.schedule.steps import dump_steps, parse_steps
from explorer.schedule.trace import trace_to_steps
from explorer.target import host_cpu, host_target, parse_target
from explorer.target.environment import cpu_flags
from tests.bf16_products import dense_bf16_func

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(host_cpu().arch != "x86_64", reason="the families played here are x86 ones")


def _int8_dense(m: int, n: int, k: int):
    x = te.placeholder((m, k), "uint8", name="A")
    w = te.placeholder((n // 16, k // 4, 16, 4), "int8", name="B_packed")
    return te.create_prim_func([x, w, dense_int8(x, w, 127)])


def _flags_without(*prefixes: str) -> str:
    return " ".join(f for f in cpu_flags() if not f.startswith(prefixes))


# family: the kernel its default schedule puts on it, a target that has it, the flags hidden to play a CPU without
# it, the LLVM feature that CPU then lacks
CASES = {
    "AMX-BF16 tiles": (lambda: dense_bf16_func(64, 64, 512), "cpu:sapphirerapids", ("amx",), "amx-bf16"),
    "AMX-INT8 tiles": (lambda: _int8_dense(64, 64, 512), "cpu:sapphirerapids", ("amx",), "amx-int8"),
    "AVX512-BF16 dot products": (lambda: dense_bf16_func(16, 64, 256), "cpu:cooperlake", ("avx512_bf16", "amx"),
                                 "avx512bf16"),
    "AVX512-VNNI dot products": (lambda: _int8_dense(16, 64, 256), "cpu:icelake-server", ("avx512_vnni", "amx"),
                                 "avx512vnni"),
}


@pytest.mark.parametrize("family", list(CASES))
def test_each_family_is_refused_where_the_flags_lack_it_and_let_through_where_the_target_has_it(monkeypatch, family):
    make, spec, hidden, feature = CASES[family]
    scheduled, _ = default_schedule(make(), parse_target(spec).cpu_spec())
    mod = tvm.IRModule({"main": scheduled})
    assert family in [need.family.name for need in isa_needs(mod)]
    assert isa_refusal(mod, parse_target(spec)) == ""  # compile only, on any machine
    monkeypatch.setenv("SCHEDX_CPU_FLAGS", _flags_without(*hidden))
    why = isa_refusal(mod, host_target())
    assert why.startswith(f"this schedule uses {family} (") and f"this CPU has no {feature}" in why, why
    assert "(compile only" in why, why
    other = isa_refusal(mod, parse_target("cpu:haswell"))  # a named target without them: pick another
    assert "the target llvm haswell" in other and f"pick a target with {family}" in other, other


def test_every_familys_example_target_has_its_instructions():
    for family in FAMILIES:
        if family.example:
            target = parse_target(family.example)
            assert target.arch == family.arch and not family.lacking(target), (family.name, family.example)


@pytest.mark.parametrize("intrinsic, family, lacks_on_haswell", [
    ("llvm.x86.avx512.vpdpbusd.512", "AVX512-VNNI dot products", ("avx512vnni",)),  # TVM's dot_16x4_vnni
    ("llvm.x86.avx512.pmaddubs.w.512", "AVX512-BW", ("avx512bw",)),  # TVM's dot_16x4_avx512
    ("llvm.x86.avx512.vpdpbusd.256", "VNNI dot products", ("avxvnni",)),  # AVX-VNNI or AVX512-VNNI with VL
    ("llvm.x86.avx2.pmadd.ub.sw", "AVX2", ()),
    ("llvm.x86.tilezero", "AMX tiles", ("amx-tile",)),
    ("llvm.x86.sse2.pause", "x86 instructions", ()),  # one the table does not size: let through
    ("llvm.aarch64.neon.sdot.v4i32.v16i8", "dot products (dotprod)", ("aarch64 instructions",)),
])
def test_an_intrinsic_is_known_by_its_llvm_name(intrinsic, family, lacks_on_haswell):
    known = family_of(intrinsic)
    assert known is not None and known.name == family
    assert known.lacking(parse_target("cpu:haswell")) == lacks_on_haswell
    assert family_of("llvm.fma.v16f32") is None and family_of("schedx_dpbf16ps_512") is None


def test_a_kernel_without_instruction_set_intrinsics_needs_nothing():
    scheduled, _ = default_schedule(_int8_dense(16, 64, 256), parse_target("cpu:haswell").cpu_spec())
    mod = tvm.IRModule({"main": scheduled})
    assert isa_refusal(mod, parse_target("cpu:haswell")) == ""
    assert isa_refusal(mod, parse_target("aarch64:cortex-a76")) == ""


def test_x86_instructions_for_an_aarch64_target_are_refused_as_another_architectures():
    scheduled, _ = default_schedule(_int8_dense(16, 64, 256), parse_target("cpu:icelake-server").cpu_spec())
    why = isa_refusal(tvm.IRModule({"main": scheduled}), parse_target("aarch64:cortex-a76"))
    assert why.startswith("this schedule uses x86_64 instructions") and "build it for an x86_64 target" in why, why


_CODE_VIEWS = """
import json, sys
import tvm
from explorer.schedule.codegen import code_views
from explorer.schedule.defaults import default_schedule
from explorer.target import host_target, parse_target
from tests.direct_bf16_conv import direct_conv_func
func = direct_conv_func(1, 64, 7, 7, 256, 3, 1, 1)
scheduled, _ = default_schedule(func, parse_target("cpu:sapphirerapids").cpu_spec())
views = code_views(tvm.IRModule({"main": scheduled}), host_target())
print(json.dumps({"refused": views.refused, "lowered": "T.call_extern" in views.lowered_tir, "asm": views.asm}))
"""


def test_the_code_views_of_an_amx_schedule_for_a_cpu_without_amx_show_the_lowered_tir_and_why_no_more():
    done = subprocess.run([sys.executable, "-c", _CODE_VIEWS], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SCHEDX_CPU_FLAGS": _flags_without("amx")})
    assert done.returncode == 0, done.stderr[-3000:]
    views = json.loads(done.stdout.strip().splitlines()[-1])
    assert views["lowered"] and views["asm"] == "", views
    assert "AMX-BF16 tiles (llvm.x86.tdpbf16ps in schedx_amx_bf16_conv_tile_" in views["refused"], views
    assert "this CPU has no amx-bf16, amx-tile; see its code built for cpu:sapphirerapids (compile only" in views["refused"]


def _amx_int8_matmul_steps() -> str:
    """The AMX-INT8 default of a 64x64x512 int8 dense, as steps for the built-in ``matmul_int8`` (the
    same product: its block is ``C``, its reduction ``k``)."""
    func = _int8_dense(64, 64, 512)
    _, choice = default_schedule(func, parse_target("cpu:sapphirerapids").cpu_spec())
    text = dump_steps(trace_to_steps(func, choice.trace))
    assert "schedx_amx_u8i8_" in text, text
    return text.replace('"dense_int8', '"C').replace("/rk", "/k")


@pytest.mark.parametrize("isolate", [[], ["--no-isolate"]], ids=["child", "no-isolate"])
def test_schedx_measure_with_amx_steps_on_a_cpu_without_amx_exits_with_the_reason(tmp_path, isolate):
    steps = tmp_path / "amx.steps.json"
    steps.write_text(_amx_int8_matmul_steps())
    done = subprocess.run([sys.executable, "-m", "app.cli", "measure", "matmul_int8:M=64,N=64,K=512", "--steps",
                           str(steps), "--repeat", "1", *isolate], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "SCHEDX_CPU_FLAGS": _flags_without("amx")})
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])  # not 134: LLVM never saw the tiles
    assert "LLVM ERROR" not in done.stderr, done.stderr[-2000:]
    assert "Error: cannot measure for llvm " in done.stderr, done.stderr[-2000:]
    assert "AMX-INT8 tiles (llvm.x86.tdpbusd in schedx_amx_u8i8_tile_16x2x2_z): this CPU has no amx-int8, amx-tile" \
           in done.stderr, done.stderr[-2000:]


def test_the_shipped_avx512_int8_steps_file_on_a_cpu_without_avx512_names_tvms_intrinsic_and_a_target():
    """``assets/steps/matmul_int8_avx512.json`` tensorizes with TVM's own ``dot_16x4_avx512``."""
    done = subprocess.run([sys.executable, "-m", "app.cli", "measure", "matmul_int8", "--steps",
                           str(ROOT / "assets" / "steps" / "matmul_int8_avx512.json"), "--repeat", "1", "--no-isolate"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SCHEDX_CPU_FLAGS": _flags_without("avx512", "amx")})
    assert done.returncode == 1 and "LLVM ERROR" not in done.stderr, (done.returncode, done.stderr[-2000:])
    assert "this schedule uses AVX512-BW (llvm.x86.avx512.pmaddubs.w.512, llvm.x86.avx512.pmaddw.d.512): this CPU " \
           "has no avx512bw; see its code built for cpu:skylake-avx512 (compile only" in done.stderr, done.stderr[-2000:]


def test_a_check_of_amx_steps_on_a_cpu_without_amx_fails_with_the_reason_before_any_build(monkeypatch):
    kernel = builtin_kernel("matmul_int8", M=64, N=64, K=512)
    session = ScheduleSession(kernel.func)
    session.apply_all(parse_steps(_amx_int8_matmul_steps()))
    monkeypatch.setenv("SCHEDX_CPU_FLAGS", _flags_without("amx"))
    ok, why = check(kernel, session.mod)  # in a child process: a regression kills the child
    assert not ok and why.startswith("cannot measure for llvm ") and "AMX-INT8 tiles (llvm.x86.tdpbusd" in why, why


_OPEN_ON_THE_PAGE = """
import json, sys
from dataclasses import replace
from streamlit.testing.v1 import AppTest
from explorer.kernels import make_kernel
from explorer.schedule.defaults import default_schedule
from explorer.target import parse_target
from explorer.workload import kernel_task
from search.records import task_workload
from tests.default_records import add_default_record
from tests.direct_bf16_conv import direct_conv_func

db, page = sys.argv[1], sys.argv[2]
kernel = make_kernel(direct_conv_func(1, 64, 7, 7, 256, 3, 1, 1), name="amx_conv", title="amx_conv", source="test",
                     spec="amx_conv", params={})
task = kernel_task(kernel)
_, choice = default_schedule(task.mod["main"], replace(parse_target("cpu:sapphirerapids").cpu_spec(), cores=2))
record_id = add_default_record(db, task_workload(task, source="search"), choice.trace)
at = AppTest.from_file(page, default_timeout=240)
at.session_state["db_path"] = db
at.session_state["open_record"] = record_id
at.run()

def seen(at):
    measure = [b for b in at.button if b.label == "Build & measure"]
    return {"exception": [str(e.value) for e in at.exception], "errors": [e.value for e in at.error],
            "success": [s.value for s in at.success], "measure_disabled": [b.disabled for b in measure],
            "captions": [c.value for c in at.caption]}

opened = seen(at)
picker = at.selectbox(key="schedule_target_pick")
targets = list(picker.options)
picker.select("cpu:sapphirerapids").run()  # the target the refusal names: its code, compile only
print(json.dumps({"opened": opened, "targets": targets, "spr": seen(at)}))
"""


def test_the_schedule_page_opens_an_amx_record_on_a_cpu_without_amx_and_says_why_it_builds_nothing(tmp_path):
    """The Leaderboard's "Open in Schedule page" on an AMX convolution's default record: the page opens its
    steps and shows the code it can (TVMScript, lowered TIR), and says why it builds nothing for this CPU."""
    done = subprocess.run([sys.executable, "-c", _OPEN_ON_THE_PAGE, str(tmp_path / "d.db"),
                           str(ROOT / "app" / "ui" / "schedule.py")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "SCHEDX_CPU_FLAGS": _flags_without("amx")})
    assert done.returncode == 0, done.stderr[-3000:]  # -6 (SIGABRT) before: LLVM ERROR: Cannot select
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    page = seen["opened"]
    assert not page["exception"], page["exception"]
    assert any(s.startswith("Opened the record's") for s in page["success"]), page
    refusals = [e for e in page["errors"] if "this CPU has no amx-bf16, amx-tile" in e]
    assert any(e.startswith("Cannot build or measure this schedule here: this schedule uses AMX-BF16 tiles")
               for e in refusals), page["errors"]
    assert any(e.startswith("not built for llvm ") for e in refusals), page["errors"]  # the LLVM IR and assembly tabs
    assert page["measure_disabled"] == [True], page
    # the target it names is offered, and builds the code (compile only: it does not run here)
    assert seen["targets"][:2] == ["cpu (this machine)", "cpu:sapphirerapids"], seen["targets"]
    spr = seen["spr"]
    assert not spr["exception"] and not spr["errors"], spr
    assert any(c.startswith("llvm sapphirerapids 2c: ") and " instructions; vector: " in c
               for c in spr["captions"]), spr["captions"]  # the assembly built
    assert spr["measure_disabled"] == [True], spr  # not runnable here: the caption says why


_EXPORT_RECORD = """
import json, sys
from explorer.target import host_target, parse_target
from explorer.workload import load_workload
from export.build import _schedule_tasks, workload_tasks
from export.schedules import TaskSchedule
steps = json.loads(sys.stdin.read())
steps = steps["steps"] if isinstance(steps, dict) else steps
workload = load_workload("matmul_int8:M=64,N=64,K=512")
tasks = workload_tasks(workload)
schedules = {tasks[0].name: TaskSchedule(steps=tuple(steps), record_id=7, source="manual")}
target = host_target() if len(sys.argv) < 2 else parse_target(sys.argv[1])
_, outcomes = _schedule_tasks(workload.fused_module(), tasks, schedules, target)
print(json.dumps([[o.schedule, o.record_id, o.error] for o in outcomes]))
"""


def test_an_export_with_an_amx_record_on_a_cpu_without_amx_falls_back_to_the_default_and_says_why():
    """A record made on an AMX machine, exported on one without AMX: the default schedule, the reason in its
    outcome (building the record would abort the process, the Export page's Streamlit server with it)."""
    done = subprocess.run([sys.executable, "-c", _EXPORT_RECORD], input=_amx_int8_matmul_steps(), cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SCHEDX_CPU_FLAGS": _flags_without("amx")})
    assert done.returncode == 0, done.stderr[-3000:]
    (schedule, record, why), = json.loads(done.stdout.strip().splitlines()[-1])
    assert schedule == "failed" and record == 7, (schedule, record, why)
    assert "AMX-INT8 tiles (llvm.x86.tdpbusd" in why and "this CPU has no amx-int8, amx-tile" in why, why


def test_an_export_keeps_an_amx_record_for_a_target_that_has_amx_on_any_host():
    """The same record for ``cpu:sapphirerapids`` (a cross build, compile only): applied, nothing refused."""
    done = subprocess.run([sys.executable, "-c", _EXPORT_RECORD, "cpu:sapphirerapids"], input=_amx_int8_matmul_steps(),
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SCHEDX_CPU_FLAGS": _flags_without("amx")})
    assert done.returncode == 0, done.stderr[-3000:]
    (schedule, record, why), = json.loads(done.stdout.strip().splitlines()[-1])
    assert (schedule, record, why) == ("record", 7, ""), (schedule, record, why)
