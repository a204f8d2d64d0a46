"""A default schedule on AMX tiles opens as steps that rebuild it: the steps of a bf16 convolution's
or an int8 one's default (what the Leaderboard's "open in Schedule page" and a steps file hold)
name intrinsics made per shape (``schedx_amx_bf16conv_*``, ``schedx_amx_u8i8_*``), and the
``tensorize`` step takes exactly the names schedx can register. Compile only, for
``cpu:sapphirerapids``: any host."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import tvm_ffi
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest
from tvm import te

from app.cli import cli
from explorer.passes.qdq_int8 import conv2d_nhwc_int8
from explorer.schedule.defaults import default_schedule
from explorer.schedule.intrinsics import is_schedx_name
from explorer.schedule.session import ScheduleSession
from explorer.schedule.steps import StepsFileError, dump_steps, parse_steps
from explorer.schedule.trace import trace_to_steps
from explorer.target import parse_target
from tests.cpu_marks import NEEDS_AMX
from tests.direct_bf16_conv import direct_conv_func

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "app" / "ui" / "schedule.py")
SPR = "cpu:sapphirerapids"

# A child process applies a steps file with none of schedx's intrinsics registered yet (the Schedule
# page or `schedx measure --steps` after a restart), then checks the kernel against the trace's replay.
_APPLY_IN_A_FRESH_PROCESS = """
import json, sys
import tvm_ffi
from tvm.s_tir import TensorIntrin
from explorer.schedule.session import ScheduleSession
from explorer.schedule.steps import load_steps
from explorer.schedule.trace import replay
from tests.cpu_marks import NEEDS_AMX
from tests.direct_bf16_conv import direct_conv_func

