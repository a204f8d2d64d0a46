"""Compute-peak kernels of the reduced-precision dot products: what a CPU's bf16 and int8 units do
when nothing else limits them, one kernel per instruction family, the best the CPU has.

- bf16 (fp32 accumulation): AMX ``tdpbf16ps`` where AMX-BF16 (a 16 x 16 fp32 tile += 16 x 32 bf16
  by 32 x 16 bf16: 16384 FLOPs an instruction), else AVX512-BF16 ``vdpbf16ps`` (16 fp32 lanes, each
  += two bf16 products: 64 FLOPs). None where the CPU has neither.
- int8 (uint8 x int8, int32 sums): AMX ``tdpbusd`` where AMX-INT8 (16 x 16 int32 += 16 x 64 by
  64 x 16 bytes: 32768 ops), else AVX-512 VNNI ``vpdpbusd`` (16 lanes x 4 products: 128 ops), else
  ``vpmaddubsw`` + ``vpmaddwd`` by ones + ``vpaddd`` (AVX-512BW: 64 products, 128 ops; AVX2: 32
  products, 64 ops), the sequence :mod:`explorer.schedule.int8_dot`'s kernels use.

A multiply-add counts 2 ops, as the kernels' FLOPs are counted (``GFLOPS`` for bf16, ``GOPS`` for
int8). The same instruction choice as the schedules make (:meth:`explorer.target.Target.cpu_spec`'s
``bf16_dot``/``int8_dot``, :func:`explorer.schedule.amx_int8.available`).

Each kernel is a small LLVM IR function imported with TVM's ``pragma_import_llvm`` (as the AMX and
bf16 micro-kernels: LLVM 22's intrinsics take operand types TVM's lowering rewrites) and called once
per core from a parallel TIR loop. Vector kernels keep ``chains`` independent accumulators (enough
for two ports at five cycles of latency) in registers, operands loaded once from the buffer; the
AVX2 sequence, whose products do not depend on the accumulator, loads one operand per iteration so
nothing is loop-invariant. The AMX kernel loads two A and two B tiles once, then runs four
independent ``tdp*`` (a 2 x 2 grid of C tiles) per iteration: the tile unit's throughput, no memory.
The AMX kernels ask Linux for tile state first (:mod:`explorer.schedule.amx_ir`'s entry).

``python -m explorer.measure.dot_peaks`` times every family on this machine in a process of its own
and prints one JSON line (:func:`measure_in_child`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass

from explorer.measure.instructions import FAMILIES, INSTRUCTIONS, VECTOR_CHAINS, Instruction
from explorer.schedule.llvm_import import IMPORT_LLVM

WORDS = 2048  # int32 words of scratch per core: results in the first 4 KB, operands in the next 4 KB
OPERANDS = 4096  # byte offset of the operands in a core's scratch
ITERS = 1 << 17  # iterations of a vector kernel per call (AMX: ITERS >> 4): about a millisecond


@dataclass(frozen=True)
class DotKernel:
    """One family's compute-peak kernel for a target: its instruction, chains, cores, iterations."""

    instruction: Instruction
    cores: int
    iters: int = ITERS

    @property
    def family(self) -> str:
        return self.instruction.family

    @property
    def amx(self) -> bool:
        return self.instruction.isa == "amx"

    @property
    def ops(self) -> int:
        """Ops of one call (a multiply-add is 2)."""
        return self.instruction.ops_per_step * self.instruction.chains * self.iters * self.cores

    @property
    def unit(self) -> str:
        return unit(self.family)

    @property
    def function(self) -> str:
        return f"schedx_peak_{self.family}_{self.instruction.isa}"

    @property
    def label(self) -> str:
        """``bf16 AMX tdpbf16ps, 4 tiles``: what the figure was measured with, for reports."""
        i = self.instruction
        what = f"{i.chains} tiles" if self.amx else f"{i.chains} accumulators"
        return f"{i.label} {i.instruction} kernel, {what}"

    @property
    def llvm_ir(self) -> str:
        return _amx_ir(self) if self.amx else _vector_ir(self)

    def to_dict(self) -> dict:
        return asdict(self) | {"ops": self.ops, "label": self.label, "unit": self.unit}


def unit(family: str) -> str:
    """``GOPS`` for integer families, ``GFLOPS`` for floating point."""
    return "GOPS" if family == "int8" else "GFLOPS"


