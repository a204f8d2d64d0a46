"""Measurement through TVM's RPC tracker and two servers on loopback."""

from __future__ import annotations

import pytest

from explorer.kernels import builtin_kernel
from explorer.target import host_target
from search.errors import SearchError
from search.params import SearchParams
from search.rpc import check_tracker, local_cluster
from search.runner import RpcSpec
from explorer.workload import kernel_task
from search.job_spec import ValidJob
from search.tune import tune
from store import Store


def _listening(pids: list[int]) -> list[str]:
    """The addresses these processes and their children listen on."""
    import psutil

    found = []
    for pid in pids:
        try:
            procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for p in procs:
            try:
                found += [c.laddr.ip for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
    return found


@pytest.mark.slow  # real tracker and two servers: ~30 s (make test-slow)
def test_search_through_a_tracker_and_two_servers(tmp_path):
    import psutil

    store = Store(tmp_path / "rpc.db")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with local_cluster(servers=2, key="loopback") as rpc:
        started = [p.pid for p in psutil.Process().children() if p.pid not in before]
        listening = _listening(started)
        assert listening and all(ip in ("127.0.0.1", "::1") for ip in listening), listening  # never 0.0.0.0
        job = ValidJob.of_tasks([kernel_task(builtin_kernel("matmul", M=64, N=64, K=64))], host_target(), rpc=rpc)
        summary = tune(job, store, SearchParams(trials=8, per_batch=4, population=32, generations=1,
                                                init_min_unmeasured=8))
    every = store.records()
    records = [r for r in every if "confirmation" not in r.environment]
    assert summary.trials == 8 and len(records) == 8
    assert {r.hardware for r in every} == {"rpc:loopback"}  # the confirmation round measured there too
    assert sum(r.status == "ok" for r in records) >= 4
    assert len(every) - len(records) == sum(c["timed"] for c in summary.confirmed)


def test_unreachable_tracker_is_refused_before_any_work():
    with pytest.raises(SearchError, match="cannot reach the RPC tracker"):
        check_tracker(RpcSpec("127.0.0.1", 1, "nobody"), timeout=1)
    with pytest.raises(SearchError, match="HOST:PORT"):
        RpcSpec.parse("localhost", "k")
    with pytest.raises(SearchError, match="--rpc-key"):
        RpcSpec.parse("127.0.0.1:9190", "")
    assert RpcSpec.parse(":9190", "k").tracker_host == "127.0.0.1"  # no host: loopback
    # issue 49: a port out of range was tried, then answered with how to start a tracker on it
    for port in ("99999", "0", "65536", "9" * 5000):
        with pytest.raises(SearchError, match="is out of range; a TCP port is 1..65535"):
            RpcSpec.parse(f"host:{port}", "k")
    assert RpcSpec.parse("host:65535", "k").tracker_port == 65535
    with pytest.raises(SearchError, match="loopback"):
        with local_cluster(servers=1, host="0.0.0.0"):
            pass
