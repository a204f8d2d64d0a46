"""How each CPU architecture's assembly reads, as LLVM writes it: what starts a comment, which
lines are labels, instructions and branches, which mnemonics are multiply-adds and which
operands vector registers. The assembly views (the hot loop, the line mapping) ask a target's
:class:`AsmSyntax` (``target.asm``) instead of testing its architecture; :data:`ANY_ASM` reads a
listing whose architecture is unknown. Plain data, no imports of schedx or TVM."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class AsmSyntax:
    """One architecture's assembly vocabulary (regular expressions as text).

    ``comments``: what starts a comment; ``branches``: branches whose last operand is a local
    label (group ``label``); ``ends``: instructions after which control never falls through (a
    jump, a return); ``fma``: multiply-add mnemonics; ``vector``: a vector register operand."""

    name: str
    comments: tuple[str, ...]
    branches: tuple[str, ...]
    ends: str
    fma: str
    vector: str

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


_LABEL = re.compile(r"^\s*(\.L[\w.$]+):")
_LOCAL = r"(?P<label>\.L[\w.$]+)\s*$"

X86_ASM = AsmSyntax(
    "x86_64", ("#",),
    branches=(r"j\w*\s+" + _LOCAL,),  # jne .LBB0_3, jmp .LBB0_3
    ends=r"(jmp\w*|ret\w*|ud2)\b",
    fma=r"v?f(n)?m(add|sub)\w*\s",  # vfmadd231ps, vfnmadd213ss
    vector=r"%[xyz]mm\d",
)
AARCH64_ASM = AsmSyntax(
    "aarch64", ("//",),
    # b.ne .LBB0_3, b .LBB0_3, cbnz x8, .LBB0_3, tbz w1, #3, .LBB0_3
    branches=(r"(b(\.\w+)?|cbn?z|tbn?z)\s+(?:[^,\s]+,\s*)*" + _LOCAL,),
    ends=r"(b|br|ret|brk)\b(?!\.)",
    fma=r"(fml[as]|fn?m(add|sub))\s",  # fmla v0.4s, ...; fmadd s0, ...
    vector=r"\bv\d+\.\d+[bhsd]\b|\bz\d+\.[bhsd]\b",
)
# a listing whose architecture is unknown: either vocabulary (an AArch64 immediate ``#3`` reads as a comment)
ANY_ASM = AsmSyntax(
    "any", ("//", "#"),
    branches=X86_ASM.branches + AARCH64_ASM.branches,
    ends=f"(?:{X86_ASM.ends}|{AARCH64_ASM.ends})",
    fma=f"(?:{X86_ASM.fma}|{AARCH64_ASM.fma})",
    vector=f"(?:{X86_ASM.vector}|{AARCH64_ASM.vector})",
)
SYNTAX = {s.name: s for s in (X86_ASM, AARCH64_ASM)}


def asm_syntax(arch: str) -> AsmSyntax:
    """The assembly vocabulary of a CPU architecture (:data:`ANY_ASM` for one schedx does not know)."""
    return SYNTAX.get(arch, ANY_ASM)


__all__ = ["AARCH64_ASM", "ANY_ASM", "AsmSyntax", "SYNTAX", "X86_ASM", "asm_syntax"]
