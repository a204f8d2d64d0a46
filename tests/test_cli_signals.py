"""Ctrl-C and SIGTERM for every command (issue 49): exit status 130 and 143 as the README says,
an export interrupted at any stage publishes nothing, and temporary folders go with the process
that made them (or with the next command, when it died without cleaning up). Real processes and
real signals; a search's own stop (one batch, then 130) is tests/test_search_stop.py's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from explorer.fault_points import HOLD_VAR, MARK_VAR
from explorer.processes import process_alive

pytestmark = pytest.mark.heavy  # real exports and measurements in child processes

ROOT = Path(__file__).resolve().parent.parent
SCHEDX = [sys.executable, "-m", "app.cli"]


def _start(argv: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait(test, proc: subprocess.Popen, timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if test():
            return True
        time.sleep(0.02)
    return test()


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (``SigCgt`` in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (signum - 1) & 1)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, err.decode(errors="replace")


@pytest.mark.parametrize("signum, status, said", [(signal.SIGINT, 130, "interrupted (Ctrl-C)"),
                                                  (signal.SIGTERM, 143, "terminated (SIGTERM)")],
                         ids=["ctrl-c", "sigterm"])
def test_an_export_stopped_between_writing_and_publishing_publishes_nothing(tmp_path, signum, status, said):
    """Before: Ctrl-C printed 'Error: aborted' and exited 1; SIGTERM killed the process where it
    stood, its staging folder left beside the destination."""
    parent, mark = tmp_path / "out", tmp_path / "held"
    proc = _start(SCHEDX + ["export", "matmul:M=16,N=16,K=16", "--no-db", "-o", str(parent / "bundle")],
                  env={HOLD_VAR: "export.written:120", MARK_VAR: str(mark)})
    assert _wait(mark.exists, proc), proc.communicate()[1].decode()[-2000:]
    proc.send_signal(signum)
    rc, err = _finish(proc)
    assert rc == status, err[-2000:]
    assert said in err and "Traceback" not in err and "aborted" not in err
    assert list(parent.iterdir()) == []  # no bundle, no staging folder


@pytest.mark.parametrize("argv, signum, status, held", [
    (["measure", "matmul:M=64,N=64,K=64"], signal.SIGINT, 130, {}),
    # small_cnn's pipeline can finish before the signal lands: held after loading until it does
    (["passes", "small_cnn"], signal.SIGTERM, 143, {HOLD_VAR: "passes.loaded:120"}),
], ids=["measure-ctrl-c", "passes-sigterm"])
def test_every_command_exits_130_on_ctrl_c_and_143_on_sigterm(tmp_path, argv, signum, status, held):
    """The command line turns both signals into exceptions for every command, once (its group's
    main); the signal lands while the command loads TVM and works."""
    proc = _start(SCHEDX + argv, env={"SCHEDX_DB": str(tmp_path / "x.db"), **held})
    assert _wait(lambda: _catches(proc.pid, signal.SIGTERM), proc, 60), "SIGTERM is never handled"
    proc.send_signal(signum)
    rc, err = _finish(proc)
    assert rc == status and "Traceback" not in err, err[-2000:]


# Ctrl-C that lands while TVM's C++ calls back into Python (tvm.compile does, all the time): TVM
# hands it back as a bare RuntimeError, which the layer check took for a check that could not run
LAYER_CHECK_CTRL_C = """
import os, signal, sys, time
import tvm_ffi
from explorer.models import onnx_import

@tvm_ffi.register_global_func("schedx_test.ctrl_c")
def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)

real = onnx_import.import_onnx

def import_onnx(model, *args, name=None, **kwargs):
    if name == "layers":  # the layer-by-layer check's import
        tvm_ffi.get_global_func("schedx_test.ctrl_c")()
    return real(model, *args, name=name, **kwargs)

