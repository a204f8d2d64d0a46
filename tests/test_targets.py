"""Targets: every spelling a user types, the host target from the CPU's real features (tested
with the detection overridden, as on a VM that hides AVX-512 or a CPU without AVX2), refusals
before anything would crash, and kernels built for an overridden host running here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from explorer.target.environment import cpu_flags
from explorer.errors import ExplorerError
from explorer.target import TargetError, detect_host, host_cpu, host_target, parse_target
from explorer.target import features as isa

HOST = host_cpu()
X86 = HOST.arch == "x86_64"
needs_x86 = pytest.mark.skipif(not X86, reason="x86 feature names")


def _without(prefixes: tuple[str, ...]) -> set[str]:
    return {f for f in cpu_flags() if not f.startswith(prefixes)}


def test_cpu_is_this_machine_and_runs_here():
    t = parse_target("cpu")
    assert t.kind == "cpu" and t.is_host and t.runs_here and t.arch == HOST.arch
    assert t.tvm().kind.name == "llvm"
    assert t.config["num-cores"] == HOST.cores
    assert parse_target("cpu", cores=1).config["num-cores"] == 1
    assert parse_target("host").key == parse_target("llvm").key == t.key
    # nothing the host target enables is missing from what the CPU reports
    assert not (t.features - HOST.features)


@needs_x86
@pytest.mark.parametrize("hidden, gone", [(("avx512",), "avx512f"), (("avx512", "avx2"), "avx2")])
def test_a_machine_that_hides_features_gets_a_target_without_them(hidden, gone):
    host = detect_host(_without(hidden))
    if gone not in host.llvm_features:
        pytest.skip(f"LLVM's {host.llvm_cpu} has no {gone} to hide")
    assert gone in host.missing and gone not in host.features
    width = 256 if "avx2" not in hidden else None
    if width:
        assert host.vector_width == 256 and host.isa == "avx2"


@needs_x86
def test_host_override_through_the_environment_changes_target_and_fingerprint(monkeypatch):
    from explorer.target.environment import hardware_fingerprint

    monkeypatch.setenv("SCHEDX_CPU_FLAGS", " ".join(_without(("avx512",))))
    t = host_target()
    if "avx512f" not in host_cpu().llvm_features:
        pytest.skip("this CPU's LLVM name has no AVX-512 to hide")
    assert "-avx512f" in t.config["mattr"] and t.vector_width == 256
    assert "avx512" not in hardware_fingerprint()
    assert t.notes and "switched off" in t.notes[0]
    # the same name typed explicitly means the full instruction set: built, but not runnable here
    named = parse_target(f"cpu:{host_cpu().llvm_cpu}")
    assert "avx512f" in named.features and not named.runs_here
    with pytest.raises(TargetError, match="avx512f.*--target cpu"):
        named.require_runnable("measure")


_RUN_HERE = """
import json, sys
import numpy as np
from explorer.kernels import builtin_kernel
from explorer.measure import check
from explorer.schedule.session import ScheduleSession
from explorer.schedule.steps import Step
from explorer.target import host_target
k = builtin_kernel("matmul", M=64, N=64, K=64)
s = ScheduleSession(k.func)
s.apply_all([Step("split", {"loop": "C/j", "factors": [None, 16]}), Step("vectorize", {"loop": "C/j_1"})])
ok, why = check(k, s.mod)
print(json.dumps({"ok": ok, "why": why, "target": host_target().config}))
"""


@needs_x86
@pytest.mark.parametrize("hidden", [("avx512",), ("avx512", "avx2", "fma")])
def test_a_vectorized_kernel_built_for_an_overridden_host_runs_and_verifies_here(hidden):
    env = {"SCHEDX_CPU_FLAGS": " ".join(_without(hidden)), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", _RUN_HERE], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, **env})
    assert proc.returncode == 0, proc.stderr[-2000:]  # a SIGILL would kill the child, not the suite
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"], out["why"]
    if "avx512f" in HOST.llvm_features:
        assert "-avx512f" in out["target"].get("mattr", [])


def test_named_cpus_and_features():
    t = parse_target("cpu:x86-64-v3" if X86 else "cpu:generic")
    assert not t.is_host and t.cpu_name in ("x86-64-v3", "generic")
    if X86:
        assert t.runs_here == ("avx2" in HOST.features and "fma" in HOST.features)
        assert "avx2" in t.features and "avx512f" not in t.features
        minus = parse_target("cpu:x86-64-v4,-avx512f")
        assert minus.config["mattr"] == ["-avx512f"] and "avx512f" not in minus.features
        plus = parse_target("cpu:x86-64+avx2")
        assert "avx2" in plus.features
        assert parse_target("cpu:-avx512f").config["mcpu"] == HOST.llvm_cpu or not HOST.llvm_cpu


def test_json_targets_are_checked():
    t = parse_target(json.dumps({"kind": "llvm", "num-cores": 3}))
    assert t.config["num-cores"] == 3 and t.runs_here
    assert parse_target(t.key).key == t.key  # a record's target text parses back to itself


@pytest.mark.parametrize("spec, words", [
    ("tpu", "unknown target 'tpu'"),
    ("cuda:sm_99", "unknown CUDA architecture 'sm_99'"),
    ("cuda:ampere", "unknown CUDA architecture"),
    ("cpu:pentium9", "LLVM does not know the CPU 'pentium9'"),
    ("cpu:nosuchcpu", "`schedx targets` lists"),
    ("cpu:-mattr=+avx", "LLVM knows no feature"),
    ("cpu:znver4,avx2", "features are \\+NAME or -NAME"),
    ("cpu:+nofeature", "LLVM knows no feature 'nofeature'"),
    ('{"kind": "llvm", "mcpu": 123}', "'mcpu' must be a str"),
    ('{"kind": "llvm", "num-cores": 0}', "must be positive"),
    ('{"kind": "llvm", "mcpu": "nosuchcpu"}', "LLVM does not know the CPU"),
    ('{"kind": "opencl"}', "unknown target kind"),
    ('{"kind": "llvm", "bogus": 1}', "target key 'bogus' is unknown to TVM's llvm kind; its keys are kind, .*mcpu"),
    ('{"kind": "llvm", "mcpux": "znver3", "zz": 1}', "keys 'mcpux', 'zz' are unknown .*did you mean 'mcpu'"),
    ('{"kind": "cuda", "arch": "sm_80", "bogus": 1}', "'bogus' is unknown to TVM's cuda kind; its keys .*arch"),
    ("{not json", "not valid JSON"),
    ("aarch64:nosuchcore", "LLVM does not know the CPU"),
    ("riscv64", "unknown target"),
])
def test_bad_targets_say_what_is_wrong(spec, words):
    with pytest.raises(TargetError, match=words) as info:
        parse_target(spec)
    assert isinstance(info.value, ExplorerError)  # the CLI and the pages show it as a message


@pytest.mark.parametrize("spec, arch", [("cuda", "sm_80"), ("cuda:sm_90", "sm_90"), ("CUDA:sm_86", "sm_86"),
                                        ("cuda:90", "sm_90")])
def test_cuda_arches(spec, arch):
    t = parse_target(spec)
    assert t.kind == "cuda" and t.config == {"kind": "cuda", "arch": arch}
    assert t.host == {"kind": "llvm"}  # generic host: runs on whatever machine holds the GPU
    tvm_target = t.tvm()
    assert tvm_target.kind.name == "cuda" and tvm_target.host.kind.name == "llvm"
    assert t.accepts(json.dumps({"kind": "cuda", "arch": arch, "max_num_threads": 1024}))
    assert not t.accepts(json.dumps({"kind": "cuda", "arch": "sm_50"}))
    assert not t.searchable


def test_aarch64_is_a_cross_target():
    t = parse_target("aarch64:cortex-a76")
    assert t.kind == "cpu" and t.arch == "aarch64" and t.cpu_name == "cortex-a76"
    assert t.config["mtriple"] == "aarch64-linux-gnu"
    assert "neon" in t.features and "dotprod" in t.features
    if HOST.arch != "aarch64":
        assert t.cross and not t.runs_here and "aarch64" in t.why_not_here()
        assert t.compiler == "aarch64-linux-gnu-g++"
        with pytest.raises(TargetError, match="aarch64 code"):
            t.require_runnable("run")


def test_feature_tables_map_both_ways():
    assert isa.missing({"avx512f", "avx2", "fast-gather"}, {"avx2"}, "x86_64") == ["avx512f"]
    assert isa.missing({"dotprod", "neon"}, {"asimd"}, "aarch64") == ["dotprod"]
    assert isa.vector_width({"avx2", "avx"}, "x86_64") == 256
    assert isa.arch_of("aarch64-unknown-linux-gnu") == "aarch64"


def test_schedx_targets_lists_host_cpus_cuda_and_cross(tmp_path):
    from click.testing import CliRunner

    from app.cli import cli

    result = CliRunner().invoke(cli, ["targets", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["host"]["runs_here"] and data["host"]["cpu"]["arch"] == HOST.arch
    assert any(c["spec"] == "cpu:x86-64" for c in data["cpus"]) or not X86
    assert data["cuda"] and all("runs_here" in c for c in data["cuda"])
    assert any(c["spec"] == "aarch64" for c in data["cross"]) or HOST.arch == "aarch64"
    text = CliRunner().invoke(cli, ["targets"])
    assert text.exit_code == 0 and "this machine" in text.output


def test_a_record_whose_target_does_not_fit_its_machine_is_flagged():
    from explorer.target import record_mismatch

    avx512 = json.dumps({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    if X86:
        assert "avx512" in record_mismatch(avx512, "x86_64/AMD EPYC/avx2/2c")
        assert record_mismatch(avx512, "x86_64/Intel Xeon/avx512/2c") == ""
        assert record_mismatch(parse_target("cpu:x86-64-v3").key, "x86_64/AMD EPYC/avx2/2c") == ""
        assert "aarch64 code" in record_mismatch(parse_target("aarch64").key, "x86_64/AMD EPYC/avx2/2c")
    assert record_mismatch(avx512, "rpc:pi4") == ""  # a device behind RPC is not judged
    assert record_mismatch("not json", "x86_64/x/avx2/2c") == ""
