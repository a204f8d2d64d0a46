"""What a schedule becomes, as Compiler Explorer shows it for code: the lowered TIR, the LLVM IR and
the assembly for the target, and the vector instructions counted by width (how many FMAs, of
which width), so a user sees what ``vectorize`` or ``tensorize`` did to the machine code.

Building a kernel for the views takes a fraction of a second (nothing runs). A module the
schedule lint refuses never gets here (see :mod:`explorer.schedule.lint`).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import tvm

from explorer.errors import ExplorerError, short_tvm_message
from explorer.schedule.asm_loops import asm_loops
from explorer.schedule.isa_check import isa_refusal
from explorer.schedule.line_map import LineMap, MappedShare, Spanned, line_map, reparsed
from explorer.target.asm import ANY_ASM, AsmSyntax
from store.values import DictValue


@dataclass(frozen=True)
class AsmStats(DictValue):
    """Instructions of the kernel's assembly: all, vector ones by register width (bits), FMAs and
    dot products by width, and the most frequent mnemonics."""

    instructions: int
    vector: dict = field(default_factory=dict)  # width -> count
    fma: dict = field(default_factory=dict)  # width -> count (0: scalar)
    dot: dict = field(default_factory=dict)
    top: tuple[tuple[str, int], ...] = ()

    def summary(self) -> str:
        if not self.instructions:
            return "no instructions"

        def widths(d):
            return ", ".join(f"{n} x {w}-bit" if w else f"{n} scalar" for w, n in sorted(d.items(), reverse=True))

        parts = [f"{self.instructions} instructions"]
        if self.vector:
            parts.append(f"vector: {widths(self.vector)}")
        if self.fma:
            parts.append(f"FMA: {widths(self.fma)}")
        if self.dot:
            parts.append(f"dot products: {widths(self.dot)}")
        return "; ".join(parts)


@dataclass(frozen=True)
class HotLoop:
    """The loop of an assembly listing that does the work: lines ``first`` to ``last``
    (1-based, inclusive: its label to its back branch), with its FMA and vector instructions."""

    first: int
    last: int
    fma: int
    vector: int


@dataclass(frozen=True)
class CodeViews:
    """The three views of one schedule for one target, and the assembly's statistics."""

    target: str
    lowered_tir: str
    llvm_ir: str
    asm: str
    stats: AsmStats
    seconds: float
    hot: HotLoop | None = None  # the loop that does the work in the listing shown (mapping.asm, else asm)
    # TVMScript <-> assembly lines (CPU targets whose script reads back; see explorer.schedule.line_map)
    mapping: LineMap | None = None
    hot_mapped: MappedShare | None = None  # how many of the hot loop's instructions have a script line
    # why the target cannot build it (instructions it lacks: LLVM would abort): only the lowered TIR is shown
    refused: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stats"] = self.stats.to_dict()
        return d


def asm_stats(asm: str, syntax: AsmSyntax = ANY_ASM) -> AsmStats:
    """Count the instructions of an assembly listing (directives, labels and comments skipped),
    read with ``syntax`` (the target's :attr:`explorer.target.Target.asm`)."""
    total, vector, fma, dot, mnemonics = 0, Counter(), Counter(), Counter(), Counter()
    for line in asm.splitlines():
        text = syntax.code(line)
        if not text or text.startswith(".") or text.endswith(":"):
            continue
        mnemonic, *rest = re.split(r"\s+", text, maxsplit=1)
        mnemonic = mnemonic.lower()
        if not mnemonic or not mnemonic[0].isalpha():
            continue
        total += 1
        mnemonics[mnemonic] += 1
        width = syntax.vector_bits(rest[0] if rest else "")
        if width:
            vector[width] += 1
        if syntax.is_fma(text):
            fma[width] += 1
        if syntax.is_dot(text):
            dot[width] += 1
    return AsmStats(total, dict(vector), dict(fma), dict(dot), tuple(mnemonics.most_common(12)))


