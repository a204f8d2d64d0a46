"""Which lines of the assembly a line of TVMScript became, and back: Compiler Explorer's line
mapping, for a TensorIR kernel built for a CPU target.

How: the kernel's TVMScript, one loop per line (``T.grid`` written out as nested loops), is
parsed back, which gives every statement a span (its line in that text); TVM's LLVM code
generator turns each statement's span into a debug location. The LLVM IR is then mended
(:mod:`explorer.schedule.ir_lines`: the parallel loop's outlined body gets a debug subprogram
of its own, without which LLVM drops the module's debug information; each loop's compare,
branch and increments get the line of its ``for``; instructions without a line get their
users') and written to assembly again by TVM's own LLVM (a ``.ll`` module loaded back), whose
``.loc`` directives say each instruction's line. Last, the instructions LLVM's code generator
adds to a loop's latch without a location get the loop's line (:func:`close_latches`).

So a loop's line stands for its own loop control, a statement's for its own instructions; a
loop that has none (vectorized: its iterations are the vector lanes; unrolled by LLVM) says so
(:attr:`LoopHeader.kind`). ``blocks`` still gives each loop's body, to shade it.

The mapping is an optional layer: where the script does not parse back to the same kernel, or the
target has device code (CUDA: its listing is PTX), there is none and the views are shown without it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi

from explorer.schedule.asm_loops import close_latches
from explorer.schedule.ir_lines import mend_debug_info
from explorer.target.asm import ANY_ASM, AsmSyntax
from explorer.temp_dirs import private_temp_dir
from store.values import DictValue

_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_DEBUG_SECTION = re.compile(r"^\s*\.section\s+\.debug_")
_SECTION = re.compile(r"^\s*(\.section\s|\.text\b|\.data\b|\.bss\b)")
_DEBUG_NOISE = re.compile(r"^\s*(\.file\s+\d+\s|\.Ltmp\d+:|\.Lfunc_begin\d+:|\.Ldebug_|\.Linfo_|\.Lsection_)")
_BLOCK_OPENER = re.compile(r"^\s*(for\s|with\s+T\.sblock\(|if\s|while\s)")
_FOR = re.compile(r"^\s*for\s+(.+?)\s+in\s+(T\.(\w+)|range)\(")
_GRID = re.compile(r"^\s*for\s.+\sin\s+T\.grid\(")
_KINDS = {"range": "serial", "serial": "serial", "parallel": "parallel", "vectorized": "vectorized",
          "unroll": "unrolled", "thread_binding": "thread"}


@dataclass(frozen=True)
class LoopHeader:
    """A loop of the script: its ``line``, its variable ``var``, and how it runs (``serial``,
    ``parallel``, ``vectorized``, ``unrolled``)."""

    line: int
    var: str
    kind: str


@dataclass(frozen=True)
class MappedShare:
    """How many of a stretch of assembly's ``instructions`` have a script line (``mapped``)."""

    mapped: int
    instructions: int

    @property
    def percent(self) -> float:
        return 100.0 * self.mapped / self.instructions if self.instructions else 0.0


