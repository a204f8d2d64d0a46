"""Debug locations in a TVM kernel's LLVM IR, made fit for Compiler Explorer's line mapping.

TVM 0.27's LLVM code generator gives each statement the line of its span, but its loops come
out of the lowering passes without spans, and it writes a loop's increment with the location of
the last statement of the body; LLVM's optimisations then leave many instructions (hoisted
loads, address arithmetic, the parallel loop's chunking) with no location or line 0. This
module rewrites the IR's ``!dbg`` attachments, reading only what TVM's code generator leaves
in any CPU build:

- **loop control** (each loop's compare and branch, its induction variables' increments, its
  bound; a parallel loop's launch): a branch that leaves a loop goes to the block TVM named
  ``for_end_<var>`` (LLVM keeps the names, adding suffixes such as ``.loopexit``); an
  unconditional back edge goes to the header, ``for_begin_<var>``; where names say nothing,
  LLVM's ``#dbg_value`` records name the loop variable an induction value holds; a parallel
  loop's body is launched with a closure of type ``%closure_loop_parallel_<var>``. These
  instructions get the line of ``for <var>``;
- **instructions without a line**: the line of the earliest instruction that uses them (a
  hoisted load, the address of a store), through phi nodes, so that a value computed only for a
  statement belongs to it and one computed for a loop's control to that loop; a store without
  one (an accumulator LLVM sank out of its loop) the line of the value it stores.

It also gives every function without a debug subprogram one of its own (the parallel loop's
outlined body): LLVM drops a module's debug information when one function's instructions point
into another's. Plain text in, plain text out; nothing here runs TVM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_DEFINE = re.compile(r"^define\b[^@]*@(\"[^\"]+\"|[-\w.$]+)\(.*\{\s*$")
_METADATA = re.compile(r"^!(\d+) = (.*)$")
_CALL = re.compile(r"^\s*(%\S+ = )?((tail|musttail|notail) )?call ")
_LABEL = re.compile(r"^([-\w.$]+|\"[^\"]+\"):")
_DEF = re.compile(r"^\s*(%[-\w.$]+|%\"[^\"]+\") = (?:(?:tail|musttail|notail) )?(\w+)")
_VALUE = re.compile(r"%[-\w.$]+|%\"[^\"]+\"")
_DBG = re.compile(r"!dbg !(\d+)")
_DBG_VALUE = re.compile(r"^\s*#dbg_(?:value|declare)\(\w[^%]*?(%[-\w.$]+)\s*,\s*!(\d+)")
_BR = re.compile(r"^\s*br\s+(?:i1\s+(%[-\w.$]+),\s*)?label\s+%([-\w.$]+)(?:,\s*label\s+%([-\w.$]+))?")
_LINE = re.compile(r"!DILocation\(line: (\d+)")
_VARIABLE = re.compile(r'!DILocalVariable\(name: "([^"]+)"')
_PARALLEL = re.compile(r"alloca %closure_loop_parallel_([\w.$]+)")
_EFFECTS = frozenset({"store", "call"})  # instructions that matter for what they do, not for a value
# instructions that step an induction variable or narrow it for its compare
_STEP = frozenset({"add", "sub", "or", "getelementptr", "trunc", "zext", "sext", "icmp", "select"})


@dataclass
class _Inst:
    text: str
    block: int  # index of its block in the function
    name: str = ""  # the value it defines ("" when none)
    op: str = ""
    operands: tuple[str, ...] = ()
    line: int = 0  # its source line (0: none yet)
    control: bool = False  # a loop's compare, branch or increment: its line is the loop's, whatever LLVM said


@dataclass
class _Function:
    blocks: list[str] = field(default_factory=list)
    insts: list[_Inst] = field(default_factory=list)
    holds: dict[str, str] = field(default_factory=dict)  # value -> the loop variable a #dbg_value says it holds


def mend_debug_info(llvm_ir: str, loop_lines: dict[str, int] | None = None) -> str:
    """Give every function of an LLVM IR text that has none a debug subprogram of its own, its
    instructions' locations re-scoped to it (and its calls a location), so that LLVM keeps the
    module's debug information; variable records of other functions' scopes are dropped.

    With ``loop_lines`` (each loop variable's line in the source), the instructions of each
    loop's control get that line, and instructions without a line their users' (see the
    module docstring)."""
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
        meta[n] = value
        return n

    out: list[str] = []
    body: list[str] = []  # the function being read, mended line by line, then given its loops' lines
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
            body = _with_loop_lines(body, meta, scope[0], loop_lines, new) if loop_lines else body
            # variable records of other functions' scopes go (read above: they name the loops' values)
            out.extend(b for b in body if not (mending and b.lstrip().startswith("#dbg_")))
            body, scope = [], None
        if scope is None:
            out.append(line)
            continue
        if mending:
            if "call void @llvm.dbg." in line:
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
        body.append(line)
    return "\n".join(out + extra) + "\n"


def _with_loop_lines(body: list[str], meta: dict[int, str], sub: int, loop_lines: dict[str, int], new) -> list[str]:
    """A function's lines with loop control and unlocated instructions given source lines."""
    f = _parse(body, meta)
    _mark_control(f, loop_lines)
    _lines_from_users(f)
    locations: dict[int, int] = {}
    out = list(body)
    for inst_no, inst in zip(_line_numbers(body), f.insts):
        if not inst.line or inst.op == "phi" or (not inst.control and _own_line(inst.text, meta)):
            continue
        if inst.line not in locations:
            locations[inst.line] = new(f"!DILocation(line: {inst.line}, column: 0, scope: !{sub})")
        tag = f"!dbg !{locations[inst.line]}"
        out[inst_no] = _DBG.sub(tag, inst.text) if _DBG.search(inst.text) else inst.text + f", {tag}"
    return out


def _line_numbers(body: list[str]) -> list[int]:
    """The indices in ``body`` of its instructions (what :func:`_parse` reads as instructions)."""
    return [no for no, line in enumerate(body) if _is_instruction(line)]


def _is_instruction(line: str) -> bool:
    text = line.strip()
    return bool(text) and not text.startswith((";", "#dbg_")) and not _LABEL.match(line)


def _own_line(text: str, meta: dict[int, str]) -> int:
    """The line an instruction's own ``!dbg`` location gives (0: none, or line 0)."""
    found = _DBG.search(text)
    loc = _LINE.search(meta.get(int(found.group(1)), "")) if found else None
    return int(loc.group(1)) if loc else 0


def _parse(body: list[str], meta: dict[int, str]) -> _Function:
    f = _Function()
    for line in body:
        label = _LABEL.match(line)
        if label:
            f.blocks.append(label.group(1).strip('"'))
            continue
        record = _DBG_VALUE.match(line)
        if record:
            var = _VARIABLE.match(meta.get(int(record.group(2)), ""))
            if var:
                f.holds.setdefault(record.group(1), var.group(1))
            continue
        if not _is_instruction(line):
            continue
        if not f.blocks:
            f.blocks.append("")  # an entry block without a label
        code = line.split(", !", 1)[0]
        d = _DEF.match(code)
        name, op = (d.group(1), d.group(2)) if d else ("", code.split()[0])
        operands = tuple(v for v in _VALUE.findall(code[d.end():] if d else code) if v != name)
        f.insts.append(_Inst(line, len(f.blocks) - 1, name, op, operands, _own_line(line, meta)))
    return f


def _loop_named(block: str, prefix: str, loop_lines: dict[str, int]) -> str:
    """The loop variable a block named ``<prefix><var>[.suffix]`` stands for ("" when none)."""
    if not block.startswith(prefix):
        return ""
    rest = block[len(prefix):]
    return next((v for v in sorted(loop_lines, key=len, reverse=True)
                 if rest == v or rest.startswith(v + ".")), "")


def _mark_control(f: _Function, loop_lines: dict[str, int]) -> None:
    """Give each loop's branches, compares and increments the loop's line."""
    defs = {inst.name: inst for inst in f.insts if inst.name}
    index = {name: i for i, name in enumerate(f.blocks)}
    for inst in f.insts:
        if inst.op == "alloca":
            parallel = _PARALLEL.search(inst.text)
            if parallel and parallel.group(1) in loop_lines:  # the launch of a parallel loop's body
                for other in f.insts:  # the call that takes this closure
                    if other.op == "call" and "@__tvm_parallel_lambda" in other.text and inst.name in other.operands:
                        _control(other, loop_lines[parallel.group(1)])
            continue
        br = _BR.match(inst.text)
        if br is None:
            continue
        cond, targets = br.group(1), [t for t in br.group(2, 3) if t]
        back = [t for t in targets if _is_back_edge(f, index.get(t), inst.block)]
        exits = [t for t in targets if t not in back]
        var = ""
        if back and cond is None:  # an unconditional back edge: the loop its header starts
            var = _loop_named(back[0], "for_begin_", loop_lines) or _held(f, back[0], defs, loop_lines)
        elif cond is not None:
            named = [v for v in (_loop_named(t, "for_end_", loop_lines) for t in exits) if v]
            var = (named[0] if len(named) == 1 else "") or _held_by(cond, defs, f, loop_lines)
        if not var:
            continue
        line = loop_lines[var]
        _control(inst, line)
        if cond is not None:
            _control_chain(defs.get(cond), defs, line)
        for header in back:  # the induction variables the back edge carries
            for phi in (i for i in f.insts if i.block == index[header] and i.op == "phi"):
                step = _incoming(phi, f.blocks[inst.block], defs)
                if step is not None and step.op in _STEP and phi.name in step.operands:
                    _control(step, line)


def _is_back_edge(f: _Function, target: int | None, block: int) -> bool:
    """Whether a branch from ``block`` to ``target`` goes back to a loop's header: one laid out
    before it whose phi nodes take a value from it (or, where it has none, that is no loop's exit)."""
    if target is None or target > block:
        return False
    phis = [i for i in f.insts if i.block == target and i.op == "phi"]
    if phis:
        return any(re.search(r",\s*%" + re.escape(f.blocks[block]) + r"\s*\]", p.text) for p in phis)
    return not f.blocks[target].startswith("for_end_")


def _control(inst: _Inst, line: int) -> None:
    inst.line, inst.control = line, True


def _control_chain(inst: _Inst | None, defs: dict[str, _Inst], line: int, depth: int = 3) -> None:
    """A branch's condition and the narrowing and stepping it is computed by."""
    if inst is None or depth == 0 or inst.op not in _STEP:
        return
    _control(inst, line)
    for operand in inst.operands:
        _control_chain(defs.get(operand), defs, line, depth - 1)


def _incoming(phi: _Inst, block: str, defs: dict[str, _Inst]) -> _Inst | None:
    """The instruction defining what ``phi`` takes from ``block``."""
    found = re.search(r"\[\s*(%[-\w.$]+),\s*%" + re.escape(block) + r"\s*\]", phi.text)
    return defs.get(found.group(1)) if found else None


def _held_by(value: str, defs: dict[str, _Inst], f: _Function, loop_lines: dict[str, int], depth: int = 4) -> str:
    """The loop variable a ``#dbg_value`` record says ``value`` (or what it is computed from) holds."""
    if f.holds.get(value) in loop_lines:
        return f.holds[value]
    inst = defs.get(value)
    if inst is None or depth == 0 or inst.op not in _STEP | {"phi"}:
        return ""
    return next((v for v in (_held_by(o, defs, f, loop_lines, depth - 1) for o in inst.operands) if v), "")


def _held(f: _Function, header: str, defs: dict[str, _Inst], loop_lines: dict[str, int]) -> str:
    """The loop variable one of a loop header's phi nodes holds."""
    block = f.blocks.index(header)
    return next((f.holds[i.name] for i in f.insts
                 if i.block == block and i.op == "phi" and f.holds.get(i.name) in loop_lines), "")


def _lines_from_users(f: _Function) -> None:
    """Give each value without a line the line of its earliest user that has one, and each store
    (or call) without a line that of the value it stores (or its first argument with a line)."""
    users: dict[str, list[int]] = {}
    defs = {inst.name: inst for inst in f.insts if inst.name}
    for no, inst in enumerate(f.insts):
        for operand in inst.operands:
            users.setdefault(operand, []).append(no)
    changed = True
    while changed:
        changed = False
        for inst in reversed(f.insts):
            if inst.line:
                continue
            if inst.name:
                line = next((f.insts[u].line for u in users.get(inst.name, ()) if f.insts[u].line), 0)
            elif inst.op in _EFFECTS:
                line = next((defs[o].line for o in inst.operands if o in defs and defs[o].line), 0)
            else:
                continue
            if line:
                inst.line, changed = line, True


__all__ = ["mend_debug_info"]
