"""Streaming kernels: how fast this machine's cores move bytes through each level of its caches and
from memory, the way a model's kernels move them (for :mod:`explorer.measure.cache_peak`).

Three patterns, each over every usable core at once (TVM's parallel loop, one row of each buffer a
core), with the target's full vectors (``lanes`` fp32, 16 on AVX-512) and several independent
vectors a step:

- ``read``: sums of one buffer (a convolution reading its weights and input: loads only);
- ``copy``: one buffer into another (a layout transform; a store's line is read before it is
  written where the line is not in cache);
- ``add``: two buffers into a third (an element-wise kernel: two loads and a store).

Bytes are counted as a profile counts a kernel's (each argument's bytes read or written once), so a
pattern's GB/s is the rate at which a kernel of that pattern can move what its roofline counts. A
roof is the fastest of the three: on an AMD Zen 5 guest (2 cores) numpy's copy on one core read
406 GB/s within the L2 caches and its large copy 35 GB/s from memory, where these patterns on both
cores with 512-bit vectors read 1000-1360 GB/s within the L1 caches, 380-500 within the L2s and
42-47 from memory (the add).

The bytes a call moves are per core ``n`` fp32 of each buffer, ``reps`` times over inside the
call (so TVM's call and thread start-up is a small part of its time); ``n`` is a run-time size
(the buffers' second axis), so one build per pattern times every size. Everything is read from the
target object (:class:`explorer.target.Target`): its vector width and its cores.
``python -m explorer.measure.stream_kernel`` times every pattern at the sizes of this machine's
cache tiers (:func:`explorer.measure.cache_peak.tier_probes`) in a process of its own and prints
one JSON line (:func:`explorer.measure.peak_kernel.measure_in_child` runs it).
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass

PATTERNS = {"read": 1, "copy": 2, "add": 3}  # pattern -> buffers it moves (each counted once)
CHAINS = 8  # vectors a step: independent accumulators for ``read`` (two loads a cycle, 3-4 cycles of add)
CALL_BYTES = 3e7  # bytes a call moves, all cores together: 23-60 us at cache speed on the Zen 5 guest


@dataclass(frozen=True)
class StreamKernel:
    """One pattern's kernel for a target: its pattern, fp32 lanes, vectors a step, cores."""

    pattern: str
    lanes: int
    cores: int
    chains: int = CHAINS

    @property
    def buffers(self) -> int:
        return PATTERNS[self.pattern]

    @property
    def step(self) -> int:
        """fp32 elements of one buffer a core moves per step: the multiple a row's length is of."""
        return self.lanes * self.chains

    def row_length(self, total_bytes: int) -> int:
        """The fp32 elements of each buffer's row (one per core) for about ``total_bytes`` over every
        buffer and core (at least one step)."""
        per_row = total_bytes // (self.cores * self.buffers * 4)
        return max(1, per_row // self.step) * self.step

    def moved(self, n: int, reps: int) -> int:
        """Bytes a call with rows of ``n`` repeated ``reps`` times moves (each buffer counted once)."""
        return self.buffers * self.cores * n * 4 * reps

    def to_dict(self) -> dict:
        return asdict(self)


def for_target(target, pattern: str) -> StreamKernel:
    """The ``pattern`` kernel of a CPU ``target``; ``ValueError`` for one that is not a CPU of known
    vector width, or an unknown pattern."""
    if pattern not in PATTERNS:
        raise ValueError(f"unknown stream pattern {pattern!r}: one of {', '.join(PATTERNS)}")
    if not target.cpu_rules or not target.vector_width:
        raise ValueError(f"no stream kernel for {target.label}: not a CPU target of known vector width")
    spec = target.cpu_spec()
    return StreamKernel(pattern, lanes=spec.lanes("float32"), cores=spec.cores)


def prim_func(kernel: StreamKernel):
    """The kernel as a TensorIR PrimFunc ``main(a, b, c, out, reps)``: buffers of ``(cores, n)`` fp32,
    rows of ``n`` streamed ``reps`` times (``b`` and ``c`` unused by ``read``, ``c`` by ``copy``: any
    row length; one the pattern uses must be ``n`` long at least), ``out[core, lane]`` the ``read`` sums."""
    from tvm.script import tirx as T

    lanes, cores, chains, pattern = kernel.lanes, kernel.cores, kernel.chains, kernel.pattern
    step = lanes * chains

    @T.prim_func(s_tir=True)
    def stream(a: T.handle, b: T.handle, c: T.handle, out: T.Buffer((cores, lanes), "float32"), reps: T.int32):
        T.func_attr({"tirx.noalias": True})  # the accumulators stay in registers: no buffer aliases them
        n, nb, nc = T.int64(), T.int64(), T.int64()  # rows of the buffers a pattern leaves unused: one step
        A = T.match_buffer(a, (cores, n), "float32")
        B = T.match_buffer(b, (cores, nb), "float32")
        C = T.match_buffer(c, (cores, nc), "float32")
        for core in T.parallel(cores):
            acc = T.alloc_buffer((chains, lanes), "float32", scope="local")
            for ch in T.unroll(chains):
                acc[ch, T.ramp(0, 1, lanes)] = T.broadcast(T.float32(0), lanes)
            for _ in range(reps):
                for i in range(n // step):
                    for ch in T.unroll(chains):
                        if pattern == "read":
                            acc[ch, T.ramp(0, 1, lanes)] = acc[ch, T.ramp(0, 1, lanes)] + A[
                                core, T.ramp(i * step + ch * lanes, 1, lanes)]
                        elif pattern == "copy":
                            B[core, T.ramp(i * step + ch * lanes, 1, lanes)] = A[
                                core, T.ramp(i * step + ch * lanes, 1, lanes)]
                        else:
                            C[core, T.ramp(i * step + ch * lanes, 1, lanes)] = A[
                                core, T.ramp(i * step + ch * lanes, 1, lanes)] + B[
                                core, T.ramp(i * step + ch * lanes, 1, lanes)]
            for ch in T.unroll(chains - 1):
                acc[0, T.ramp(0, 1, lanes)] = acc[0, T.ramp(0, 1, lanes)] + acc[ch + 1, T.ramp(0, 1, lanes)]
            out[core, T.ramp(0, 1, lanes)] = acc[0, T.ramp(0, 1, lanes)]
    return stream


def build(kernel: StreamKernel, target):
    """Compile the kernel for ``target`` (nothing runs): TVM's executable."""
    from explorer.measure.peak_kernel import compile_main

    return compile_main(prim_func(kernel), target)


def time_patterns(target, sizes: list[int], *, repeats: int = 5) -> dict[str, dict[str, float]]:
    """``{str(size): {pattern: GB/s}}``: every pattern at each total size (bytes over every buffer
    and core), the fastest of ``repeats`` calls of about :data:`CALL_BYTES` each, in this process
    (run the module in a child for a thread pool of the target's cores: see the module docstring)."""
    import numpy as np
    import tvm

    target.require_runnable("time the stream kernels")
    found: dict[str, dict[str, float]] = {str(size): {} for size in sizes}
    for pattern in PATTERNS:
        kernel = for_target(target, pattern)
        rt = build(kernel, target).jit()
        out = tvm.runtime.tensor(np.zeros((kernel.cores, kernel.lanes), "float32"))
        for size in sizes:
            n = kernel.row_length(size)
            arrays = [tvm.runtime.tensor(np.full((kernel.cores, n if k < kernel.buffers else kernel.step), fill,
                                                 "float32")) for k, fill in enumerate((1.0, 2.0, 0.0))]
            reps = max(1, math.ceil(CALL_BYTES / kernel.moved(n, 1)))
            rt["main"](*arrays, out, reps)  # warms the caches and the thread pool
            times = rt.time_evaluator("main", tvm.cpu(), number=1, repeat=repeats)(*arrays, out, reps).results
            found[str(size)][pattern] = round(kernel.moved(n, reps) / min(times) / 1e9, 1)
            a, b, c = (x.numpy() for x in arrays)  # a row of each (b, c: one step where the pattern leaves them)
            if not {"read": lambda: np.allclose(out.numpy(), n // kernel.step * reps * kernel.chains),
                    "copy": lambda: np.array_equal(b, a), "add": lambda: np.array_equal(c, a + b)}[pattern]():
                raise ValueError(f"the {pattern} kernel wrote the wrong numbers")  # not every load or store done
    return found


def _main(argv: list[str]) -> int:
    """``[repeats]``: time every pattern at the sizes of this machine's tiers
    (:func:`explorer.measure.cache_peak.tier_probes`) and print one JSON line."""
    from explorer.measure.cache_peak import cache_sizes, tier_probes
    from explorer.measure.peak_kernel import child_main
    from explorer.target import host_target

    def measure() -> dict:
        target = host_target()
        probes = tier_probes(*cache_sizes())
        sizes = sorted({size for sizes in probes.values() for size in sizes})
        return {"gbps": time_patterns(target, sizes, repeats=int(argv[0]) if argv else 5), "probes": probes,
                "kernel": for_target(target, "read").to_dict(), "target": target.label}

    return child_main(measure)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


__all__ = ["CALL_BYTES", "CHAINS", "PATTERNS", "StreamKernel", "build", "for_target", "prim_func", "time_patterns"]
