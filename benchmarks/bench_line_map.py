"""Benchmark: how much of the hot loop the Schedule page's source <-> assembly view maps to a
TVMScript line (issue 52's goal: >= 90 %), built only (nothing runs, any host checks every ISA):

  1. the five-step matmul 512 (split, split, reorder, vectorize, parallel), per ISA, with each
     loop header's own instructions (its loop control) counted;
  2. schedules drawn from MetaSchedule's sketches of a matmul 128 (what a search measures),
     per ISA.

Run: ``python -m benchmarks.bench_line_map [--targets cpu:x86-64-v3,cpu:skylake-avx512,aarch64:cortex-a76]``.
"""

from __future__ import annotations

import argparse
import sys
import time

FIVE_STEPS = [{"primitive": "split", "args": {"loop": "C/i", "factors": [None, 4]}},
              {"primitive": "split", "args": {"loop": "C/j", "factors": [None, 16]}},
              {"primitive": "reorder", "args": {"loops": ["C/i_0", "C/j_0", "C/k", "C/i_1", "C/j_1"]}},
              {"primitive": "vectorize", "args": {"loop": "C/j_1"}},
              {"primitive": "parallel", "args": {"loop": "C/i_0"}}]


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def share_text(views) -> str:
    s = views.hot_mapped
    if s is None:
        return "no mapping"
    return f"{s.percent:5.1f}% ({s.mapped}/{s.instructions}, hot loop lines {views.hot.first}-{views.hot.last})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="cpu:x86-64-v3,cpu:skylake-avx512,aarch64:cortex-a76")
    parser.add_argument("--seeds", type=int, default=1, help="schedules drawn per sketch")
    args = parser.parse_args()

    from explorer.kernels import builtin_kernel
    from explorer.schedule.codegen import code_views
    from explorer.schedule.session import ScheduleSession
    from explorer.target import parse_target
    from explorer.tvm_fast import light_tensor_intrin
    from search.sketches import generate_sketches, sample_schedule

    targets = [parse_target(t) for t in args.targets.split(",")]
    out("five-step matmul 512 (split, split, reorder, vectorize, parallel)")
    for target in targets:
        session = ScheduleSession(builtin_kernel("matmul", M=512, N=512, K=512).func)
        session.apply_all(FIVE_STEPS)
        start = time.perf_counter()
        views = code_views(session.mod, target)
        m = views.mapping
        loops = ", ".join(f"{h.var} {len(m.asm_lines_of(h.line))}" for h in m.loops) if m else "-"
        out(f"  {target.spec:22s} {share_text(views)}; own instructions per loop: {loops}; "
            f"{time.perf_counter() - start:.2f} s")
    light_tensor_intrin()
    kernel = builtin_kernel("matmul", M=128, N=128, K=128)
    out("schedules drawn from MetaSchedule's sketches, matmul 128")
    for target in targets:
        for sketch in generate_sketches(kernel, target):
            for seed in range(args.seeds):
                session = ScheduleSession(kernel.func)
                session.apply_all(sample_schedule(kernel, sketch, target, seed=seed))
                out(f"  {target.spec:22s} sketch {sketch.index} seed {seed}: "
                    f"{share_text(code_views(session.mod, target))}")


if __name__ == "__main__":
    main()
