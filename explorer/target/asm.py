"""How each CPU architecture's assembly reads, as LLVM writes it: what starts a comment, which
lines are labels, instructions and branches, which mnemonics are multiply-adds and dot products,
which operands vector registers and how wide. The assembly views (the hot loop, the line mapping,
the instruction counts) ask a target's :class:`AsmSyntax` (``target.asm``: each architecture's is
in its :class:`explorer.target.arches.CpuArch`) instead of testing its architecture;
:data:`ANY_ASM` reads a listing whose architecture is unknown. Plain data, no imports of schedx
or TVM."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class AsmSyntax:
    """One architecture's assembly vocabulary (regular expressions as text).

    ``comments``: what starts a comment; ``branches``: branches whose last operand is a local
    label (group ``label``); ``ends``: instructions after which control never falls through (a
    jump, a return); ``fma``: multiply-add mnemonics; ``vector``: a vector register operand;
    ``dot``: dot-product mnemonics; ``registers``: (operand pattern, bits) of its vector
    registers, bits 0 where the pattern's groups ``lanes`` and ``size`` (b, h, s, d) give them."""

    name: str
    comments: tuple[str, ...]
    branches: tuple[str, ...]
    ends: str
    fma: str
    vector: str
    dot: str = r"(?!)"
    registers: tuple[tuple[str, int], ...] = ()

    def code(self, line: str) -> str:
        """A line without its comment, stripped."""
        for marker in self.comments:
            line = line.split(marker, 1)[0]
        return line.strip()

    def is_instruction(self, line: str) -> bool:
        """Whether a line is an instruction (not a directive, a label, a comment or blank)."""
        text = self.code(line)
        return bool(text) and not text.startswith(".") and not text.endswith(":")

    def label(self, line: str) -> str:
        """The local label (``.LBB0_3``) a line defines ("" when none)."""
        found = _LABEL.match(line)
        return found.group(1) if found else ""

    def branch_target(self, line: str) -> str:
        """The local label a branch instruction goes to ("" when the line is no such branch)."""
        code = self.code(line)
        found = next((m for m in (re.match(b, code, re.IGNORECASE) for b in self.branches) if m), None)
        return found.group("label") if found else ""

    def ends_flow(self, line: str) -> bool:
        """Whether control never goes on to the next line after this instruction."""
        return bool(re.match(self.ends, self.code(line), re.IGNORECASE))

    def is_fma(self, line: str) -> bool:
        return bool(re.match(self.fma, self.code(line), re.IGNORECASE))

    def is_vector(self, line: str) -> bool:
        return bool(re.search(self.vector, self.code(line)))

    def is_dot(self, line: str) -> bool:
        return bool(re.match(self.dot, self.code(line), re.IGNORECASE))

    def vector_bits(self, operands: str) -> int:
        """Bits of the widest vector register ``operands`` name (0 when none)."""
        best = 0
        for pattern, bits in self.registers:
            for m in re.finditer(pattern, operands):
                best = max(best, bits or int(m.group("lanes")) * _ELEMENT_BITS[m.group("size")])
        return best


_ELEMENT_BITS = {"b": 8, "h": 16, "s": 32, "d": 64}
_LABEL = re.compile(r"^\s*(\.L[\w.$]+):")
_LOCAL = r"(?P<label>\.L[\w.$]+)\s*$"

X86_ASM = AsmSyntax(
    "x86_64", ("#",),
    branches=(r"j\w*\s+" + _LOCAL,),  # jne .LBB0_3, jmp .LBB0_3
    ends=r"(jmp\w*|ret\w*|ud2)\b",
    fma=r"v?f(n)?m(add|sub)\w*\s",  # vfmadd231ps, vfnmadd213ss
    vector=r"%[xyz]mm\d",
    dot=r"(vpdp|vpmaddubsw|vpmaddwd|vdpbf16)\w*\s",
    registers=((r"\bzmm\d", 512), (r"\bymm\d", 256), (r"\bxmm\d", 128)),
)
AARCH64_ASM = AsmSyntax(
    "aarch64", ("//",),
    # b.ne .LBB0_3, b .LBB0_3, cbnz x8, .LBB0_3, tbz w1, #3, .LBB0_3
    branches=(r"(b(\.\w+)?|cbn?z|tbn?z)\s+(?:[^,\s]+,\s*)*" + _LOCAL,),
    ends=r"(b|br|ret|brk)\b(?!\.)",
    fma=r"(fml[as]|fn?m(add|sub))\s",  # fmla v0.4s, ...; fmadd s0, ...
    vector=r"\bv\d+\.\d+[bhsd]\b|\bz\d+\.[bhsd]\b",
    dot=r"(sdot|udot|bfdot|smmla|ummla)\s",
    registers=((r"\bv\d+\.(?P<lanes>\d+)(?P<size>[bhsd])\b", 0), (r"\bz\d+\.[bhsd]\b", 2048)),  # SVE: scalable
)
# a listing whose architecture is unknown: either vocabulary (an AArch64 immediate ``#3`` reads as a comment)
ANY_ASM = AsmSyntax(
    "any", ("//", "#"),
    branches=X86_ASM.branches + AARCH64_ASM.branches,
    ends=f"(?:{X86_ASM.ends}|{AARCH64_ASM.ends})",
    fma=f"(?:{X86_ASM.fma}|{AARCH64_ASM.fma})",
    vector=f"(?:{X86_ASM.vector}|{AARCH64_ASM.vector})",
    dot=f"(?:{X86_ASM.dot}|{AARCH64_ASM.dot})",
    registers=X86_ASM.registers + AARCH64_ASM.registers,
)
# (each CPU architecture's own is :attr:`explorer.target.arches.CpuArch.asm`)

__all__ = ["AARCH64_ASM", "ANY_ASM", "AsmSyntax", "X86_ASM"]