def for_target(target, family: str, *, iters: int | None = None) -> DotKernel:
    """The ``family`` peak kernel of a CPU ``target`` (its best instruction for it, as the schedules
    choose); ``ValueError`` saying why where the target has none."""
    from explorer.schedule.amx_int8 import available as amx_int8
    from explorer.target import TargetError

    if family not in FAMILIES:
        raise ValueError(f"unknown instruction family {family!r}: one of {', '.join(FAMILIES)}")
    try:
        spec = target.cpu_spec()  # the instructions the CPU rules use; a target without CPU rules has no peak kernel
    except TargetError as err:
        raise ValueError(f"no {family} peak kernel for {target.label}: {err}") from err
    if family == "bf16":
        isa = spec.bf16_dot
        why = "it has no AVX512-BF16 (vdpbf16ps) nor AMX-BF16 (tdpbf16ps) instructions"
    else:
        isa = "amx" if amx_int8(target.features) else spec.int8_dot
        why = "it has no AMX-INT8, VNNI, AVX-512BW nor AVX2 int8 instructions"
    row = next((i for i in INSTRUCTIONS if i.family == family and i.isa == isa), None)
    if row is None:
        raise ValueError(f"no {family} peak on {target.label}: {why}")
    steps = iters if iters is not None else (ITERS >> 4 if isa == "amx" else ITERS)
    return DotKernel(row, cores=spec.cores, iters=int(steps))


def instructions_of(target) -> dict[str, str]:
    """Each family's instruction set on ``target`` (:func:`for_target`'s choice: ``amx``,
    ``avx512bf16``, ``vnni``, ...; :data:`explorer.measure.families.NO_INSTRUCTIONS` where it has
    none): which of a machine's measured peaks its kernels read against."""
    from explorer.measure.families import NO_INSTRUCTIONS

    found = {}
    for family in FAMILIES:
        try:
            found[family] = for_target(target, family).instruction.isa
        except ValueError:
            found[family] = NO_INSTRUCTIONS
    return found


def host_instructions() -> dict[str, str]:
    """:func:`instructions_of` this machine's CPU as schedx sees it (``SCHEDX_CPU_FLAGS`` applied)."""
    from explorer.target import host_target

    return instructions_of(host_target())


def _vector_ir(k: DotKernel) -> str:
    """``i32 @fn(ptr %s, i64 %iters)``: ``chains`` accumulators loaded from ``%s``, ``iters`` steps
    of the family's instruction on each, stored back; operands from ``%s + OPERANDS``."""
    isa, chains = k.instruction.isa, k.instruction.chains
    if isa == "avx512bf16":
        from explorer.schedule.bf16_dot import DOT_FN, DOT_IR

        acc_t, op_t, head, fn = "<16 x float>", "<16 x i32>", DOT_IR, DOT_FN
    elif isa == "vnni":
        acc_t, op_t, fn = "<16 x i32>", "<64 x i8>", "llvm.x86.avx512.vpdpbusd.512"
        head = f"declare {acc_t} @{fn}({acc_t}, {op_t}, {op_t})"
    else:  # vpmaddubsw, vpmaddwd by ones, vpaddd: the products take a fresh operand every step
        return _madd_ir(k)
    lines = [f"  %x{c} = load {op_t}, ptr %xp{c}" for c in range(chains)]
    ptrs = [f"  %xp{c} = getelementptr i8, ptr %s, i64 {OPERANDS + 64 * (c + 1)}" for c in range(chains)]
    loop = [f"  %acc{c} = phi {acc_t} [%init{c}, %entry], [%new{c}, %loop]" for c in range(chains)]
    loop += [f"  %new{c} = call {acc_t} @{fn}({acc_t} %acc{c}, {op_t} %x{c}, {op_t} %y)" for c in range(chains)]
    return _frame(k, head, acc_t, ptrs + lines + [f"  %y = load {op_t}, ptr %yp"], loop)