shape, steps_path, trace_path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
steps = load_steps(steps_path)
names = [s.args["intrin"] for s in steps if s.primitive == "tensorize"]
fresh = all(TensorIntrin.get(n, allow_missing=True) is None for n in names)
session = ScheduleSession(direct_conv_func(*shape))
session.apply_all(steps)
want = replay(direct_conv_func(*shape), json.loads(open(trace_path).read())).mod["main"]
print(json.dumps({"fresh": fresh, "names": names, "equal": tvm_ffi.structural_equal(session.mod["main"], want)}))
"""


@pytest.mark.parametrize("shape, shows", [
    ((1, 3, 32, 32, 64, 7, 2, 3), "_rows_u"),  # the stem: a kernel row a tile row
    ((1, 64, 7, 7, 256, 3, 1, 1), "merge"),  # a 7x7 map of 8 panels: the epilogue per panel (merged loops)
], ids=["stem", "panels-7x7-map"])
def test_an_amx_bf16_conv_default_reopens_from_its_steps_file_in_a_fresh_process(tmp_path, shape, shows):
    cpu = replace(parse_target(SPR).cpu_spec(), cores=2)  # the panels rule's epilogue per panel: at 2 cores
    func = direct_conv_func(*shape)
    scheduled, choice = default_schedule(func, cpu)
    steps = trace_to_steps(func, choice.trace)
    text = dump_steps(steps)
    assert shows in text and "schedx_amx_bf16conv_zeroed_by_call_" in text, text
    (tmp_path / "steps.json").write_text(text)
    (tmp_path / "trace.json").write_text(json.dumps(choice.trace))
    session = ScheduleSession(func)  # here, as the page applies them
    session.apply_all(parse_steps(text))
    assert tvm_ffi.structural_equal(session.mod["main"], scheduled)
    done = subprocess.run([sys.executable, "-c", _APPLY_IN_A_FRESH_PROCESS, json.dumps(shape),
                           str(tmp_path / "steps.json"), str(tmp_path / "trace.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["fresh"] and len(result["names"]) == 2 and result["equal"], result


@pytest.mark.heavy  # a UI page
@NEEDS_AMX  # the page builds the kernel for this machine: LLVM aborts on tile code for a CPU without AMX
def test_the_schedule_page_opens_an_amx_bf16_conv_default_record_as_its_steps(tmp_path):
    """The Leaderboard's "Open in Schedule page" on the default record a search stores for an AMX
    convolution (its trace only): the page shows the trace as steps and applies them."""
    from explorer.kernels import make_kernel
    from explorer.target.environment import hardware_fingerprint
    from explorer.workload import kernel_task
    from search.records import task_workload
    from store import Record, Store

    kernel = make_kernel(direct_conv_func(1, 64, 7, 7, 256, 3, 1, 1), name="amx_conv", title="amx_conv",
                         source="test", spec="amx_conv", params={})
    task = kernel_task(kernel)
    scheduled, choice = default_schedule(task.mod["main"], replace(parse_target(SPR).cpu_spec(), cores=2))
    steps = trace_to_steps(task.mod["main"], choice.trace)
    workload = task_workload(task, source="search")
    with Store(tmp_path / "d.db") as store:
        store.add_workload(workload)
        record_id = store.add_record(Record(
            workload_key=workload.key, target='{"kind": "llvm"}', hardware=hardware_fingerprint(), source="default",
            status="ok", steps=[], trace=choice.trace, latencies=[1e-4], median_s=1e-4, gflops=None, environment={}))
    at = AppTest.from_file(PAGE, default_timeout=300)
    at.session_state["db_path"] = str(tmp_path / "d.db")
    at.session_state["open_record"] = record_id
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert [s.value for s in at.success if s.value.startswith("Opened the record's")] == \
        [f"Opened the record's {len(steps)} steps on record:{record_id}."], [s.value for s in at.success]
    session = at.session_state["schedule_sessions"][f"record:{record_id}"]
    assert session.steps == steps
    assert tvm_ffi.structural_equal(session.mod["main"], scheduled)


def test_an_amx_int8_conv_default_reopens_from_its_steps():
    x = te.placeholder((1, 16, 16, 64), "uint8", name="X")  # a 3x3 over 64 channels onto 14x14, 32 outputs
    w = te.placeholder((2, 3, 3, 16, 16, 4), "int8", name="W")
    func = te.create_prim_func([x, w, conv2d_nhwc_int8(x, w, 1, 1, 14, 14, 63)])
    scheduled, choice = default_schedule(func, parse_target(SPR).cpu_spec())
    text = dump_steps(trace_to_steps(func, choice.trace))
    assert "schedx_amx_u8i8_14x1x2_k64_s1_t3x3" in text, text
    session = ScheduleSession(func)
    session.apply_all(parse_steps(text))
    assert tvm_ffi.structural_equal(session.mod["main"], scheduled)


def test_the_names_a_tensorize_step_takes_are_those_schedx_registers():
    for name in ("schedx_fma_f32_8x16x4", "schedx_dot_u8i8_vnni_4x16", "schedx_dot_bf16_avx512bf16_8x16",
                 "schedx_dot_bf16_amx_32x32x256_zero_u", "schedx_amx_u8i8_14x1x2_k64_s1_t3x3_z",
                 "schedx_amx_bf16conv_16x1x2_k4_s2_t7x7_rows_u", "schedx_amx_bf16conv_zeroed_by_call_28x32_y2"):
        assert is_schedx_name(name), name
    for name in ("schedx_amx_u8i8_14x1x2_k64_s1_t3x3_junk", "schedx_amx_bf16conv_", "schedx_dot_u8i8_vnni_5x16",
                 "dot_16x4_avx512", "", 3,
                 # spellings registered under another name: leading zeros, defaults spelt out
                 "schedx_amx_u8i8_014x1x2_k64_s1_t3x3", "schedx_dot_bf16_amx_16x16x0256",
                 "schedx_amx_u8i8_14x1x2_k64_s1_t3x3_y1", "schedx_amx_bf16conv_16x1x2_k4_s2_t7x7_rows_y1",
                 "schedx_amx_bf16conv_16x1x2_k4_s2_t7x7_rows_g1x1", "schedx_dot_bf16_amx_16x16x32_kb1",
                 "schedx_dot_bf16_amx_16x16x32_g1x1", "schedx_amx_bf16conv_zeroed_by_call_28x32_y1",
                 # a width on a walk other than flat, flat without one
                 "schedx_amx_bf16conv_16x1x2_k4_s2_t7x7_rows5_u", "schedx_amx_bf16conv_16x1x2_k4_s2_t7x7_taps7",
                 "schedx_amx_bf16conv_16x1x2_k4_s2_t7x7_flat"):
        assert not is_schedx_name(name), name  # the whole name, as registered; TVM's own are listed apart
    assert is_schedx_name("schedx_amx_bf16conv_16x4x1_k32_s1_t3x3_flat9_u")


def test_an_unknown_intrinsic_in_a_steps_file_is_refused_with_the_families_it_could_be(tmp_path):
    bad = {"primitive": "tensorize", "args": {"target": "C", "intrin": "schedx_amx_u8i8_16x2"}}
    with pytest.raises(StepsFileError, match="AMX-INT8 tiles") as err:
        parse_steps(json.dumps([bad]))
    assert "dot_16x4_avx512" in str(err.value) and "AMX-BF16 convolution tiles (schedx_amx_bf16conv_" in str(err.value)
    steps = tmp_path / "bad.json"
    steps.write_text(json.dumps([bad]))
    result = CliRunner().invoke(cli, ["measure", "matmul:M=16,N=16,K=16", "--steps", str(steps)])
    assert result.exit_code != 0
    assert "'intrin' must be a tensor intrinsic" in result.output and "got 'schedx_amx_u8i8_16x2'" in result.output, \
        result.output
