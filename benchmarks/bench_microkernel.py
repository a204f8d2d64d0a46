"""Benchmark: the best search records of several databases (e.g. ``schedx tune`` with and without
``--microkernel``) retimed side by side, single-threaded and by process CPU time, so that other
processes on a shared machine slow no side more than the other.

Procedure used for issue 11 lever 3 (matmul 512, 32 trials each, seeds 0 and 1)::

    TVM_NUM_THREADS=2 schedx tune matmul:M=512,N=512,K=512 --trials 32 --seed S --db base_sS.sqlite
    TVM_NUM_THREADS=2 schedx tune matmul:M=512,N=512,K=512 --trials 32 --seed S --microkernel --db mk_sS.sqlite
    python -m benchmarks.bench_microkernel matmul:M=512,N=512,K=512 base_s0.sqlite mk_s0.sqlite ...

Prints, per database, its 3 best verified search records: the GFLOPS the search recorded, then
the best of 5 interleaved rounds by CPU time (and by wall time) on one thread.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time

os.environ["TVM_NUM_THREADS"] = "1"  # before TVM starts its thread pool


def main(spec: str, dbs: list[str], rounds: int = 5, calls: int = 5) -> None:
    import numpy as np

    from explorer.tvm_fast import hold_back_torch, light_tensor_intrin

    hold_back_torch()
    import tvm

    from explorer.kernels import load_kernel
    from explorer.schedule.trace import replay
    from explorer.target import host_target

    kernel, target = load_kernel(spec), host_target()
    light_tensor_intrin(target.intrinsics)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in kernel.random_inputs(0)] + \
        [tvm.runtime.tensor(np.zeros(b.shape, b.dtype), dev) for b in kernel.outputs]
    funcs = {}
    for db in dbs:
        rows = sqlite3.connect(db).execute(
            "select trace, gflops from records where source='search' and status='ok' and verified=1 "
            "order by gflops desc limit 3").fetchall()
        funcs[db] = [(tvm.compile(replay(kernel.func, json.loads(t)).mod, target=target.tvm())["main"], g)
                     for t, g in rows]
    best = {db: [(0.0, 0.0) for _ in funcs[db]] for db in dbs}
    for _ in range(rounds):
        for db in dbs:
            for i, (f, _g) in enumerate(funcs[db]):
                f(*args)
                cpu0, wall0 = time.process_time(), time.perf_counter()
                for _ in range(calls):
                    f(*args)
                cpu, wall = (time.process_time() - cpu0) / calls, (time.perf_counter() - wall0) / calls
                gf = (kernel.info.flops / cpu / 1e9, kernel.info.flops / wall / 1e9)
                best[db][i] = (max(best[db][i][0], gf[0]), max(best[db][i][1], gf[1]))
    for db in dbs:
        print(os.path.basename(db), "  ".join(f"{g:.1f} -> {c:.1f} cpu ({w:.1f} wall)"
                                              for (_f, g), (c, w) in zip(funcs[db], best[db])))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
