"""TVM RPC for measuring on other machines: check a tracker before a search starts, and start a
tracker and servers (loopback only) for local use and tests.

TVM RPC has no authentication and its servers load and run whatever code a client uploads: keep
trackers and servers on loopback, and reach other machines through SSH tunnels (or on a network
only trusted machines can join). TVM's own scripts bind 0.0.0.0 unless told otherwise, so always
pass ``--host 127.0.0.1``. With one device, from the machine that runs schedx::

  python -m tvm.exec.rpc_tracker --host 127.0.0.1 --port 9190 --port-end 9191
  ssh -N -R 9190:127.0.0.1:9190 -L 9090:127.0.0.1:9090 user@device     # both directions, one connection
  # on the device:
  python -m tvm.exec.rpc_server --host 127.0.0.1 --port 9090 --port-end 9091 \
      --tracker 127.0.0.1:9190 --key my-device --custom-addr 127.0.0.1
  schedx tune WORKLOAD --rpc-tracker 127.0.0.1:9190 --rpc-key my-device

A second device uses another server port (9092 and ``-L 9092:127.0.0.1:9092``), the same tracker.
"""

from __future__ import annotations

import os
import signal
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
                          "start one with: python -m tvm.exec.rpc_tracker --host 127.0.0.1 --port "
                          f"{rpc.tracker_port} (loopback: reach devices through SSH tunnels)") from None


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


LOOPBACK = ("127.0.0.1", "::1", "localhost")


@contextmanager
def local_cluster(servers: int = 2, key: str = "local", host: str = "127.0.0.1", timeout: float = 60):
    """A tracker and ``servers`` RPC servers on this machine, on loopback only (they run any code
    a client uploads: a test must never open them to the network); yields their :class:`RpcSpec`."""
    if host not in LOOPBACK:
        raise SearchError(f"local RPC clusters stay on loopback (127.0.0.1), not {host!r}: TVM RPC has no "
                          "authentication")
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", host, "--port", str(port),
                               "--port-end", str(port + 1),
                               "--silent"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)]
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
                                           f"{host}:{port}", "--key", key, "--host", host, "--custom-addr", host],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        while time.time() < deadline and not servers_ready(spec, servers):
            time.sleep(0.5)
        if not servers_ready(spec, servers):
            raise SearchError(f"{servers} RPC servers did not register with the tracker within {timeout:.0f} s")
        yield spec
    finally:  # each in its own process group: the processes TVM's server forks go with it
        for p in reversed(procs):
            _signal_group(p, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(p, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
