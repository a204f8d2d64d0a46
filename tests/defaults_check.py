"""Child-process checks of default schedules (a native crash fails one test, not the run).

``python -m tests.defaults_check verify MODEL [TARGET]``: every task of a zoo model, default
scheduled for TARGET (default ``cpu``), against its unscheduled kernel on the same random inputs,
outputs pre-filled with random values (a schedule that drops a reduction's init fails).
``python -m tests.defaults_check speed MODEL N``: the N hottest tasks, default and unscheduled,
timed in alternation, median of a few runs each.
``python -m tests.defaults_check odd``: kernels of shapes the rules were not written for, default
scheduled for AVX-512 and AVX2 sized vectors, against their unscheduled kernels.
One JSON line per task on stdout.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np
import tvm
from tvm import te

from explorer.measure.verify import compare
from explorer.schedule.defaults import CpuSpec, default_schedule
from explorer.target import parse_target
from explorer.workload import load_workload, owned_task_module


def _cpu(target) -> CpuSpec:
    return CpuSpec.of(vector_width=target.vector_width, features=target.features, arch=target.arch,
                      cores=target.config.get("num-cores"))


def _arrays(func, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in func.params:
        shape, dtype = [int(s) for s in p.shape], str(p.dtype)
        out.append(rng.standard_normal(shape).astype(dtype) if "float" in dtype
                   else rng.integers(0, 4, shape).astype(dtype))
    return out


def _run(lib, arrays: list[np.ndarray]) -> list[np.ndarray]:
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    lib["main"](*args)
    return [a.numpy() for a in args]


def _check(name: str, func, cpu: CpuSpec, tvm_target) -> None:
    scheduled, choice = default_schedule(func, cpu)
    arrays = _arrays(func, 0)
    # every buffer compared: the outputs, and the inputs that neither may change
    ref = _run(tvm.compile(owned_task_module(func), target=tvm_target), arrays)
    got = _run(tvm.compile(owned_task_module(scheduled), target=tvm_target), arrays)
    ok, _, rel_err, why = compare(got, ref)
    print(json.dumps({"task": name, "rule": choice.rule, "verified": ok, "rel": rel_err, "why": why,
                      "steps": list(choice.steps), "fallback": choice.fallback_reason}), flush=True)


def verify(model: str, target_spec: str) -> None:
    target = parse_target(target_spec)
    tvm_target, cpu = target.tvm(), _cpu(target)
    for task in load_workload(model).tasks():
        _check(task.name, task.mod["main"], cpu, tvm_target)


def odd_kernels() -> dict[str, tvm.tirx.PrimFunc]:
    """Kernels of shapes the rules were not written for: a reduction to a scalar, a gather, fp16
    with an odd inner extent, an int8 matmul accumulating in int32, a cumulative sum."""
    n = 96
    a = te.placeholder((n, n), "float32", name="A")
    k = te.reduce_axis((0, n), "k")
    total = te.compute((1,), lambda _: te.sum(a[k, k] * 2, axis=k), name="trace")
    idx = te.placeholder((n,), "int32", name="idx")
    gathered = te.compute((n, n), lambda i, j: a[idx[i] % n, j], name="gather")
    half = te.placeholder((n, 7), "float16", name="H")
    scaled = te.compute((n, 7), lambda i, j: half[i, j] * te.const(3, "float16"), name="scale")
    x8 = te.placeholder((64, 64), "int8", name="X")
    w8 = te.placeholder((64, 64), "int8", name="W")
    r = te.reduce_axis((0, 64), "r")
    acc = te.compute((64, 64), lambda i, j: te.sum(x8[i, r].astype("int32") * w8[r, j].astype("int32"), axis=r),
                     name="imatmul")
    from tvm import topi

    cum = topi.cumsum(a, axis=1)
    return {"trace": te.create_prim_func([a, total]), "gather": te.create_prim_func([a, idx, gathered]),
            "fp16": te.create_prim_func([half, scaled]), "int8 matmul": te.create_prim_func([x8, w8, acc]),
            "cumsum": te.create_prim_func([a, cum])}


def odd() -> None:
    tvm_target = parse_target("cpu").tvm()
    for width, registers in ((512, 32), (256, 16)):
        cpu = CpuSpec(vector_bits=width, registers=registers, cores=2, arch="x86_64")
        for name, func in odd_kernels().items():
            _check(f"{name} ({width}-bit)", func, cpu, tvm_target)


def _median_s(lib, arrays, runs: int) -> float:
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    lib["main"](*args)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        lib["main"](*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def speed(model: str, count: int) -> None:
    target = parse_target("cpu")
    tvm_target, cpu = target.tvm(), _cpu(target)
    for task in load_workload(model).tasks()[:count]:
        func = task.mod["main"]
        scheduled, choice = default_schedule(func, cpu)
        arrays = _arrays(func, 0)
        naive = tvm.compile(owned_task_module(func), target=tvm_target)
        default = tvm.compile(owned_task_module(scheduled), target=tvm_target)
        naive_s, default_s = [], []
        for _ in range(3):  # alternate, so that a busy moment of the machine hits both
            naive_s.append(_median_s(naive, arrays, 1))
            default_s.append(_median_s(default, arrays, 5))
        print(json.dumps({"task": task.name, "rule": choice.rule, "naive_s": statistics.median(naive_s),
                          "default_s": statistics.median(default_s)}), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else ""
    arg = sys.argv[3] if len(sys.argv) > 3 else ""
    if mode == "verify":
        verify(model, arg or "cpu")
    elif mode == "odd":
        odd()
    else:
        speed(model, int(arg or 2))
