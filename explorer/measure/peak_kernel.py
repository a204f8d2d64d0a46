"""A compute-peak kernel: what the FMA units of a CPU target do when nothing else limits them.

Each core runs ``chains`` independent accumulator vectors of the target's fp32 lanes through
``iters`` fused multiply-adds each (``acc = fma(x, y, acc)``: the accumulator is the addend, so
x86 emits ``vfmadd231ps`` and AArch64 ``fmla`` with no register copy). Enough chains that the FMA
latency never limits it (two FMA units x 4 cycles need 8 in flight; the register budget allows
12 with AVX2's 16 registers, 16 with AVX-512's or NEON's 32), the loop over cores parallel over
the target's ``num-cores``. ``x`` and ``y`` are scalar parameters, not buffers, so the loop
touches no memory but the accumulators and LLVM keeps those in registers. FLOPs are exact:
2 x lanes x chains x iters x cores per call. On a target without FMA instructions the kernel
multiplies and adds (``acc * x + y``, two instructions, the same FLOPs).

Everything is read from the target object (:class:`explorer.target.Target`): its vector width,
registers (:class:`explorer.schedule.defaults.CpuSpec`), FMA feature (:class:`CpuArch`) and
cores. ``python -m explorer.measure.peak_kernel`` times it on this machine in a process of its
own (TVM's thread pool sized to the usable cores) and prints one JSON line.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass

MAX_CHAINS = 16  # independent accumulators: twice the 8 that two 4-cycle FMA units need
ITERS = 1 << 20  # FMAs per accumulator and call: a few milliseconds per call on any core


@dataclass(frozen=True)
class PeakKernel:
    """The shape of one compute-peak kernel (see the module docstring)."""

    isa: str  # the target's widest vector ISA as a word (avx512, avx2, neon)
    lanes: int  # fp32 lanes of one vector
    chains: int  # independent accumulator vectors per core
    cores: int
    iters: int = ITERS
    fused: bool = True  # fused multiply-adds (False: the target has none; a multiply and an add)

    @property
    def flops(self) -> int:
        return 2 * self.lanes * self.chains * self.iters * self.cores

    @property
    def label(self) -> str:
        """``FMA kernel AVX512 16 lanes``: what the figure was measured with, for reports."""
        return f"{'FMA' if self.fused else 'mul+add'} kernel {self.isa.upper()} {self.lanes} lanes"

    def to_dict(self) -> dict:
        return asdict(self) | {"flops": self.flops, "label": self.label}


def for_target(target, *, iters: int = ITERS) -> PeakKernel:
    """The peak kernel of a CPU ``target`` (an :class:`explorer.target.Target`): its lanes,
    accumulators that fit its vector registers, and its cores. ``ValueError`` for a target
    that is not a CPU or whose vector width is unknown."""
    from explorer.target.arches import CPU_ARCHES

    if not getattr(target, "cpu_rules", target.searchable) or not target.vector_width:
        raise ValueError(f"no compute-peak kernel for {target.label}: not a CPU target of known vector width")
    spec = target.cpu_spec()
    known = CPU_ARCHES.get(target.arch)
    fused = known is None or not known.fma_feature or known.fma_feature in target.features
    return PeakKernel(isa=target.isa, lanes=spec.lanes("float32"), chains=min(MAX_CHAINS, spec.accumulators),
                      cores=spec.cores, iters=int(iters), fused=fused)


def prim_func(kernel: PeakKernel):
    """The kernel as a TensorIR PrimFunc ``main(x, y, out)``: ``out[core, chain, lane]`` receives
    the accumulators (so nothing is dead code)."""
    from tvm.script import tirx as T

    lanes, chains, cores, iters = kernel.lanes, kernel.chains, kernel.cores, kernel.iters

    if kernel.fused:
        @T.macro
        def step(acc, ch, x, y):
            acc[ch, T.ramp(0, 1, lanes)] = T.fma(T.broadcast(x, lanes), T.broadcast(y, lanes),
                                                 acc[ch, T.ramp(0, 1, lanes)])
    else:
        @T.macro
        def step(acc, ch, x, y):
            acc[ch, T.ramp(0, 1, lanes)] = acc[ch, T.ramp(0, 1, lanes)] * T.broadcast(x, lanes) + T.broadcast(y, lanes)

    @T.prim_func(s_tir=True)
    def peak(x: T.float32, y: T.float32, out: T.Buffer((cores, chains, lanes), "float32")):
        for c in T.parallel(cores):
            acc = T.alloc_buffer((chains, lanes), "float32", scope="local")
            for ch in T.unroll(chains):
                acc[ch, T.ramp(0, 1, lanes)] = T.broadcast(y * T.Cast("float32", ch), lanes)
            for _ in range(iters):
                for ch in T.unroll(chains):
                    step(acc, ch, x, y)
            for ch in T.unroll(chains):
                out[c, ch, T.ramp(0, 1, lanes)] = acc[ch, T.ramp(0, 1, lanes)]
    return peak


def build(kernel: PeakKernel, target):
    """Compile the kernel for ``target`` (nothing runs): TVM's executable."""
    return compile_main(prim_func(kernel), target)


