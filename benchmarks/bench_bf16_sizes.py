"""Benchmark: where a weight product starts to pay in bf16, by size (the sweep behind
:func:`explorer.passes.bf16_dense.why_fp32`).

For each ``M x N x K`` of a small grid (rows 16-256, channels and reduction 64-768: a small
encoder's products up to BERT's), the product ``y = x @ W`` (``W`` a weight) is built with
schedx's default schedules as fp32, as bf16 on AVX512-BF16 (``vdpbf16ps``) and, where the CPU has
them, as bf16 on AMX tiles (:mod:`benchmarks.bench_bf16`'s builds), and the three are timed in
alternated rounds in one process (``--rounds``; each a ``time_evaluator`` of at least
``--min-ms``), at ``--threads`` (TVM's pool, set before TVM starts). Prints one JSON line per shape:
the median microseconds of each build and bf16's ratio to fp32 (< 1: bf16 faster), then the load.

Run: ``python -m benchmarks.bench_bf16_sizes --threads 2 [--rows 16,64 --cols 64,256 --depth 64,768]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def sweep(shapes: list[tuple[int, int, int]], *, rounds: int, min_ms: int):
    """Yield one row a shape (see the module docstring)."""
    import numpy as np
    import tvm

    from benchmarks.bench_bf16 import matmul_builds
    from explorer.passes.bf16_dense import pack_weights
    from explorer.target import host_target

    target = host_target()
    for m, n, k in shapes:
        rng = np.random.default_rng(0)
        x, w = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
        builds = matmul_builds(m, n, k, target)
        timers = {}
        for name, (lib, _) in builds.items():
            args = [tvm.runtime.tensor(a) for a in (x, w if name == "fp32" else pack_weights(w),
                                                     np.zeros((m, n), "float32"))]
            timer = lib.jit().time_evaluator("main", tvm.cpu(), number=1, repeat=1, min_repeat_ms=int(min_ms))
            timers[name] = (timer, args)
        times = {name: [] for name in timers}
        for _ in range(rounds):
            for name, (timer, args) in timers.items():
                times[name].append(timer(*args).mean * 1e6)
        us = {name: round(statistics.median(t), 2) for name, t in times.items()}
        yield {"shape": [m, n, k], "us": us,
               "ratio": {name: round(t / us["fp32"], 2) for name, t in us.items() if name != "fp32"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="16,32,64,128,256")
    ap.add_argument("--cols", default="64,256,768")
    ap.add_argument("--depth", default="64,256,768")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-ms", type=int, default=5)
    opts = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(opts.threads)  # before TVM starts its pool
    shapes = [(m, n, k) for m in _ints(opts.rows) for n in _ints(opts.cols) for k in _ints(opts.depth)]
    for row in sweep(shapes, rounds=opts.rounds, min_ms=opts.min_ms):
        print(json.dumps(row), flush=True)
    print(json.dumps({"threads": opts.threads, "loadavg": open("/proc/loadavg").read().split()[:3]}))


if __name__ == "__main__":
    main()
