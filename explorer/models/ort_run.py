"""Run and time an ONNX model with ONNX Runtime on the CPU (the reference and the baseline).

Kept next to the model sources so that ``explorer.models`` needs nothing from the export room;
``explorer.workload.reference`` and the export room take their sessions from here.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import onnx


def ort_session(model: onnx.ModelProto, threads: int | None = None, *, profile_prefix: str | None = None):
    """An ONNX Runtime CPU session with ``threads`` intra-op threads (default: the usable cores),
    its own log messages silenced below errors; with ``profile_prefix``, its profiler on (its
    file there)."""
    import onnxruntime as ort

    from explorer.target.environment import cpu_info

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads or cpu_info()["usable_cores"])
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def ort_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray], *, threads: int | None = None,
                session=None) -> list[np.ndarray]:
    """Every output of ``model`` on ``inputs`` (a session may be passed to reuse it)."""
    session = session or ort_session(model, threads)
    return session.run(None, inputs)


def ort_latency(session, inputs: dict[str, np.ndarray], *, runs: int = 20, budget_s: float = 5.0) -> float:
    """Median seconds per run of ``session`` on ``inputs``: one warm-up run, then up to ``runs``
    timed runs, fewer when ``budget_s`` is spent (at least three)."""
    session.run(None, inputs)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < runs and (len(times) < 3 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        session.run(None, inputs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


__all__ = ["ort_latency", "ort_outputs", "ort_session"]
