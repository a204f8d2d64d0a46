"""The memory guard: a kernel whose measurement cannot fit in the free memory is refused, with
the bytes it needs, before anything is allocated (``measure matmul:M=30000,...`` used to build its
inputs and reference until the machine ran out)."""

from __future__ import annotations

import resource

import pytest
import tvm
from click.testing import CliRunner

from app.cli import cli
from explorer.kernels import builtin_kernel
from explorer.measure import MemoryLimitError, check, measure
from explorer.measure.memory import buffer_bytes, check_memory, free_bytes, measure_bytes
from explorer.target import host_target
from explorer.workload import kernel_task
from search import worker_jobs
from search.errors import InfrastructureError, SearchError
from search.job_spec import ValidJob
from search.params import SearchParams
from search.tune import tune
from store import Store

HUGE = "matmul:M=1048576,N=1048576,K=1048576"  # 4 TB per matrix: more than any machine has free


def test_a_kernel_too_large_for_memory_is_refused_before_anything_is_allocated():
    k = builtin_kernel("matmul", M=2**20, N=2**20, K=2**20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(MemoryLimitError, match=r"needs about .* TB of memory .* is free"):
        measure(k)
    with pytest.raises(MemoryLimitError):
        check(k, tvm.IRModule({"main": k.func}))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KB: nothing big allocated


def test_the_estimate_counts_inputs_outputs_and_their_copies():
    ins, outs = buffer_bytes([((30000, 30000), "float32", False), ((30000, 30000), "float32", False),
                              ((30000, 30000), "float32", True)])
    assert ins == 2 * 3.6e9 and outs == 3.6e9
    assert measure_bytes(ins, outs) == 4 * ins + 5 * outs  # 46.8 GB for the matmul of the issue
    with pytest.raises(MemoryLimitError, match="46.8 GB|43.6 GB"):
        check_memory(measure_bytes(ins, outs), "measuring matmul 30000", free=8 * 2**30)
    check_memory(2**20, "a little", free=8 * 2**30)
    assert free_bytes() > 0


def test_the_share_is_a_setting(monkeypatch):
    monkeypatch.setenv("SCHEDX_MEMORY_SHARE", "1e-12")
    with pytest.raises(MemoryLimitError, match="at most 0%"):
        measure(builtin_kernel("matmul", M=64, N=64, K=64))
    with pytest.raises(InfrastructureError, match="needs about"):  # in the search worker: the machine's limit
        worker_jobs.measure("/nonexistent.tar", [((64, 64), "float32", False), ((64, 64), "float32", True)],
                            {"number": 1, "repeat": 1, "min_repeat_ms": 0}, None)


def test_measure_cli_says_so_in_one_line():
    r = CliRunner().invoke(cli, ["measure", HUGE, "--timeout", "5"], obj={})
    assert r.exit_code == 1 and "needs about" in r.output, r.output
    assert r.output.strip().splitlines()[-1].startswith("Error: ")


def test_a_search_too_large_for_memory_is_refused_before_it_starts(tmp_path):
    k = builtin_kernel("matmul", M=2**20, N=2**20, K=2**20)
    with pytest.raises(SearchError, match="needs about"):
        tune(ValidJob.of_tasks([kernel_task(k)], host_target()), Store(tmp_path / "s.db"),
             SearchParams(trials=8, per_batch=4))


def test_an_export_too_large_for_memory_is_refused_before_it_builds(tmp_path):
    """Issue 30, probes 1 and 2: `schedx export matmul:M=30000,...` was never refused (RSS grew to
    14 GB), and a model given a batch of 2e9 died of MemoryError ("a bug in schedx")."""
    import onnx
    from onnx import TensorProto, helper

    r = CliRunner().invoke(cli, ["export", HUGE, "-o", str(tmp_path / "k"), "--no-db"], obj={})
    assert r.exit_code == 1 and "exporting" in r.output and "needs about" in r.output, r.output
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "sym",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "sym.onnx")
    r = CliRunner().invoke(cli, ["export", str(tmp_path / "sym.onnx"), "--shapes", "batch=2000000000", "-o",
                                 str(tmp_path / "m"), "--no-db"], obj={})
    assert r.exit_code == 1 and "needs about" in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "k").exists() and not (tmp_path / "m").exists()
