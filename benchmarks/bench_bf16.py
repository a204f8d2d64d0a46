"""Benchmark: fp32 against bf16 products (schedx's default schedules), one kernel at a time.

For each shape ``M x N x K`` (a 1024^3 matmul, BERT's 128 x 768 -> 3072 dense layer), the same
product ``y = x @ W`` with ``W`` a weight (constant at build time) is built three ways for this
machine and timed in alternated rounds (the machines here are shared):

- ``fp32``: the default fp32 schedule (:mod:`explorer.schedule.defaults.tiling`);
- ``bf16 avx512``: :mod:`explorer.passes.bf16_dense`'s kernel around ``vdpbf16ps``;
- ``bf16 amx``: the same kernel on AMX tiles (where the CPU has AMX-BF16).

Each bf16 build rounds ``x`` to bf16 inside the kernel (counted in its time); ``W`` is packed
once, before timing. Errors are against numpy fp32, relative to the output's largest magnitude.
Prints the machine first. Run: ``python -m benchmarks.bench_bf16 [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess

import numpy as np

SHAPES = ((1024, 1024, 1024), (128, 3072, 768))


def machine() -> dict:
    model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    flags = sorted({f for ln in open("/proc/cpuinfo") if ln.startswith("flags") for f in ln.split()
                    if f in ("avx512_bf16", "amx_bf16", "amx_tile")})
    return {"cpu": model, "bf16_flags": flags, "cores": os.cpu_count(),
            "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}


def matmul_builds(m: int, n: int, k: int, target) -> dict:
    """An m x k by k x n matmul under its default schedule for ``target``, compiled: in fp32 and in
    bf16 on each bf16 instruction the CPU has, by name ("fp32", "bf16 amx", ...), with its choice."""
    import tvm
    from tvm import te

    from explorer.passes.bf16_dense import dense_bf16
    from explorer.schedule.defaults import default_schedule

    cpu = target.cpu_spec()
    x = te.placeholder((m, k), "float32", "x")
    out = {}
    w32 = te.placeholder((k, n), "float32", "w")
    r = te.reduce_axis((0, k), "r")
    y = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w32[r, j], axis=r), name="matmul")
    out["fp32"] = default_schedule(te.create_prim_func([x, w32, y]), cpu)
    wb = te.placeholder((n // 16, k // 2, 16, 2), "uint16", "w")
    func = te.create_prim_func([x, wb, dense_bf16(x, wb)])
    for isa in [i for i in ("avx512bf16", "amx") if cpu.bf16_dot == "amx" or i == cpu.bf16_dot]:
        out[f"bf16 {isa}"] = default_schedule(func, dataclasses.replace(cpu, bf16_dot=isa))
    return {name: (tvm.compile(tvm.IRModule({"main": f}), target=target.tvm()), choice)
            for name, (f, choice) in out.items()}


def bench(m: int, n: int, k: int, rounds: int) -> dict:
    import tvm

    from explorer.passes.bf16_dense import pack_weights
    from explorer.target import host_target

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
    ref = x @ w
    builds = matmul_builds(m, n, k, host_target())
    args = {}
    for name in builds:
        weights = w if name == "fp32" else pack_weights(w)
        args[name] = [tvm.runtime.tensor(a) for a in (x, weights, np.zeros((m, n), "float32"))]
    errors, times = {}, {name: [] for name in builds}
    for name, (lib, _) in builds.items():
        lib["main"](*args[name])
        errors[name] = float(np.abs(args[name][2].numpy() - ref).max() / np.abs(ref).max())
    timers = {name: lib.jit().time_evaluator("main", tvm.cpu(), number=5, repeat=1)
              for name, (lib, _) in builds.items()}
    for _ in range(rounds):  # alternated: each round times every build once
        for name, timer in timers.items():
            times[name].append(timer(*args[name]).mean)
    flops = 2.0 * m * n * k
    rows = {name: {"gflops_median": round(flops / statistics.median(t) / 1e9, 1),
                   "gflops_best": round(flops / min(t) / 1e9, 1), "rel_error": float(f"{errors[name]:.2e}"),
                   "schedule": builds[name][1].steps[0] if builds[name][1].steps else builds[name][1].rule}
            for name, t in times.items()}
    base = statistics.median(times["fp32"])
    for name, t in times.items():
        rows[name]["speedup_vs_fp32"] = round(base / statistics.median(t), 2)
    return {"shape": f"{m}x{n}x{k}", "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    opts = ap.parse_args()
    result = {"machine": machine(), "results": [bench(m, n, k, opts.rounds) for m, n, k in SHAPES]}
    result["machine"]["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
