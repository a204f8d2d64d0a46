"""Build a scheduled module for the CPU, run it, verify it, time it (in this process).

Timing follows TVM's own ``time_evaluator``: one warm-up run, then ``repeat`` repeats of
``number`` runs each, ``number`` sized so that a repeat lasts about ``min_repeat_s``. The run,
its verification and its timing hold the machine's measuring lock (:mod:`explorer.measure.lock`).
Use :func:`explorer.measure.measure` to do all this in a child process that may crash or hang.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time

import numpy as np
import tvm

from explorer.errors import short_tvm_message
from explorer.measure.lock import measuring
from explorer.measure.result import MeasureResult
from explorer.measure.verify import compare
from store.outcome import Outcome


def build(mod: tvm.IRModule, target: dict):
    """Compile ``mod`` for ``target`` and JIT it; returns the runtime module."""
    return tvm.compile(mod, target=tvm.target.Target(target)).jit()


def without_layout_rewrites(mod: tvm.IRModule) -> tvm.IRModule | None:
    """``mod`` as an export runs it and a search times it: a weight the schedule reads in another
    layout arrives packed (``meta_schedule.layout_rewrite_preproc`` blocks removed; the export packs
    constant weights once, at build time), or None when ``mod`` packs nothing."""
    import tvm_ffi
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    timed = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return None if tvm_ffi.structural_equal(timed, mod) else timed


def _timing_args(timed: tvm.IRModule, args: list) -> list:
    """Arguments for ``timed``: ``args`` where a parameter kept its shape, zeros of the packed
    shape where the schedule reads a packed weight (values do not change the time)."""
    out = []
    for param, arg in zip(timed["main"].params, args):
        shape = tuple(int(d) for d in param.shape)
        out.append(arg if tuple(arg.shape) == shape else tvm.runtime.tensor(np.zeros(shape, str(param.dtype))))
    return out


def run_once(rt_mod, inputs: list[np.ndarray], output_specs: list[tuple[tuple[int, ...], str]]):
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    outs = [tvm.runtime.tensor(np.zeros(shape, dtype), dev) for shape, dtype in output_specs]
    rt_mod["main"](*args, *outs)
    return args + outs, [o.numpy() for o in outs]


def measure_module(mod: tvm.IRModule, *, target: dict, target_text: str, flops: int, inputs: list[np.ndarray],
                   output_specs: list[tuple[tuple[int, ...], str]], references: list[np.ndarray] | None,
                   repeat: int = 5, min_repeat_s: float = 0.1, min_bytes: int = 0) -> MeasureResult:
    """Build, run once and verify against ``references``, then time (``repeat=0``: no timing, a
    verified result has no latencies). Failures become results. A kernel that packs a weight is
    verified whole and timed without the packing (:func:`without_layout_rewrites`), as a search
    times its candidates and as an export runs it."""
    base = {"flops": flops, "target": target_text,
            "arithmetic_intensity": (flops / min_bytes) if min_bytes else None}
    start = time.perf_counter()
    try:
        rt_mod = build(mod, target)
    except Exception as err:
        return MeasureResult(status=Outcome.BUILD_ERROR, error=short_tvm_message(err), **base)
    build_s = time.perf_counter() - start
    # timed runs on this machine never overlap (builds may); a check (repeat=0: run once and compare, nothing
    # timed) need not wait for the machine
    with measuring(what=target_text) if repeat else contextlib.nullcontext():
        try:
            args, outputs = run_once(rt_mod, inputs, output_specs)
        except Exception as err:
            return MeasureResult(status=Outcome.RUN_ERROR, error=short_tvm_message(err), build_seconds=build_s, **base)
        verified, abs_err, rel_err, why = (True, 0.0, 0.0, "") if references is None else compare(outputs,
                                                                                                 references)
        checks = {"max_abs_error": abs_err, "max_rel_error": rel_err, "verified": verified, "build_seconds": build_s}
        if not verified or repeat == 0:
            return MeasureResult(status=Outcome.OK if verified else Outcome.VERIFY_FAILED, error=why, **checks, **base)
        try:
            timed = without_layout_rewrites(mod)
            if timed is not None:
                rt_mod, args = build(timed, target), _timing_args(timed, args)
            evaluator = rt_mod.time_evaluator("main", tvm.cpu(), number=1, repeat=1)
            once = evaluator(*args).mean
            number = max(1, math.ceil(min_repeat_s / max(once, 1e-9)))
            evaluator = rt_mod.time_evaluator("main", tvm.cpu(), number=number, repeat=repeat)
            latencies = tuple(float(x) for x in evaluator(*args).results)
        except Exception as err:
            return MeasureResult(status=Outcome.RUN_ERROR, error=short_tvm_message(err), **checks, **base)
    median = statistics.median(latencies)
    return MeasureResult(status=Outcome.OK, latencies=latencies, number=number, median_s=median,
                         mean_s=statistics.fmean(latencies),
                         std_s=statistics.pstdev(latencies) if len(latencies) > 1 else 0.0,
                         gflops=flops / median / 1e9 if median > 0 else None, **checks, **base)
