"""Benchmark: the schedule editor's responsiveness and what a hand schedule reaches.

Prints, measured in this run:
  1. applying a step and re-rendering the code, loop nest, changed lines and tiling, for
     matmul 512 and ResNet-18's 3x3 conv2d (target <= 200 ms per step);
  2. matmul 512: naive, the hand schedule in assets/steps/matmul_512.json, and numpy (OpenBLAS,
     same machine, same moment) in GFLOPS, and their ratios (target >= 100 GFLOPS).

Run: ``python -m benchmarks.bench_schedule``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from explorer.kernels import builtin_kernel
from explorer.measure import measure
from explorer.measure.calibration import numpy_matmul_gflops
from explorer.schedule.session import ScheduleSession
from explorer.schedule.steps import Step, load_steps
from explorer.schedule.views import changed_lines, loop_nest, main_block, nest_text, tiling

ROOT = Path(__file__).resolve().parent.parent
CONV_STEPS = [Step("split", {"loop": "conv2d_nchw/ff", "factors": [None, 16]}),
              Step("split", {"loop": "conv2d_nchw/xx", "factors": [None, 8]}),
              Step("reorder", {"loops": ["conv2d_nchw/ff_0", "conv2d_nchw/yy", "conv2d_nchw/xx_0", "conv2d_nchw/rc",
                                         "conv2d_nchw/ry", "conv2d_nchw/rx", "conv2d_nchw/xx_1", "conv2d_nchw/ff_1"]}),
              Step("parallel", {"loop": "conv2d_nchw/ff_0"}), Step("vectorize", {"loop": "conv2d_nchw/ff_1"}),
              Step("compute_inline", {"block": "pad_temp"})]


def step_latency(kernel_name: str, steps: list[Step]) -> list[float]:
    kernel = builtin_kernel(kernel_name)
    session = ScheduleSession(kernel.func)
    previous = session.mod.script()
    times = []
    for step in steps:
        start = time.perf_counter()
        session.apply(step)
        func = session.mod["main"]
        script = session.mod.script()
        changed_lines(previous, script)
        nest_text(loop_nest(func))
        tiling(func, main_block(func))
        times.append(time.perf_counter() - start)
        previous = script
    return times


def numpy_gflops(n: int = 512, repeats: int = 20) -> float:
    """numpy (OpenBLAS) fp32 matmul, without OpenBLAS core pins (see explorer.measure.calibration)."""
    return numpy_matmul_gflops(n, repeats)


def main() -> None:
    hand = load_steps(ROOT / "assets" / "steps" / "matmul_512.json")
    for name, steps in (("matmul 512", hand), ("conv2d_nchw 1x64x56x56 k3", CONV_STEPS)):
        kernel = "matmul" if name.startswith("matmul") else "conv2d_nchw"
        t = step_latency(kernel, steps)
        print(f"{name}: apply a step + re-render code, loop nest, changed lines, tiling over {len(t)} steps: "
              f"median {statistics.median(t) * 1e3:.1f} ms, max {max(t) * 1e3:.1f} ms (target <= 200 ms)")
    k = builtin_kernel("matmul")
    session = ScheduleSession(k.func)
    session.apply_all(hand)
    naive = measure(k)
    tuned = measure(k, session.mod)
    ref = numpy_gflops()
    print(f"matmul 512 fp32 (threads: {tuned.environment.get('threads')}):")
    print(f"  naive TVM          {naive.gflops:8.1f} GFLOPS")
    print(f"  hand schedule      {tuned.gflops:8.1f} GFLOPS  ({len(hand)} steps, verified={tuned.verified}; "
          f"target >= 100)")
    print(f"  numpy (OpenBLAS)   {ref:8.1f} GFLOPS")
    print(f"  hand / numpy = {tuned.gflops / ref:.2f}   hand / naive = {tuned.gflops / naive.gflops:.0f}x   "
          f"% of measured peak = {tuned.percent_of_peak:.0f}%")


if __name__ == "__main__":
    main()
