"""Whether a target's code generator can take the instructions a scheduled kernel names, asked
before anything is built.

A ``tensorize`` step (schedx's intrinsics, TVM's own) puts instruction-set intrinsics in the kernel:
``T.call_llvm_pure_intrin("...", "llvm.x86.avx512.vpdpbusd.512", ...)``, or an LLVM IR function
imported with ``pragma_import_llvm`` that calls ``llvm.x86.tdpbf16ps``. LLVM cannot select such an
intrinsic for a CPU without the feature, and it does not raise: it prints ``LLVM ERROR: Cannot
select: intrinsic %llvm.x86.tilerelease`` and aborts the process (a Streamlit server, the CLI). A
record or steps file made on an AMX machine and opened on one without AMX does exactly that, so
every build of a scheduled kernel asks :func:`isa_refusal` first (the Schedule page's code views and
measurements, ``schedx measure``, an export's records: one the target cannot take falls back to the default). Building for a target that has
the features (``cpu:sapphirerapids``) works on any machine; running it needs that CPU
(:meth:`explorer.target.Target.why_not_here`).

The table names each family of intrinsics by LLVM's own names, so it covers schedx's intrinsics,
TVM's (``dot_16x4_vnni``) and anything a trace names; an intrinsic it does not know is let through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import tvm

from explorer.ir.tir_walk import walk
from explorer.schedule.llvm_import import IMPORT_LLVM
from explorer.target import Target, TargetError


class IsaError(TargetError):
    """A kernel uses instructions its target lacks: building it would abort LLVM, process and all."""


@dataclass(frozen=True)
class IsaFamily:
    """Intrinsics whose LLVM names match ``pattern`` need, on ``arch``, one of ``alternatives`` (LLVM
    feature sets, each enough); ``example``: a target spelling that has the first one ("" if none)."""

    name: str  # "AMX-BF16 tiles"
    pattern: str
    arch: str
    alternatives: tuple[frozenset[str], ...]
    example: str = ""

    def lacking(self, target: Target) -> tuple[str, ...]:
        """The features ``target`` lacks for these intrinsics (() when it has an alternative)."""
        if target.arch != self.arch:
            return (f"{self.arch} instructions",)
        have = target.features
        if not self.alternatives or any(alt <= have for alt in self.alternatives):
            return ()
        return tuple(sorted(self.alternatives[0] - have))


def _x86(name: str, pattern: str, *alternatives: tuple[str, ...], example: str = "") -> IsaFamily:
    return IsaFamily(name, pattern, "x86_64", tuple(frozenset(a) for a in alternatives), example)


def _arm(name: str, pattern: str, *alternatives: tuple[str, ...], example: str = "") -> IsaFamily:
    return IsaFamily(name, pattern, "aarch64", tuple(frozenset(a) for a in alternatives), example)


# First match wins: the narrower families first.
FAMILIES: tuple[IsaFamily, ...] = (
    _x86("AMX-BF16 tiles", r"llvm\.x86\.tdpbf16ps", ("amx-tile", "amx-bf16"), example="cpu:sapphirerapids"),
    _x86("AMX-INT8 tiles", r"llvm\.x86\.tdpb[su][su]d", ("amx-tile", "amx-int8"), example="cpu:sapphirerapids"),
    _x86("AMX-FP16 tiles", r"llvm\.x86\.tdpfp16ps", ("amx-tile", "amx-fp16"), example="cpu:graniterapids"),
    _x86("AMX tiles", r"llvm\.x86\.(tile|ldtilecfg|sttilecfg)", ("amx-tile",), example="cpu:sapphirerapids"),
    _x86("AVX512-BF16 dot products", r"llvm\.x86\.avx512bf16\.", ("avx512bf16",), example="cpu:cooperlake"),
    _x86("AVX512-VNNI dot products", r"llvm\.x86\.avx512\.vpdp\w+\.512", ("avx512vnni",), example="cpu:cascadelake"),
    _x86("VNNI dot products", r"llvm\.x86\.avx512\.vpdp\w+\.(128|256)", ("avxvnni",), ("avx512vnni", "avx512vl"),
         example="cpu:alderlake"),
    _x86("AVX512-BW", r"llvm\.x86\.avx512\.(pmaddubs\.w|pmaddw\.d|pmul\.hr\.sw|psad\.bw)", ("avx512bw",),
         example="cpu:skylake-avx512"),
    _x86("AVX-512", r"llvm\.x86\.avx512\.", ("avx512f",), example="cpu:skylake-avx512"),
    _x86("AVX2", r"llvm\.x86\.avx2\.", ("avx2",), example="cpu:haswell"),
    _x86("FMA", r"llvm\.x86\.fma\.", ("fma",), example="cpu:haswell"),
    _x86("AVX", r"llvm\.x86\.avx\.", ("avx",), example="cpu:sandybridge"),
    _x86("x86 instructions", r"llvm\.x86\.", ()),
    _arm("SME", r"llvm\.aarch64\.sme\.", ("sme",)),
    _arm("SVE", r"llvm\.aarch64\.sve\.", ("sve",), example="aarch64:neoverse-v1"),
    _arm("int8 matrix products (I8MM)", r"llvm\.aarch64\.neon\.(s|u|us)mmla", ("i8mm",),
         example="aarch64:neoverse-v1"),
    _arm("bf16 dot products", r"llvm\.aarch64\.neon\.bf(dot|mmla|mlal)", ("bf16",), example="aarch64:neoverse-v1"),
    _arm("dot products (dotprod)", r"llvm\.aarch64\.neon\.(s|u|us)dot", ("dotprod",), example="aarch64:cortex-a76"),
    _arm("NEON", r"llvm\.aarch64\.neon\.", ("neon",), example="aarch64:cortex-a76"),
    _arm("AArch64 instructions", r"llvm\.aarch64\.", ()),
)
_FAMILY_RES = tuple((family, re.compile(family.pattern)) for family in FAMILIES)
_INTRINSIC = re.compile(r"llvm\.(?:x86|aarch64)\.[\w.]+")
_CALLED = re.compile(r'call_llvm(?:_pure)?_intrin\("[^"]*", "(llvm\.[\w.]+)"')
_DEFINE = re.compile(r"^define\s[^@]*@([\w.$]+)\(", re.M)


def family_of(intrinsic: str) -> IsaFamily | None:
    """The family of an LLVM intrinsic's name (None: not an instruction-set intrinsic schedx knows)."""
    return next((family for family, pattern in _FAMILY_RES if pattern.match(intrinsic)), None)


