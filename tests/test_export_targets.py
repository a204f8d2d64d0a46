"""Export targets: what a user types becomes a TVM target dict, or a clear error."""

from __future__ import annotations

import pytest

from explorer.errors import ExplorerError
from explorer.export.errors import TargetError
from explorer.export.targets import parse_target
from explorer.measure import host_target


def test_cpu_is_this_machine():
    t = parse_target("cpu")
    assert t.device == "cpu" and t.is_host_cpu and t.config == dict(host_target())
    assert t.tvm_target().kind.name == "llvm"
    assert parse_target("cpu", num_cores=1).config["num-cores"] == 1


def test_named_cpu_keeps_the_core_count_and_warns_it_may_not_run_here():
    t = parse_target("cpu:skylake-avx512")
    assert t.config == {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": host_target()["num-cores"]}
    assert not t.is_host_cpu and t.notes
    assert t.label.startswith("llvm skylake-avx512")


@pytest.mark.parametrize("spec, arch", [("cuda", "sm_80"), ("cuda:sm_90", "sm_90"), ("CUDA:sm_86", "sm_86"),
                                        ("cuda:90", "sm_90")])
def test_cuda_arches(spec, arch):
    t = parse_target(spec)
    assert t.device == "cuda" and t.config == {"kind": "cuda", "arch": arch}
    assert t.host == {"kind": "llvm"}  # generic host: runs on whatever machine holds the GPU
    tvm_target = t.tvm_target()
    assert tvm_target.kind.name == "cuda" and tvm_target.host.kind.name == "llvm"


@pytest.mark.parametrize("spec, words", [
    ("tpu", "unknown target 'tpu'"),
    ("", "unknown target"),
    ("cuda:sm_99", "unknown CUDA architecture 'sm_99'"),
    ("cuda:ampere", "unknown CUDA architecture"),
    ("cpu:pentium9", "LLVM does not know the CPU 'pentium9'"),
    ("cpu:-mattr=+avx", "LLVM does not know the CPU"),
])
def test_bad_targets_say_what_is_wrong(spec, words):
    with pytest.raises(TargetError, match=words) as info:
        parse_target(spec)
    assert isinstance(info.value, ExplorerError)  # the CLI and the page show it as a message