@dataclass(frozen=True)
class LineMap(DictValue):
    """A kernel's TVMScript (``source``), its assembly (``asm``, the debug directives taken out)
    and, per assembly line, the TVMScript line it came from (``asm_to_source[i]`` for line i+1;
    0 where none). ``blocks``: each loop, block or branch of the script as (first line, last
    line); ``loops``: each loop's header."""

    source: str
    asm: str
    asm_to_source: tuple[int, ...]
    blocks: tuple[tuple[int, int], ...]
    loops: tuple[LoopHeader, ...] = ()

    def asm_lines_of(self, first: int, last: int | None = None) -> list[int]:
        """The assembly lines (1-based) that source lines ``first``..``last`` became."""
        last = first if last is None else last
        return [no for no, src in enumerate(self.asm_to_source, 1) if src and first <= src <= last]

    def source_line_of(self, asm_line: int) -> int:
        """The source line an assembly line came from (0 when none)."""
        return self.asm_to_source[asm_line - 1] if 0 < asm_line <= len(self.asm_to_source) else 0

    def block_of(self, line: int) -> tuple[int, int]:
        """The lines a source line stands for: a loop's (or block's) whole body, else itself."""
        return next(((a, b) for a, b in self.blocks if a == line), (line, line))

    def mapped_lines(self) -> set[int]:
        """The source lines that have assembly."""
        return {s for s in self.asm_to_source if s}

    def loop(self, var: str) -> LoopHeader | None:
        """The header of the loop over ``var`` (None when the script has none)."""
        return next((h for h in self.loops if h.var == var), None)

    def share(self, first: int, last: int, syntax: AsmSyntax = ANY_ASM) -> MappedShare:
        """How many instructions of assembly lines ``first``..``last`` have a script line."""
        lines = self.asm.splitlines()
        numbers = [no for no in range(first, last + 1) if 0 < no <= len(lines) and syntax.is_instruction(lines[no - 1])]
        return MappedShare(sum(1 for no in numbers if self.asm_to_source[no - 1]), len(numbers))

    def notes(self) -> dict[int, str]:
        """What each loop header's line became, in words (its own instructions are its loop
        control; a loop without any says why)."""
        out = {}
        for h in self.loops:
            own = len(self.asm_lines_of(h.line))
            if own:
                what = ("launch, thread's share, compare, branch" if h.kind == "parallel" else
                        "increment, compare, branch")
                text = f"for {h.var}: {own} instructions of its own ({what})"
            elif h.kind == "vectorized":
                text = f"for {h.var}: vectorized, its iterations are vector lanes: no loop control of its own"
            else:
                text = f"for {h.var}: no loop control of its own (unrolled, or a single iteration)"
            out[h.line] = text if h.line not in out else f"{out[h.line]}; {text}"
        return out


@dataclass(frozen=True)
class Spanned:
    """A kernel read back from its own TVMScript ``source`` (one loop per line): ``mod`` is the
    same kernel, every statement carrying its line in ``source`` as a span."""

    source: str
    mod: tvm.IRModule


def block_ranges(source: str) -> tuple[tuple[int, int], ...]:
    """Each ``for``/``with T.sblock``/``if`` line of a TVMScript text with the last line of its
    body (by indentation), 1-based."""
    lines = source.splitlines()
    return tuple((no, _body_end(lines, no)) for no, line in enumerate(lines, 1) if _BLOCK_OPENER.match(line))


def _body_end(lines: list[str], no: int) -> int:
    """The last line of the indented body of line ``no`` (1-based)."""
    indent, last = _indent(lines[no - 1]), no
    for later in range(no, len(lines)):
        text = lines[later]
        if text.strip() and _indent(text) <= indent:
            break
        if text.strip():
            last = later + 1
    return last


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def loop_headers(source: str) -> tuple[LoopHeader, ...]:
    """Every ``for`` line of a TVMScript text, one header per loop variable."""
    out = []
    for no, line in enumerate(source.splitlines(), 1):
        found = _FOR.match(line)
        if found:
            kind = _KINDS.get(found.group(3) or "range", found.group(3) or "serial")
            out.extend(LoopHeader(no, var.strip(), kind) for var in found.group(1).split(","))
    return tuple(out)


def one_loop_per_line(source: str, step: int = 4) -> str:
    """A TVMScript text with each ``for a, b in T.grid(x, y):`` written out as nested loops
    (``for a in range(x):`` / ``for b in range(y):``, the body indented to match), so that each
    loop has a line of its own (``step``: the printer's indentation)."""
    lines = source.splitlines()
    out: list[str] = []
    deeper: list[tuple[int, int]] = []  # (last line of a grid's body, extra indentation) still open
    for no, line in enumerate(lines, 1):
        while deeper and no > deeper[-1][0]:
            deeper.pop()
        extra = sum(d for _, d in deeper)
        loops = _grid(line) if _GRID.match(line) else None
        if loops is None:
            out.append(" " * extra + line if line.strip() else line)
            continue
        indent = " " * (_indent(line) + extra)
        out.extend(f"{indent}{' ' * (step * k)}for {var} in range({extent}):" for k, (var, extent) in enumerate(loops))
        deeper.append((_body_end(lines, no), step * (len(loops) - 1)))
    return "\n".join(out) + ("\n" if source.endswith("\n") else "")


