"""Dry-run a custom pass list in a child process, so a pass that crashes TVM does not take the
caller (the UI, the CLI) down with it.

Some pass orders crash TVM 0.27 outright: ConvertLayout after FoldBatchnormToConv2D dies with a
segmentation fault. Named pipelines are TVM's own and are run directly; a user's own list is
first run here, in ``python -m explorer.passes.isolate``, which reports each pass as it starts.
If the child dies by a signal, the last pass it started is the one to blame.
"""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys

from explorer.errors import PipelineError

CHECK_TIMEOUT_S = 600


def check_passes_in_child(mod: object, names: list[str], target: dict, timeout: float = CHECK_TIMEOUT_S) -> None:
    """Run ``names`` on ``mod`` in a child process; raise :class:`PipelineError` if it crashes."""
    payload = pickle.dumps((mod, list(names), dict(target)))
    try:
        proc = subprocess.run([sys.executable, "-m", "explorer.passes.isolate"], input=payload,
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as err:
        raise PipelineError(f"the passes {', '.join(names)} did not finish within {timeout:.0f} s") from err
    started = [ln[6:] for ln in proc.stdout.decode(errors="replace").splitlines() if ln.startswith("START ")]
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        culprit = started[-1] if started else names[0]
        raise PipelineError(
            f"pass {culprit!r} crashed TVM ({sig}) after {', '.join(started[:-1]) or 'nothing'}; "
            "this is a TVM bug for this pass order: remove the pass or change the order")


def _child() -> int:
    import tvm
    from tvm.ir.instrument import pass_instrument

    from explorer.passes.catalog import make_pass

    mod, names, target = pickle.loads(sys.stdin.buffer.read())

    @pass_instrument
    class _Report:
        def run_before_pass(self, _mod, info):
            if info.name in names:
                sys.stdout.write(f"START {info.name}\n")
                sys.stdout.flush()

    seq = tvm.transform.Sequential([make_pass(n) for n in names])
    try:
        with tvm.transform.PassContext(opt_level=3, instruments=[_Report()]), tvm.target.Target(target):
            seq(mod)
    except Exception:  # a Python-level failure is reported by the real run, with its message
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(_child())