onnx_import.import_onnx = import_onnx
sys.argv = ["schedx", *sys.argv[1:]]
from app.cli import main
main()
"""


def test_ctrl_c_inside_tvm_during_the_layer_check_publishes_nothing(tmp_path):
    """Before: 'layer check did not run: RuntimeError', the bundle published, exit 0."""
    parent = tmp_path / "out"
    proc = _start([sys.executable, "-c", LAYER_CHECK_CTRL_C, "export", "small_cnn", "--no-db", "-o",
                   str(parent / "bundle")])
    rc, err = _finish(proc)
    assert rc == 130, err[-2000:]
    assert "Traceback" not in err and "layer check did not run" not in err
    assert not parent.exists() or list(parent.iterdir()) == []


def test_sigterm_during_verification_removes_its_temp_folder(tmp_path):
    """Before: `$TMPDIR/schedx-verify-XXXX/` stayed forever after SIGTERM."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _start(SCHEDX + ["export", "matmul:M=16,N=16,K=16", "--no-db", "-o", str(tmp_path / "bundle")],
                  env={"TMPDIR": str(tmp)})
    assert _wait(lambda: any(tmp.glob("schedx-verify-*")), proc), proc.communicate()[1].decode()[-2000:]
    proc.send_signal(signal.SIGTERM)
    rc, err = _finish(proc)
    assert rc == 143, err[-2000:]
    assert [p.name for p in tmp.iterdir() if p.name.startswith("schedx-")] == []
    assert not (tmp_path / "bundle").exists()


def test_temp_folders_carry_their_pid_and_the_next_command_sweeps_the_dead_ones(tmp_path, monkeypatch):
    """A process killed with -9 (or any that died without unwinding) leaves its folders; the next
    `schedx` command removes those whose process is gone, and only those."""
    import tempfile

    from app.cli import cli
    from explorer.temp_dirs import private_temp_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not process_alive(dead.pid)
    with private_temp_dir("schedx-verify-") as mine:
        assert Path(mine).parent == tmp_path and Path(mine).name.startswith(f"schedx-verify-pid{os.getpid()}-")
        assert Path(mine).stat().st_mode & 0o777 == 0o700
        for name in (f"schedx-verify-pid{dead.pid}-abc123", f"schedx-in-model-pid{dead.pid}-x_9"):
            (tmp_path / name / "sub").mkdir(parents=True)
        kept = [f"schedx-uploads-{dead.pid}-abc", "schedx-faults-abc", f"other-pid{dead.pid}-x"]
        for name in kept:
            (tmp_path / name).mkdir()
        assert CliRunner().invoke(cli, ["pipelines"]).exit_code == 0
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept + [Path(mine).name])
    with pytest.raises(ValueError), private_temp_dir("verify"):
        pass


def test_a_signal_during_the_removal_waits_until_the_folder_is_gone(tmp_path, monkeypatch):
    """Before: a SIGTERM that landed inside ``rmtree`` left half a folder (CI, stop 65)."""
    import shutil

    from explorer.interrupts import Terminated, handling_signals
    from explorer.temp_dirs import private_temp_dir

    real, seen = shutil.rmtree, []

    def signalled_midway(path, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered now, were it not held back
        seen.append(Path(path).exists())
        real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", signalled_midway)
    with pytest.raises(Terminated), handling_signals():
        with private_temp_dir("schedx-verify-", dir=tmp_path) as folder:
            (Path(folder) / "outputs.npz").write_bytes(b"x" * 1000)
        time.sleep(1)  # not reached: the held signal arrives as the removal ends
    assert seen == [True] and list(tmp_path.iterdir()) == []


def test_an_interrupted_command_removes_a_folder_no_block_knows_of(tmp_path, monkeypatch):
    """A signal between ``mkdtemp`` and the ``with`` leaves a folder no block removes: the command
    exiting on the interrupt removes its own process's folders (and only those)."""
    import tempfile

    from app.cli import cli
    from explorer.interrupts import Terminated

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "schedx-verify-pid1-other").mkdir()  # another process's (pid 1 is alive)

    def made_then_terminated(*args, **kwargs):
        tempfile.mkdtemp(prefix=f"schedx-verify-pid{os.getpid()}-")
        raise Terminated("terminated (SIGTERM)")

    monkeypatch.setattr(cli.commands["pipelines"], "callback", made_then_terminated)
    result = CliRunner().invoke(cli, ["pipelines"])
    assert result.exit_code == 143, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["schedx-verify-pid1-other"]
