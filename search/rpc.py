"""TVM RPC for measuring on other machines: check a tracker before a search starts, and start a
tracker and servers (loopback by default) for local use and tests.

On real machines, the same as TVM documents:
  python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190
  python -m tvm.exec.rpc_server --tracker TRACKER_HOST:9190 --key my-device   (on each device)
  schedx tune WORKLOAD --rpc-tracker TRACKER_HOST:9190 --rpc-key my-device
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from contextlib import contextmanager

from search.errors import SearchError
from search.runner import RpcSpec


def check_tracker(rpc: RpcSpec, timeout: float = 3.0) -> None:
    """Refuse to start a search whose tracker cannot be reached."""
    try:
        with socket.create_connection((rpc.tracker_host, rpc.tracker_port), timeout=timeout):
            pass
    except OSError as err:
        raise SearchError(f"cannot reach the RPC tracker at {rpc.tracker_host}:{rpc.tracker_port} ({err}); "
                          "start one with: python -m tvm.exec.rpc_tracker --port "
                          f"{rpc.tracker_port}") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def servers_ready(rpc: RpcSpec, count: int) -> bool:
    """Whether ``count`` servers with ``rpc.key`` are registered at the tracker."""
    from tvm import rpc as tvm_rpc

    try:
        summary = tvm_rpc.connect_tracker(rpc.tracker_host, rpc.tracker_port).summary()
    except Exception:
        return False
    info = summary.get("queue_info", {}).get(rpc.key, {})
    return int(info.get("free", 0)) + int(info.get("pending", 0)) >= count


@contextmanager
def local_cluster(servers: int = 2, key: str = "local", host: str = "127.0.0.1", timeout: float = 60):
    """A tracker and ``servers`` RPC servers on this machine; yields their :class:`RpcSpec`."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", host, "--port", str(port),
                               "--port-end", str(port + 1),
                               "--silent"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    spec = RpcSpec(host, port, key)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                check_tracker(spec, 0.5)
                break
            except SearchError:
                time.sleep(0.3)
        for _ in range(servers):
            procs.append(subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--tracker",
                                           f"{host}:{port}", "--key", key, "--host", host],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        while time.time() < deadline and not servers_ready(spec, servers):
            time.sleep(0.5)
        if not servers_ready(spec, servers):
            raise SearchError(f"{servers} RPC servers did not register with the tracker within {timeout:.0f} s")
        yield spec
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