@dataclass(frozen=True)
class IsaNeed:
    """One family of intrinsics a kernel uses: which (``intrinsics``) and the LLVM IR functions that
    call them (``functions``: those a ``pragma_import_llvm`` defines, what a schedule's ``call_extern`` names)."""

    family: IsaFamily
    intrinsics: tuple[str, ...]
    functions: tuple[str, ...] = ()

    def describe(self) -> str:
        """``AMX-BF16 tiles (llvm.x86.tdpbf16ps in schedx_amx_bf16_conv_tile_16x2x2_b64)``."""
        where = f" in {', '.join(self.functions[:2])}" if self.functions else ""
        return f"{self.family.name} ({', '.join(self.intrinsics[:3])}{where})"

    def to_dict(self) -> dict:
        return {"family": self.family.name, "intrinsics": list(self.intrinsics), "functions": list(self.functions)}


def isa_needs(mod: tvm.IRModule) -> tuple[IsaNeed, ...]:
    """The instruction-set families ``mod``'s PrimFuncs call, directly or through imported LLVM IR."""
    found: dict[str, tuple[IsaFamily, set[str], set[str]]] = {}

    def note(intrinsic: str, function: str | None) -> None:
        family = family_of(intrinsic)
        if family is None:
            return
        _, names, functions = found.setdefault(family.name, (family, set(), set()))
        names.add(intrinsic)
        if function:
            functions.add(function)

    for func in mod.functions.values():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        for ir_text in _imported_llvm(func):
            for function, body in _functions(ir_text):
                for intrinsic in _INTRINSIC.findall(body):
                    note(intrinsic, function)
        if "call_llvm" in (script := func.script()):
            for intrinsic in _CALLED.findall(script):
                note(intrinsic, None)
    order = {family.name: i for i, family in enumerate(FAMILIES)}
    return tuple(IsaNeed(family, tuple(sorted(names)), tuple(sorted(functions)))
                 for family, names, functions in sorted(found.values(), key=lambda v: order[v[0].name]))