def _grid(line: str) -> list[tuple[str, str]] | None:
    """``[(var, extent), ...]`` of a ``for ... in T.grid(...):`` line (None when it is not one)."""
    text = line.strip()
    try:
        node = ast.parse(text + " pass").body[0]
    except SyntaxError:
        return None
    if not (isinstance(node, ast.For) and isinstance(node.target, ast.Tuple) and isinstance(node.iter, ast.Call)):
        return None
    names = [e.id for e in node.target.elts if isinstance(e, ast.Name)]
    extents = [ast.get_source_segment(text + " pass", a) for a in node.iter.args]
    if len(names) != len(node.target.elts) or len(names) != len(extents) or node.iter.keywords:
        return None
    return list(zip(names, extents))


def reparsed(mod: tvm.IRModule) -> Spanned | None:
    """``mod`` read back from its own TVMScript, one loop per line, every statement carrying its
    line as a span (what a build turns into ``.loc``); None when the script does not read back to
    the same kernel."""
    source = mod.script()
    for text in dict.fromkeys((one_loop_per_line(source), source)):  # the printer's own text if that alone reads back
        try:
            parsed = tvm.script.from_source(text)
        except Exception:  # noqa: BLE001 - a script TVM cannot read back: try the next, else no mapping
            continue
        if isinstance(parsed, tvm.IRModule) and tvm_ffi.structural_equal(parsed, mod):
            return Spanned(text, parsed)
    return None


def line_map(spanned: Spanned, llvm_ir: str, syntax: AsmSyntax = ANY_ASM) -> LineMap | None:
    """The mapping of a CPU build of ``spanned`` (from :func:`reparsed`; ``llvm_ir``: its LLVM
    IR; ``syntax``: the target's assembly vocabulary): the assembly written again from the
    mended IR; None when LLVM kept no location."""
    source = spanned.source
    loops = loop_headers(source)
    text, lines = strip_debug(assembly_of(mend_debug_info(llvm_ir, {h.var: h.line for h in loops})), syntax)
    if not any(lines):  # LLVM kept no location (its debug information refused): no mapping to show
        return None
    sources = list(lines)
    close_latches(text.splitlines(), sources, {h.line for h in loops}, syntax)
    return LineMap(source, text, tuple(sources), block_ranges(source), loops)


def assembly_of(llvm_ir: str) -> str:
    """The assembly TVM's LLVM writes for an LLVM IR text (loaded back as a ``.ll`` module)."""
    with private_temp_dir("schedx-asm-") as folder:
        path = Path(folder) / "kernel.ll"
        path.write_text(llvm_ir, encoding="utf-8")
        return tvm.runtime.load_module(str(path)).inspect_source("asm")


def strip_debug(asm: str, syntax: AsmSyntax = ANY_ASM) -> tuple[str, tuple[int, ...]]:
    """An assembly listing without its debug directives and sections, and per remaining line the
    source line (from the last ``.loc`` of file 1 before it; 0 where none)."""
    kept, source, current, in_debug = [], [], 0, False
    for line in asm.splitlines():
        if _DEBUG_SECTION.match(line):
            in_debug = True
            continue
        if in_debug:
            if not _SECTION.match(line):
                continue
            in_debug = False
        loc = _LOC.match(line)
        if loc:
            current = int(loc.group(2)) if loc.group(1) in ("0", "1") else 0  # the kernel's one file
            continue
        if _DEBUG_NOISE.match(line) or line.strip().startswith(".cfi_"):
            continue
        kept.append(line)
        source.append(current if syntax.is_instruction(line) else 0)
    return "\n".join(kept), tuple(source)


__all__ = ["LineMap", "LoopHeader", "MappedShare", "Spanned", "assembly_of", "block_ranges", "line_map",
           "loop_headers", "mend_debug_info", "one_loop_per_line", "reparsed", "strip_debug"]
