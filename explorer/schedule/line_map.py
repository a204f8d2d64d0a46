"""Which lines of the assembly a line of TVMScript became, and back: Compiler Explorer's line
mapping, for a TensorIR kernel built for a CPU target.

How: the kernel's TVMScript is parsed back, which gives every statement a span (its line in that
text); TVM's LLVM code generator turns each statement's span into a debug location, and LLVM
writes those as ``.loc`` directives in the assembly. Two things stand in the way in TVM 0.27 and
are mended here:

- a parallel loop's body is outlined into a function of its own (``__tvm_parallel_lambda``) that
  has no debug subprogram while its instructions keep the locations of the kernel's function;
  LLVM then drops the module's whole debug information when it writes the assembly. The LLVM IR
  is mended (each function without one gets a subprogram, its locations re-scoped to it) and
  written to assembly again by TVM's own LLVM (a ``.ll`` module loaded back);
- the lowering passes rebuild loops without their spans: only the statements inside loops (buffer
  stores, the work) keep theirs. A loop's assembly is therefore that of the statements it holds
  (:func:`block_ranges` gives each loop's lines).

The mapping is an optional layer: where the script does not parse back to the same kernel, or the
target has device code (CUDA: its listing is PTX), there is none and the views are shown without it.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import tvm
import tvm_ffi

_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_DEBUG_SECTION = re.compile(r"^\s*\.section\s+\.debug_")
_SECTION = re.compile(r"^\s*(\.section\s|\.text\b|\.data\b|\.bss\b)")
_DEBUG_NOISE = re.compile(r"^\s*(\.file\s+\d+\s|\.Ltmp\d+:|\.Lfunc_begin\d+:|\.Ldebug_|\.Linfo_|\.Lsection_)")
_DEFINE = re.compile(r"^define\b[^@]*@(\"[^\"]+\"|[-\w.$]+)\(.*\{\s*$")
_METADATA = re.compile(r"^!(\d+) = (.*)$")
_CALL = re.compile(r"^\s*(%\S+ = )?((tail|musttail|notail) )?call ")
_BLOCK_OPENER = re.compile(r"^\s*(for\s|with\s+T\.sblock\(|if\s|while\s)")


@dataclass(frozen=True)
class LineMap:
    """A kernel's TVMScript (``source``), its assembly (``asm``, the debug directives taken out)
    and, per assembly line, the TVMScript line it came from (``asm_to_source[i]`` for line i+1;
    0 where none). ``blocks``: each loop, block or branch of the script as (first line, last line)."""

    source: str
    asm: str
    asm_to_source: tuple[int, ...]
    blocks: tuple[tuple[int, int], ...]

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

    def to_dict(self) -> dict:
        return asdict(self)


def block_ranges(source: str) -> tuple[tuple[int, int], ...]:
    """Each ``for``/``with T.sblock``/``if`` line of a TVMScript text with the last line of its
    body (by indentation), 1-based."""
    lines = source.splitlines()
    ranges = []
    for no, line in enumerate(lines, 1):
        if not _BLOCK_OPENER.match(line):
            continue
        indent, last = len(line) - len(line.lstrip()), no
        for later in range(no, len(lines)):
            text = lines[later]
            if text.strip() and len(text) - len(text.lstrip()) <= indent:
                break
            if text.strip():
                last = later + 1
        ranges.append((no, last))
    return tuple(ranges)


def reparsed(mod: tvm.IRModule) -> tvm.IRModule | None:
    """``mod`` read back from its own TVMScript, every statement carrying its line as a span (what
    a build turns into ``.loc``); None when the script does not read back to the same kernel."""
    try:
        parsed = tvm.script.from_source(mod.script())
    except Exception:  # noqa: BLE001 - a script TVM cannot read back: no mapping, the views stay
        return None
    if not isinstance(parsed, tvm.IRModule) or not tvm_ffi.structural_equal(parsed, mod):
        return None
    return parsed


def line_map(parsed: tvm.IRModule, llvm_ir: str) -> LineMap | None:
    """The mapping of a CPU build of ``parsed`` (from :func:`reparsed`; ``llvm_ir``: its LLVM IR):
    the assembly written again from the mended IR; None when LLVM kept no location."""
    source = parsed.script()
    text, lines = strip_debug(assembly_of(mend_debug_info(llvm_ir)))
    if not any(lines):  # LLVM kept no location (its debug information refused): no mapping to show
        return None
    return LineMap(source, text, lines, block_ranges(source))


def assembly_of(llvm_ir: str) -> str:
    """The assembly TVM's LLVM writes for an LLVM IR text (loaded back as a ``.ll`` module)."""
    with tempfile.TemporaryDirectory(prefix="schedx-asm-") as folder:
        path = Path(folder) / "kernel.ll"
        path.write_text(llvm_ir, encoding="utf-8")
        return tvm.runtime.load_module(str(path)).inspect_source("asm")