def _imported_llvm(func: tvm.tirx.PrimFunc) -> list[str]:
    """The LLVM IR texts ``func`` imports (``pragma_import_llvm`` on a loop or block, or as an attribute)."""
    texts = []
    for node in walk(func.body):
        annotations = getattr(node, "annotations", None)
        if annotations is not None and IMPORT_LLVM in annotations:
            texts.append(str(annotations[IMPORT_LLVM]))
        if getattr(node, "attr_key", None) == IMPORT_LLVM:
            texts.append(str(getattr(node.value, "value", node.value)))
    return texts


def _functions(ir_text: str) -> list[tuple[str | None, str]]:
    """``(name, text)`` of each part of an LLVM IR text: the declarations before the first function and
    every function it defines, each named by the text's first public function (what a schedule's
    ``call_extern`` calls: an ``internal`` helper's intrinsics are its caller's); None when it has none."""
    cuts = list(_DEFINE.finditer(ir_text))
    public = [m.group(1) for m in cuts if " internal " not in m.group(0)]
    first = public[0] if public else None
    parts = [(first, ir_text[:cuts[0].start()] if cuts else ir_text)]
    for m, end in zip(cuts, [c.start() for c in cuts[1:]] + [len(ir_text)]):
        parts.append((first if " internal " in m.group(0) else m.group(1), ir_text[m.start():end]))
    return parts


def missing_needs(needs: tuple[IsaNeed, ...], target: Target) -> tuple[IsaNeed, ...]:
    """Of ``needs``, those ``target`` lacks the features for; a need whose lacking features another's
    include is left out (AMX tiles beside AMX-BF16 tiles)."""
    lacking = [(need, set(need.family.lacking(target))) for need in needs]
    lacking = [(need, miss) for need, miss in lacking if miss]
    return tuple(need for need, miss in lacking
                 if not any(other is not need and miss < more for other, more in lacking))


def _examples(missing: tuple[IsaNeed, ...]) -> list[str]:
    return list(dict.fromkeys(need.family.example for need in missing if need.family.example))


def targets_with(mod: tvm.IRModule, target: Target) -> tuple[str, ...]:
    """Target spellings that have the instructions ``mod`` uses and ``target`` lacks (() when it lacks
    none): where the code can still be built, compile only, on a machine without them."""
    return tuple(_examples(missing_needs(isa_needs(mod), target)))


def isa_refusal(mod: tvm.IRModule, target: Target) -> str:
    """Why ``target``'s code generator cannot take ``mod``'s instructions ("" when it can), with what
    to do instead: a target that has them (compile only here), or a machine that has them."""
    missing = missing_needs(isa_needs(mod), target)
    if not missing:
        return ""
    examples = _examples(missing)
    families = " and ".join(need.family.name for need in missing)
    uses = "; ".join(need.describe() for need in missing)
    foreign = next((need.family.arch for need in missing if need.family.arch != target.arch), None)
    if foreign is not None:  # another architecture's instructions: only a target of that one builds them
        who = "this CPU" if target.is_host else f"the target {target.label}"
        return f"this schedule uses {foreign} instructions, {uses}: {who} is {target.arch}; build it for an " \
               f"{foreign} target{' (' + ' or '.join(examples) + ')' if examples else ''}"
    lacking = sorted({f for need in missing for f in need.family.lacking(target)})
    if target.is_host:
        build = (f"see its code built for {' or '.join(examples)} (compile only: the Schedule page's target picker) or "
                 if examples else "")
        return f"this schedule uses {uses}: this CPU has no {', '.join(lacking)}; {build}measure it on a machine " \
               f"with {families}"
    pick = f" ({' or '.join(examples)})" if examples else ""
    return f"this schedule uses {uses}: the target {target.label} has no {', '.join(lacking)}; pick a target with " \
           f"{families}{pick}"


def require_isa(mod: tvm.IRModule, target: Target, action: str = "build") -> None:
    """Raise :class:`IsaError` before ``mod`` is built for a ``target`` that lacks its instructions."""
    why = isa_refusal(mod, target)
    if why:
        raise IsaError(f"cannot {action} for {target.label}: {why}")


__all__ = ["FAMILIES", "IsaError", "IsaFamily", "IsaNeed", "family_of", "isa_needs", "isa_refusal", "missing_needs",
           "require_isa", "targets_with"]
