"""Text diff of TVMScript between two snapshots, per function, unified or side by side.

A module's TVMScript is split into its functions (one ``@R.function`` / ``@T.prim_func`` block
each) so a diff says which functions a pass added, removed or changed, and shows each change on
its own instead of one long diff where unrelated functions interleave.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from store.values import DictValue

_DEF = re.compile(r"^\s+def ([A-Za-z_][\w]*)\(")


def split_functions(script: str) -> dict[str, str]:
    """``{function name: its text}`` from a module's TVMScript (decorators included)."""
    lines = script.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("    @") and not ln.startswith("     ")]
    out: dict[str, str] = {}
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        chunk = lines[start:end]
        while chunk and (not chunk[-1].strip() or chunk[-1].startswith("# Metadata")):
            chunk.pop()
        name = next((m.group(1) for ln in chunk if (m := _DEF.match(ln))), f"function{k}")
        out[name] = "\n".join(chunk)
    if not starts and script.strip():
        out["<module>"] = script
    return out


@dataclass(frozen=True)
class DiffRow:
    """One row of a side-by-side diff; ``tag`` is equal, replace, delete or insert."""

    tag: str
    left_no: int | None
    left: str
    right_no: int | None
    right: str


@dataclass(frozen=True)
class FunctionDiff(DictValue):
    """How one function's text changed: ``status`` is same, changed, added or removed."""

    name: str
    status: str
    added: int
    removed: int
    unified: str


def unified(before: str, after: str, name: str = "", context: int = 3) -> str:
    return "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), f"before/{name}",
                                          f"after/{name}", n=context, lineterm=""))


def side_by_side(before: str, after: str, context: int | None = 3) -> list[DiffRow]:
    """Rows pairing the two texts; with ``context``, runs of equal lines are cut to that many
    around each change (a row with tag ``skip`` marks a cut)."""
    a, b = before.splitlines(), after.splitlines()
    rows: list[DiffRow] = []
    groups = (difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context)
              if context is not None else [difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()])
    for gi, group in enumerate(groups):
        if gi > 0 or (group and (group[0][1] > 0 or group[0][3] > 0)):
            rows.append(DiffRow("skip", None, "", None, ""))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [DiffRow("equal", i + 1, a[i], j + 1, b[j]) for i, j in zip(range(i1, i2), range(j1, j2))]
            elif tag == "replace":
                n = max(i2 - i1, j2 - j1)
                for k in range(n):
                    i, j = i1 + k, j1 + k
                    rows.append(DiffRow("replace", i + 1 if i < i2 else None, a[i] if i < i2 else "",
                                        j + 1 if j < j2 else None, b[j] if j < j2 else ""))
            elif tag == "delete":
                rows += [DiffRow("delete", i + 1, a[i], None, "") for i in range(i1, i2)]
            else:
                rows += [DiffRow("insert", None, "", j + 1, b[j]) for j in range(j1, j2)]
    return rows


def inline_changes(left: str, right: str, similar: float = 0.5) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """Two versions of a line cut into runs of ``(text, changed)``: what a reader's eye should
    land on in a replaced line (``T.int64(64)`` -> ``T.int64(56)``: only ``4`` -> ``5`` is marked).
    Lines less alike than ``similar`` (difflib's ratio) are different lines: nothing is marked."""
    sm = difflib.SequenceMatcher(None, left, right, autojunk=False)
    if sm.ratio() < similar:
        return [(left, False)], [(right, False)]
    a: list[tuple[str, bool]] = []
    b: list[tuple[str, bool]] = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if i2 > i1:
            a.append((left[i1:i2], tag != "equal"))
        if j2 > j1:
            b.append((right[j1:j2], tag != "equal"))
    return a, b


def diff_scripts(before: str, after: str) -> list[FunctionDiff]:
    """Per-function diff of two module scripts: changed, added and removed functions first."""
    fa, fb = split_functions(before), split_functions(after)
    out: list[FunctionDiff] = []
    for name in list(fa) + [n for n in fb if n not in fa]:
        x, y = fa.get(name, ""), fb.get(name, "")
        if x == y:
            out.append(FunctionDiff(name, "same", 0, 0, ""))
            continue
        status = "added" if name not in fa else "removed" if name not in fb else "changed"
        text = unified(x, y, name)
        plus = sum(1 for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
        minus = sum(1 for ln in text.splitlines() if ln.startswith("-") and not ln.startswith("---"))
        out.append(FunctionDiff(name, status, plus, minus, text))
    order = {"changed": 0, "added": 1, "removed": 2, "same": 3}
    return sorted(out, key=lambda d: order[d.status])