def mend_debug_info(llvm_ir: str) -> str:
    """Give every function of an LLVM IR text that has none a debug subprogram of its own, its
    instructions' locations re-scoped to it (and its calls a location), so that LLVM keeps the
    module's debug information; variable records of other functions' scopes are dropped."""
    lines = llvm_ir.splitlines()
    meta = {int(m.group(1)): m.group(2) for m in map(_METADATA.match, lines) if m}
    template = next((v for v in meta.values() if v.startswith("distinct !DISubprogram(")), None)
    if template is None:
        return llvm_ir
    template = re.sub(r",\s*retainedNodes: !\d+", "", template)
    counter = [max(meta) + 1]
    extra: list[str] = []

    def new(value: str) -> int:
        n = counter[0]
        counter[0] += 1
        extra.append(f"!{n} = {value}")
        return n

    out: list[str] = []
    # the function being read: its subprogram and a line-0 location in it (for calls that have none:
    # LLVM drops all debug information when a call into a function with a subprogram has no
    # location), and whether it is being mended (its locations re-scoped to its new subprogram)
    scope: tuple[int, int] | None = None
    mending = False
    rescoped: dict[int, int] = {}
    for line in lines:
        define = _DEFINE.match(line)
        if define:
            own = re.search(r"!dbg !(\d+)", line)
            mending = own is None
            if mending:
                name = define.group(1).strip('"')
                sub = new(re.sub(r'name: "[^"]*"', lambda _m, n=name: f'name: "{n}"', template))
                line = line.rstrip()[:-1].rstrip() + f" !dbg !{sub} {{"
            else:
                sub = int(own.group(1))
            scope, rescoped = (sub, new(f"!DILocation(line: 0, scope: !{sub})")), {}
            out.append(line)
            continue
        if scope is not None and line.startswith("}"):
            scope = None
        if scope is not None:
            if mending:
                if line.lstrip().startswith("#dbg_") or "call void @llvm.dbg." in line:
                    continue

                def rescope(m: re.Match, sub: int = scope[0]) -> str:
                    n = int(m.group(1))
                    value = meta.get(n, "")
                    if not re.match(r"(distinct )?!DILocation\(", value):
                        return m.group(0)
                    if n not in rescoped:
                        rescoped[n] = new(re.sub(r"scope: !\d+", f"scope: !{sub}",
                                                 re.sub(r",\s*inlinedAt: !\d+", "", value)))
                    return f"!dbg !{rescoped[n]}"

                line = re.sub(r"!dbg !(\d+)", rescope, line)
            if _CALL.match(line) and "!dbg" not in line:
                line += f", !dbg !{scope[1]}"
        out.append(line)
    return "\n".join(out + extra) + "\n"


def strip_debug(asm: str) -> tuple[str, tuple[int, ...]]:
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
        text = line.split("#", 1)[0].split("//", 1)[0].strip()  # x86 and AArch64 comments
        is_instruction = bool(text) and not text.startswith(".") and not text.endswith(":")
        source.append(current if is_instruction else 0)
    return "\n".join(kept), tuple(source)


__all__ = ["LineMap", "assembly_of", "block_ranges", "line_map", "mend_debug_info", "reparsed", "strip_debug"]