def code_views(mod: tvm.IRModule, target) -> CodeViews:
    """Lower and build ``mod`` (a scheduled one-function module) for ``target`` (a
    :class:`explorer.target.Target`); raise :class:`ExplorerError` with TVM's reason when it does
    not build. A kernel using instructions the target lacks (:func:`explorer.schedule.isa_check.isa_refusal`:
    LLVM would abort the process) is lowered, not built: its views say why in ``refused``."""
    start = time.perf_counter()
    tvm_target = target.tvm()
    refused = isa_refusal(mod, target)
    # built instead of ``mod``: the same kernel, its lines as spans
    parsed = None if refused else _reparsed_for(mod, target)
    try:
        with tvm_target:
            lowered = _lowering()(tvm.tirx.transform.BindTarget(tvm_target)(mod))
        if refused:
            return CodeViews(target.label, lowered.script(), "", "", asm_stats(""), time.perf_counter() - start,
                             refused=f"not built for {target.label}: {refused}")
        built = tvm.compile(parsed.mod if parsed is not None else mod, target=tvm_target).mod
        llvm_ir = built.inspect_source("ll")
        asm = built.inspect_source("asm")
    except Exception as err:  # noqa: BLE001 - a schedule TVM cannot build: say why
        raise ExplorerError(f"TVM could not build this schedule for {target.label}: {short_tvm_message(err, 400)}") \
            from err
    mapping = _mapping(parsed, llvm_ir, target.asm)
    hot = hot_loop(mapping.asm if mapping is not None else asm, target.asm)
    share = mapping.share(hot.first, hot.last, target.asm) if mapping is not None and hot is not None else None
    return CodeViews(target.label, lowered.script(), llvm_ir, asm, asm_stats(_kernel_asm(asm), target.asm),
                     time.perf_counter() - start, hot, mapping, share)


def _reparsed_for(mod: tvm.IRModule, target) -> Spanned | None:
    """``mod`` read back with spans where its target's listing can be mapped to script lines
    (:attr:`explorer.target.Target.maps_lines`: not PTX, which has no line locations from TVM)."""
    return reparsed(mod) if target.maps_lines else None


def _mapping(parsed: Spanned | None, llvm_ir: str, syntax: AsmSyntax) -> LineMap | None:
    """The TVMScript <-> assembly mapping of a build of ``parsed``, or None: it is an extra the
    views do without."""
    if parsed is None:
        return None
    try:
        return line_map(parsed, llvm_ir, syntax)
    except Exception:  # noqa: BLE001 - a kernel whose mended IR fails keeps its plain views
        return None


def _lowering() -> tvm.transform.Pass:
    """The lowering passes of TVM's default TIR pipeline that show what the schedule did (blocks
    lowered, buffers flattened, loops vectorized and unrolled), up to where the host/device split
    and the packed calling convention start."""
    from tvm import s_tir, tirx

    st, tt = s_tir.transform, tirx.transform
    return tvm.transform.Sequential([
        st.CanonicalizeLoop(), st.LowerInitBlock(), st.PlanAndUpdateBufferAllocationLocation(),
        st.ConvertBlocksToOpaque(), st.CompactBufferAllocation(), st.LowerMatchBuffer(), st.StmtSimplify(),
        st.LowerOpaqueBlock(), tt.FlattenBuffer(), tt.NarrowDataType(32), st.LoopPartition(), tt.VectorizeLoop(True),
        tt.StorageRewrite(), st.HoistIfThenElse(), tt.UnrollLoop(), tt.StmtSimplify(), tt.RemoveNoOp(),
    ], name="schedx_lowered_view")


def hot_loop(asm: str, syntax: AsmSyntax = ANY_ASM) -> HotLoop | None:
    """The innermost loop with FMAs (else vector instructions) of its own in an assembly
    listing, the one with most of them among equally deep ones (its lines: the first to the
    last of its blocks). None when the listing has no loop doing either. A loop around another
    holds the inner one's FMAs, and a peeled first iteration's: it is not the hot one."""
    lines = asm.splitlines()
    loops = asm_loops(lines, syntax)
    best, best_heat = None, None
    for loop in loops:
        inner = frozenset().union(*(b.lines for b in loops if loop.holds(b)))
        mine = asm_stats("\n".join(lines[no - 1] for no in sorted(loop.lines - inner)), syntax)
        heat = (sum(mine.fma.values()) > 0, loop.depth, sum(mine.fma.values()), sum(mine.vector.values()),
                -len(loop.lines))
        if (heat[2] or heat[3]) and (best_heat is None or heat > best_heat):
            body = asm_stats("\n".join(lines[no - 1] for no in sorted(loop.lines)), syntax)
            best, best_heat = HotLoop(loop.first, loop.last, sum(body.fma.values()), sum(body.vector.values())), heat
    return best


def _kernel_asm(asm: str) -> str:
    """The kernel's own functions in an assembly listing: the compute function(s) TVM emits,
    without the packed-call wrappers' argument checks when they can be told apart."""
    parts = re.split(r"\n(?=[A-Za-z_$][\w.$]*:\s*(?:#.*)?\n)", asm)  # at global labels (local ones start with .)
    compute = [p for p in parts if re.match(r"[A-Za-z_$][\w.$]*_compute_", p)]
    return "\n".join(compute) if compute else asm


__all__ = ["AsmStats", "CodeViews", "HotLoop", "asm_stats", "code_views", "hot_loop"]