def _madd_ir(k: DotKernel) -> str:
    """The AVX2 / AVX-512BW int8 kernel: per step one operand vector loaded (16 slots in turn), and
    for each chain ``vpmaddubsw`` with its own operand, ``vpmaddwd`` by ones, ``vpaddd``."""
    wide = k.instruction.isa == "avx512bw"
    n = 64 if wide else 32  # bytes of one vector
    b_t, h_t, acc_t = f"<{n} x i8>", f"<{n // 2} x i16>", f"<{n // 4} x i32>"
    maddubs, maddwd = (("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512") if wide
                       else ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"))
    head = f"declare {h_t} @{maddubs}({b_t}, {b_t})\ndeclare {acc_t} @{maddwd}({h_t}, {h_t})"
    chains = k.instruction.chains
    setup = [f"  %xp{c} = getelementptr i8, ptr %s, i64 {OPERANDS + 64 * (c + 1)}" for c in range(chains)]
    setup += [f"  %x{c} = load {b_t}, ptr %xp{c}" for c in range(chains)]
    loop = [f"  %acc{c} = phi {acc_t} [%init{c}, %entry], [%new{c}, %loop]" for c in range(chains)]
    loop += ["  %slot = and i64 %i, 15", "  %yoff = mul i64 %slot, 64", f"  %yoff2 = add i64 %yoff, {OPERANDS + 1024}",
             "  %ypi = getelementptr i8, ptr %s, i64 %yoff2", f"  %yv = load {b_t}, ptr %ypi"]
    ones = f"{h_t} <{', '.join(['i16 1'] * (n // 2))}>"
    for c in range(chains):
        loop += [f"  %p{c} = call {h_t} @{maddubs}({b_t} %x{c}, {b_t} %yv)",
                 f"  %w{c} = call {acc_t} @{maddwd}({h_t} %p{c}, {ones})",
                 f"  %new{c} = add {acc_t} %acc{c}, %w{c}"]
    return _frame(k, head, acc_t, setup, loop)


def _frame(k: DotKernel, head: str, acc_t: str, setup: list[str], loop: list[str]) -> str:
    """The function around a vector kernel's loop: accumulators in from ``%s`` (64 bytes each),
    the loop, accumulators out."""
    chains = k.instruction.chains
    init = [f"  %ap{c} = getelementptr i8, ptr %s, i64 {64 * c}\n  %init{c} = load {acc_t}, ptr %ap{c}"
            for c in range(chains)]
    out = [f"  store {acc_t} %new{c}, ptr %ap{c}" for c in range(chains)]
    nl = "\n"
    return f"""
{head}
define i32 @{k.function}(ptr %s, i64 %iters) {{
entry:
  %yp = getelementptr i8, ptr %s, i64 {OPERANDS}
{nl.join(init)}
{nl.join(setup)}
{_counted_loop("entry", loop, out)}
"""


def _counted_loop(before: str, body: list[str], after: list[str]) -> str:
    """Block ``loop`` (``%i`` from 0 to ``%iters``, entered from block ``before``) running ``body``,
    then block ``end`` running ``after`` and returning: the close of every kernel's function."""
    nl = "\n"
    return f"""  br label %loop
loop:
  %i = phi i64 [0, %{before}], [%next, %loop]
{nl.join(body)}
  %next = add i64 %i, 1
  %done = icmp uge i64 %next, %iters
  br i1 %done, label %end, label %loop
end:
{nl.join(after)}
  ret i32 0
}}"""


def _amx_ir(k: DotKernel) -> str:
    """Tiles 0-3 the C grid (loaded from ``%s``, 64 bytes a row), 4-5 A and 6-7 B (from the operands);
    ``iters`` steps of four independent ``tdp*``; C stored back."""
    from explorer.schedule.amx_ir import DECLARATIONS, RELEASE, c_tiles, entry, tile_config

    op = k.instruction.instruction
    cptrs, cload, cstore = c_tiles(16, 2, 2)
    loads = [f"  %tp{t} = getelementptr i8, ptr %s, i64 {OPERANDS + 1024 * (t - 4)}\n"
             f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr %tp{t}, i64 64)" for t in range(4, 8)]
    steps = [f"  call void @llvm.x86.{op}(i8 {r * 2 + q}, i8 {4 + r}, i8 {6 + q})" for r in range(2) for q in range(2)]
    nl = "\n"
    return f"""
{tile_config(k.function + "_cfg", [16] * 8)}
{DECLARATIONS}
declare void @llvm.x86.{op}(i8 immarg, i8 immarg, i8 immarg)
define i32 @{k.function}(ptr %s, i64 %iters) {{
{entry(k.function + "_cfg")}
  %c = getelementptr i8, ptr %s, i64 0
  %ldc = add i64 0, 128
{cptrs}
{cload}
{nl.join(loads)}
{_counted_loop("go", steps, [cstore, RELEASE])}
"""


def prim_func(kernel: DotKernel):
    """``main(scratch, iters)``: one call of the kernel per core, in parallel, on its own
    ``WORDS`` int32 words of ``scratch`` (accumulators, then operands)."""
    from tvm.script import tirx as T

    cores, fn, ir = kernel.cores, kernel.function, kernel.llvm_ir

    @T.prim_func(s_tir=True)
    def peak(scratch: T.Buffer((cores, WORDS), "int32"), iters: T.int64):
        for c in T.parallel(cores, annotations={IMPORT_LLVM: ir}):
            T.evaluate(T.call_extern("int32", fn, T.address_of(scratch[c, 0]), iters))

    return peak


def build(kernel: DotKernel, target):
    """Compile the kernel for ``target`` (nothing runs): TVM's executable."""
    from explorer.measure.peak_kernel import compile_main

    return compile_main(prim_func(kernel), target)


def assembly(kernel: DotKernel, target) -> str:
    """The kernel's assembly for ``target`` (nothing runs)."""
    from explorer.measure.peak_kernel import executable_asm

    return executable_asm(build(kernel, target))


def scratch(kernel: DotKernel):
    """The kernel's starting scratch: zero accumulators, operands of small values (bf16 2^-10 in
    every half word, int8 ones), so bf16 sums stay finite over any number of calls."""
    import numpy as np

    s = np.zeros((kernel.cores, WORDS), "int32")
    s[:, OPERANDS // 4:] = 0x3A803A80 if kernel.family == "bf16" else 0x01010101
    return s


def time_kernel(kernel: DotKernel, target, *, repeats: int = 5, min_repeat_s: float = 0.05) -> list[float]:
    """GFLOPS (GOPS for int8) of each of ``repeats`` timed repeats on this machine, in this process
    (:func:`measure_in_child` for a thread pool of the target's cores)."""
    import numpy as np
    import tvm

    target.require_runnable(f"time the {kernel.family} peak kernel")
    rt = build(kernel, target).jit()
    buf = tvm.runtime.tensor(scratch(kernel))
    once = rt.time_evaluator("main", tvm.cpu(), number=1, repeat=1)(buf, kernel.iters).mean  # warm-up too
    number = max(1, math.ceil(min_repeat_s / max(once, 1e-9)))
    times = rt.time_evaluator("main", tvm.cpu(), number=number, repeat=repeats)(buf, kernel.iters).results
    if kernel.family == "bf16" and not np.isfinite(buf.numpy()[:, :OPERANDS // 4].view("float32")).all():
        raise ValueError("the bf16 peak kernel computed non-finite numbers")
    return [kernel.ops / t / 1e9 for t in times if t > 0]


def measure_in_child(repeats: int = 5, timeout: float = 300.0) -> dict:
    """Every family timed on this machine in a fresh process: ``{family: {"gflops": best, "runs":
    [...], "kernel": {...}} or {"error": why}}`` (a family the CPU lacks says why in its error)."""
    from explorer.measure.peak_kernel import measure_in_child as in_child

    found = in_child(repeats, timeout, module=__name__)
    return found if "error" not in found else {f: found for f in FAMILIES}


def _fma_runs(target, repeats: int) -> list[float]:
    """The fp32 FMA peak kernel's runs (:mod:`explorer.measure.peak_kernel`), timed once in the same
    process right after the first family's and used for every family's ratio: the two figures' ratio
    holds on a busy machine, where each alone swings with the load ([] where the FMA kernel cannot run)."""
    from explorer.measure import peak_kernel

    try:
        return peak_kernel.time_kernel(peak_kernel.for_target(target), target, repeats=repeats)
    except Exception:  # noqa: BLE001 - no ratio then; the family's own figure stands
        return []


def _main(argv: list[str]) -> int:
    from explorer.measure.peak_kernel import child_main, error_text
    from explorer.target import host_target

    repeats = int(argv[0]) if argv else 5

    def measure() -> dict:
        result = {}
        target = host_target()
        fma: list[float] = []
        for family in FAMILIES:
            try:
                kernel = for_target(target, family)
                runs = time_kernel(kernel, target, repeats=repeats)
                fma = fma or _fma_runs(target, repeats)
                result[family] = {"gflops": round(max(runs), 1), "runs": [round(g, 1) for g in runs],
                                  "kernel": kernel.to_dict(),
                                  "fp32_ratio": round(max(runs) / max(fma), 3) if fma else None}
            except Exception as err:  # noqa: BLE001 - the caller gets the reason as data
                result[family] = {"error": str(err) if isinstance(err, ValueError) else error_text(err),
                                  "isa": instructions_of(target)[family]}
        return result

    return child_main(measure)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


__all__ = ["FAMILIES", "INSTRUCTIONS", "DotKernel", "Instruction", "assembly", "build", "for_target",
           "host_instructions", "instructions_of", "measure_in_child", "prim_func", "scratch",
           "time_kernel", "unit"]