def assembly(kernel: PeakKernel, target) -> str:
    """The kernel's assembly for ``target`` (any architecture LLVM builds for; nothing runs)."""
    return executable_asm(build(kernel, target))


def compile_main(func, target):
    """A PrimFunc compiled as ``main`` for ``target`` (an :class:`explorer.target.Target`)."""
    import tvm

    return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm())


def executable_asm(executable) -> str:
    """The assembly of a compiled kernel (:func:`compile_main`'s)."""
    mod = executable.mod
    return (mod.imports[0] if mod.imports else mod).inspect_source("asm")


def time_kernel(kernel: PeakKernel, target, *, repeats: int = 5, min_repeat_s: float = 0.05) -> list[float]:
    """GFLOPS of each of ``repeats`` timed repeats (each about ``min_repeat_s``) on this machine,
    in this process (use :func:`measure_in_child` for a thread pool of the target's cores)."""
    import numpy as np
    import tvm

    target.require_runnable("time the peak kernel")
    rt = build(kernel, target).jit()
    out = tvm.runtime.tensor(np.zeros((kernel.cores, kernel.chains, kernel.lanes), "float32"))
    x, y = 1.0 - 2.0**-20, 2.0**-20  # accumulators stay small and normal: no overflow, no denormals
    once = rt.time_evaluator("main", tvm.cpu(), number=1, repeat=1)(x, y, out).mean  # warm-up too
    number = max(1, math.ceil(min_repeat_s / max(once, 1e-9)))
    times = rt.time_evaluator("main", tvm.cpu(), number=number, repeat=repeats)(x, y, out).results
    if not np.isfinite(out.numpy()).all():
        raise ValueError("the peak kernel computed non-finite numbers")
    return [kernel.flops / t / 1e9 for t in times if t > 0]


def measure_in_child(repeats: int = 5, timeout: float = 300.0, *, module: str = __name__) -> dict:
    """Time the host target's peak kernel in a fresh process whose TVM thread pool has one worker
    per usable core: ``{"gflops": best, "runs": [...], "kernel": {...}}``, or ``{"error": why}``.
    ``module``: another peak module whose ``python -m`` prints one JSON line the same way
    (:mod:`explorer.measure.dot_peaks`)."""
    import subprocess
    from pathlib import Path

    from explorer.target.environment import threads_env

    try:
        proc = subprocess.run([sys.executable, "-m", module, str(repeats)],
                              capture_output=True, text=True, timeout=timeout, env=threads_env(),
                              cwd=str(Path(__file__).resolve().parents[2]), check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"the peak kernel gave no figure within {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = " | ".join(proc.stderr.strip().splitlines()[-2:])
    return {"error": f"the peak kernel's process failed (status {proc.returncode}): {tail}"}


def error_text(err: Exception) -> str:
    """What a child process says of a measurement that failed: ``ValueError: why``."""
    return f"{type(err).__name__}: {err}"


def child_main(measure) -> int:
    """A measuring child's entry point (what :func:`measure_in_child` reads): ``measure()``'s dict printed
    as one JSON line, ``{"error": why}`` where it raised; 0."""
    try:
        result = measure()
    except Exception as err:  # noqa: BLE001 - the caller gets the reason as data
        result = {"error": error_text(err)}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


def _main(argv: list[str]) -> int:
    from explorer.target import host_target

    def measure() -> dict:
        target = host_target()
        kernel = for_target(target)
        runs = time_kernel(kernel, target, repeats=int(argv[0]) if argv else 5)
        return {"gflops": round(max(runs), 1), "runs": [round(g, 1) for g in runs], "kernel": kernel.to_dict(),
                "target": target.label}

    return child_main(measure)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


__all__ = ["ITERS", "MAX_CHAINS", "PeakKernel", "assembly", "build", "child_main", "compile_main", "error_text",
           "executable_asm", "for_target", "measure_in_child", "prim_func", "time_kernel"]
