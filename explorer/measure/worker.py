"""Measure one schedule in a child process (``python -m explorer.measure.worker``).

A schedule can crash the process that runs it (a bad tensorize, an out-of-bounds store) or hang
it. The parent sends a pickled job on stdin and reads one JSON line back; a child killed by a
signal or past its time becomes a failed result, and the parent lives on.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys

from explorer.measure.result import MeasureResult
from store.outcome import Outcome

RESULT_PREFIX = "SCHEDX_RESULT "


def run_in_child(job: dict, timeout: float) -> MeasureResult:
    """Run :func:`_measure_job` on ``job`` in a fresh interpreter; failures come back as data."""
    base = {"flops": job["flops"], "target": job["target_text"]}
    try:
        from explorer.target.environment import threads_env

        proc = subprocess.run([sys.executable, "-m", "explorer.measure.worker"], input=pickle.dumps(job),
                              capture_output=True, timeout=timeout, check=False, env=threads_env())
    except subprocess.TimeoutExpired:
        return MeasureResult(status=Outcome.TIMEOUT, error=f"no result within {timeout:.0f} s (the kernel may hang)", **base)
    for line in reversed(proc.stdout.decode(errors="replace").splitlines()):
        if line.startswith(RESULT_PREFIX):
            return MeasureResult.from_dict(json.loads(line[len(RESULT_PREFIX):]))
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        if sig == "SIGILL":  # the machine's fault, not the schedule's: the code uses an instruction this CPU lacks
            return MeasureResult(status=Outcome.RUN_ERROR, error=(
                f"illegal instruction (SIGILL): the target {job['target_text']} uses an instruction this CPU does "
                f"not have; measure with --target cpu (this machine's features)"), **base)
        return MeasureResult(status=Outcome.RUN_ERROR, error=f"the kernel crashed its process ({sig})", **base)
    tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
    why = " | ".join(tail) or f"it exited with status {proc.returncode} and printed nothing"
    return MeasureResult(status=Outcome.RUN_ERROR, error="measurement process failed: " + why, **base)


def _measure_job(job: dict) -> MeasureResult:
    import numpy as np

    from explorer.measure.run import build, measure_module, run_once

    inputs = job["inputs"]
    references = job.get("references")
    if references is None and job.get("reference_func") is not None:
        import tvm

        ref_mod = build(tvm.IRModule({"main": job["reference_func"]}), job["target"])
        _, references = run_once(ref_mod, inputs, job["output_specs"])
    del np
    return measure_module(job["mod"], target=job["target"], target_text=job["target_text"], flops=job["flops"],
                          inputs=inputs, output_specs=job["output_specs"], references=references,
                          repeat=job["repeat"], min_repeat_s=job["min_repeat_s"], min_bytes=job["min_bytes"])


def _main() -> int:
    job = pickle.loads(sys.stdin.buffer.read())
    result = _measure_job(job)
    try:
        sys.stdout.write(RESULT_PREFIX + json.dumps(result.to_dict()) + "\n")
        sys.stdout.flush()
    except OSError:  # the parent is gone (BrokenPipeError): nobody to answer
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
    return 0


if __name__ == "__main__":
    sys.exit(_main())
