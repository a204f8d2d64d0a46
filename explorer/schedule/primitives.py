"""The schedule primitives schedx offers, as a table: parameters, their kinds, and how each is
applied to a ``tvm.s_tir.Schedule``.

The table drives three things: validation of steps files (kinds and required arguments), the UI
form (which offers, per parameter kind, only blocks and loops that exist), and application.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import s_tir

from explorer.schedule.index_map import parse_index_map
from explorer.schedule.intrinsics import FAMILIES as SCHEDX_FAMILIES
from explorer.schedule.intrinsics import NAMES as SCHEDX_INTRINSICS
from explorer.schedule.intrinsics import is_schedx_name, register_for_trace
from explorer.schedule.refs import resolve_block, resolve_loop, resolve_target
from explorer.schedule.errors import ScheduleError, StepsFileError

THREAD_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
               "vthread.x", "vthread.y", "vthread.z")
SCOPES = ("global", "local", "shared", "shared.dyn", "wmma.accumulator")
# dot_16x4_avx512 builds and verifies here (353 GOPS on the int8 matmul vs 8.6 naive); TVM 0.27's
# dot_16x4_vnni tensorizes but its LLVM call fails verification at build time (vpdpbusd operand
# types), which measurement reports as a build error.
X86_INTRINSICS = ("dot_16x4_avx512", "dot_16x4_vnni")
# schedx's own (explorer.schedule.intrinsics), registered when used: those of fixed shape listed (what the
# form offers); the AMX ones, named per shape, accepted by is_schedx_name (what a default's steps hold)
INTRINSICS = X86_INTRINSICS + SCHEDX_INTRINSICS
INTRINSICS_TEXT = ("a tensor intrinsic: TVM's " + " or ".join(X86_INTRINSICS) + ", or one of schedx's: "
                   + "; ".join(SCHEDX_FAMILIES))


@dataclass(frozen=True)
class Param:
    """One argument: ``kind`` is block, loop, loops, target (block or loop), factors, int, bool,
    str, choice, value (annotation value), buffer (``read:0``/``write:0``) or index_map.

    A choice whose values cannot all be listed (intrinsics named per shape) lists those a form offers
    in ``choices`` and takes the rest where ``accepts`` says so; ``takes`` says what it takes, in words."""

    name: str
    kind: str
    required: bool = True
    default: object = None
    choices: tuple = ()
    help: str = ""
    accepts: Callable[[object], bool] | None = None
    takes: str = ""


@dataclass(frozen=True)
class Primitive:
    name: str
    params: tuple[Param, ...]
    summary: str
    apply: Callable


def _split(sch, a):
    return sch.split(resolve_loop(sch, a["loop"]), factors=list(a["factors"]))


def _loops(sch, refs):
    return [resolve_loop(sch, r) for r in refs]


def _merge(sch, a):
    """TVM's merge, refused where one loop is named twice (two names for one loop after an earlier
    merge, ``B/i_m`` and ``C/i_m``): TVM 0.27 kills the process on that."""
    loops = _loops(sch, a["loops"])
    for i, loop in enumerate(loops):
        for j in range(i):
            if sch.get_sref(loops[j]).same_as(sch.get_sref(loop)):
                raise ScheduleError(f"`{a['loops'][j]}` and `{a['loops'][i]}` are one loop; merge takes one loop "
                                    "of each nest")
    return sch.merge(*loops)


def _cache(kind):
    def run(sch, a):
        fn = sch.cache_read if kind == "read" else sch.cache_write
        return fn(resolve_block(sch, a["block"]), a["buffer_index"], a["scope"])
    return run


def _annotate(sch, a):
    sch.annotate(resolve_target(sch, a["target"]), a["key"], a["value"])


def _decompose_reduction(sch, a):
    """TVM's decompose_reduction, refused where TVM would compute a wrong result: the init goes
    above ``loop``, so every loop from there down to the block must drive one of the block's
    iterators. A loop it is merely nested in (after compute_at under a consumer's loop) would run
    the whole reduction again on the same output without a new init; TVM 0.27 accepts that."""
    from tvm.tirx.analysis import undefined_vars

    from explorer.schedule.errors import ScheduleError
    from explorer.ir.tir_walk import walk

    block, loop = resolve_block(sch, a["block"]), resolve_loop(sch, a["loop"])
    loops, target = sch.get_loops(block), sch.get(loop)
    start = next((i for i, lp in enumerate(loops) if sch.get(lp).same_as(target)), None)
    realize = next((r for r in walk(target) if isinstance(r, s_tir.SBlockRealize) and r.block.same_as(sch.get(block))),
                   None)
    if start is not None and realize is not None:
        used = {v for value in realize.iter_values for v in undefined_vars(value, [])}
        for lp in loops[start:]:
            var, extent = sch.get(lp).loop_var, sch.get(lp).extent
            if isinstance(extent, tvm.tirx.IntImm) and int(extent) == 1:
                continue  # runs once: harmless
            if not any(var.same_as(v) for v in used):
                raise ScheduleError(f"decompose_reduction(block={a['block']}, loop={a['loop']}): the block runs "
                                    f"under loop {var.name}, which drives none of its iterators, so its reduction "
                                    "would run again on the same output without a new init; pick a loop below it")
    sch.decompose_reduction(block, loop)


def _transform_layout(sch, a):
    kind, _, index = a["buffer"].partition(":")
    sch.transform_layout(resolve_block(sch, a["block"]), (kind, int(index)), parse_index_map(a["index_map"]))


def _transform_block_layout(sch, a):
    sch.transform_block_layout(resolve_block(sch, a["block"]), parse_index_map(a["index_map"]))


def _loop_partition(sch, a):
    return sch.loop_partition(resolve_loop(sch, a["loop"]), factors=list(a["factors"]))


def _reindex_cache_write(sch, a):
    return sch.reindex_cache_write(resolve_block(sch, a["block"]), a["buffer_index"], a["scope"],
                                   parse_index_map(a["index_map"]))


def annotate_buffer_access(sch: s_tir.Schedule, block, buffer: tuple[str, int], region) -> None:
    """Declare the region of ``buffer`` (``("write", 0)``) that ``block`` touches per iteration:
    ``region`` maps the block's iterators to ``(start, end, start, end, ...)``, one pair per
    dimension. (``Schedule.annotate_buffer_access`` in TVM 0.27 wants as many ranges as
    iterators, not as dimensions: its primitive is called directly.)"""
    from tvm.s_tir.schedule import _ffi_api
    from tvm.tirx import IndexMap

    from explorer.schedule.errors import ScheduleError

    iters = [iv.var for iv in sch.get(block).iter_vars]
    try:
        bounds = list(region(*iters))
    except TypeError as err:
        raise ScheduleError(f"annotate_buffer_access: the region takes the block's {len(iters)} iterators "
                            f"({', '.join(v.name for v in iters)}): {err}") from None
    index_map = IndexMap(initial_indices=iters, final_indices=bounds, inverse_index_map=None)
    _ffi_api.ScheduleAnnotateBufferAccess(sch, block, buffer[1], 0 if buffer[0] == "read" else 1, index_map)


def _annotate_buffer_access(sch, a):
    kind, _, index = a["buffer"].partition(":")
    annotate_buffer_access(sch, resolve_block(sch, a["block"]), (kind, int(index)), parse_index_map(a["region"]))


def _tensorize(sch, a):
    from explorer.tvm_fast import light_tensor_intrin

    light_tensor_intrin()  # registers this CPU's intrinsics only: 0.3 s instead of 20 s
    register_for_trace(a["intrin"])  # a schedx intrinsic, if it names one
    sch.tensorize(resolve_target(sch, a["target"]), a["intrin"])


_LOOP = Param("loop", "loop")
_BLOCK = Param("block", "block")
_SCOPE = Param("scope", "choice", False, "global", SCOPES)
_PRIMS = [
    Primitive("split", (_LOOP, Param("factors", "factors", help="one factor may be null: it is inferred")),
              "Split a loop into several, innermost factor last.", _split),
    Primitive("fuse", (Param("loops", "loops", help="adjacent loops, outer first"),),
              "Fuse adjacent loops into one.", lambda s, a: s.fuse(*_loops(s, a["loops"]))),
    Primitive("merge", (Param("loops", "loops", help="one loop of each sibling nest, same extent and depth"),),
              "Merge the loops of sibling nests into one loop running them in turn (each from 0, same extent); "
              "the loops above them, up to the nests' common parent, are merged too.", _merge),
    Primitive("reorder", (Param("loops", "loops", help="the new order, outer first"),),
              "Reorder loops of one nest.", lambda s, a: s.reorder(*_loops(s, a["loops"]))),
    Primitive("parallel", (_LOOP,), "Run a loop's iterations on all cores.",
              lambda s, a: s.parallel(resolve_loop(s, a["loop"]))),
    Primitive("vectorize", (_LOOP,), "Turn an innermost loop into SIMD instructions.",
              lambda s, a: s.vectorize(resolve_loop(s, a["loop"]))),
    Primitive("unroll", (_LOOP,), "Unroll a loop completely.", lambda s, a: s.unroll(resolve_loop(s, a["loop"]))),
    Primitive("bind", (_LOOP, Param("thread", "choice", choices=THREAD_AXES)), "Bind a loop to a GPU thread axis.",
              lambda s, a: s.bind(resolve_loop(s, a["loop"]), a["thread"])),
    Primitive("cache_read", (_BLOCK, Param("buffer_index", "int", False, 0), _SCOPE),
              "Stage the block's n-th input buffer in a cache block (returns the new block).", _cache("read")),
    Primitive("cache_write", (_BLOCK, Param("buffer_index", "int", False, 0), _SCOPE),
              "Compute into a cache block, then copy out (returns the new block).", _cache("write")),
    Primitive("compute_at", (_BLOCK, _LOOP, Param("preserve_unit_loops", "bool", False, False)),
              "Move a producer block under a loop of its consumer.",
              lambda s, a: s.compute_at(resolve_block(s, a["block"]), resolve_loop(s, a["loop"]),
                                        a["preserve_unit_loops"])),
    Primitive("reverse_compute_at", (_BLOCK, _LOOP, Param("preserve_unit_loops", "bool", False, False)),
              "Move a consumer block under a loop of its producer.",
              lambda s, a: s.reverse_compute_at(resolve_block(s, a["block"]), resolve_loop(s, a["loop"]),
                                                a["preserve_unit_loops"])),
    Primitive("compute_inline", (_BLOCK,), "Inline an elementwise producer into its consumers.",
              lambda s, a: s.compute_inline(resolve_block(s, a["block"]))),
    Primitive("reverse_compute_inline", (_BLOCK,), "Inline an elementwise consumer into its producer.",
              lambda s, a: s.reverse_compute_inline(resolve_block(s, a["block"]))),
    Primitive("decompose_reduction", (_BLOCK, _LOOP),
              "Split a reduction's initialisation out, above the given loop (do it last).",
              _decompose_reduction),
    Primitive("rfactor", (_LOOP, Param("factor_axis", "int", False, 0)),
              "Factor a reduction loop into a partial result (returns the rfactor block).",
              lambda s, a: s.rfactor(resolve_loop(s, a["loop"]), a["factor_axis"])),
    Primitive("storage_align", (_BLOCK, Param("buffer_index", "int", False, 0), Param("axis", "int"),
                                Param("factor", "int"), Param("offset", "int")),
              "Pad a buffer axis's stride to factor*k + offset.",
              lambda s, a: s.storage_align(resolve_block(s, a["block"]), a["buffer_index"], a["axis"],
                                           a["factor"], a["offset"])),
    Primitive("annotate", (Param("target", "target"), Param("key", "str",
                                                            help="e.g. pragma_auto_unroll_max_step"),
                           Param("value", "value")),
              "Annotate a loop or block (unroll pragmas, MetaSchedule hints).", _annotate),
    Primitive("unannotate", (Param("target", "target"), Param("key", "str")), "Remove an annotation.",
              lambda s, a: s.unannotate(resolve_target(s, a["target"]), a["key"])),
    Primitive("transform_layout", (_BLOCK, Param("buffer", "buffer", help="read:N or write:N"),
                                   Param("index_map", "index_map", help="lambda i, j: (i // 16, j, i % 16)")),
              "Change a buffer's layout with an index map (packing, transposing).", _transform_layout),
    Primitive("transform_block_layout", (_BLOCK, Param("index_map", "index_map",
                                                       help="the block's iterators -> new ones, "
                                                            "e.g. lambda n, h, w, c: (n, h * 7 + w, c)")),
              "Give a block new iterators through an index map (two output axes run as one; its loops follow).",
              _transform_block_layout),
    Primitive("loop_partition", (_LOOP, Param("factors", "factors", help="one factor may be null: it is inferred")),
              "Cut a loop into consecutive loops of the given extents, each with its own copy of the body "
              "(a tail that no tile divides gets a schedule of its own; returns the loops).", _loop_partition),
    Primitive("reindex_cache_write", (_BLOCK, Param("buffer_index", "int", False, 0), _SCOPE,
                                      Param("index_map", "index_map",
                                            help="the block's iterators -> the cache's indices, "
                                                 "e.g. lambda i, j, k: (i, j)")),
              "Like cache_write, with the cache indexed by the block's own iterators through an index map "
              "(returns the new block).", _reindex_cache_write),
    Primitive("annotate_buffer_access", (_BLOCK, Param("buffer", "buffer", help="read:N or write:N"),
                                         Param("region", "index_map",
                                               help="the block's iterators -> start, end per dimension, "
                                                    "e.g. lambda i, j, k: (i, i + 1, j, j + 1)")),
              "Declare the region of a buffer that each iteration of the block reads or writes.",
              _annotate_buffer_access),
    Primitive("set_scope", (_BLOCK, Param("buffer_index", "int", False, 0), Param("scope", "choice", choices=SCOPES)),
              "Set the storage scope of a buffer the block writes.",
              lambda s, a: s.set_scope(resolve_block(s, a["block"]), a["buffer_index"], a["scope"])),
    Primitive("blockize", (Param("target", "loop"),), "Turn the subtree under a loop into one block.",
              lambda s, a: s.blockize(resolve_loop(s, a["target"]))),
    Primitive("tensorize", (Param("target", "target"), Param("intrin", "choice", choices=INTRINSICS,
                                                           accepts=is_schedx_name, takes=INTRINSICS_TEXT)),
              "Replace a loop nest by a hardware intrinsic (x86 AVX-512/VNNI int8 dot 16x4, an fp32 FMA "
              "micro-kernel C[8, lanes] += A[8, 4] @ B[4, lanes], schedx's int8 and bf16 dot products, or an "
              "AMX tile kernel).", _tensorize),
]
PRIMITIVES: dict[str, Primitive] = {p.name: p for p in _PRIMS}


def _check(param: Param, value: object) -> object:
    """Validate one argument value by kind; return it normalised."""
    k = param.kind
    if k in ("block", "str", "index_map"):
        ok = isinstance(value, str) and value != ""
    elif k == "loop":
        ok = isinstance(value, str) and "/" in value
    elif k == "target":
        ok = isinstance(value, str) and value != ""
    elif k == "loops":
        ok = isinstance(value, list) and len(value) >= 1 and all(isinstance(v, str) and "/" in v for v in value)
    elif k == "factors":
        ok = (isinstance(value, list) and len(value) >= 2 and sum(v is None for v in value) <= 1
              and all(v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_INT)
                      for v in value))
    elif k == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and -MAX_INT <= value <= MAX_INT
    elif k == "bool":
        ok = isinstance(value, bool)
    elif k == "choice":
        ok = value in param.choices or (param.accepts is not None and param.accepts(value))
    elif k == "value":
        ok = isinstance(value, (int, float, str, bool))
    elif k == "buffer":
        kind, _, idx = str(value).partition(":")
        ok = isinstance(value, str) and kind in ("read", "write") and idx.isdigit()
    else:
        ok = False
    if not ok and param.takes:
        raise StepsFileError(f"argument {param.name!r} must be {param.takes}, got {value!r}")
    if not ok:
        allowed = f" ({', '.join(map(str, param.choices))})" if param.choices else ""
        raise StepsFileError(f"argument {param.name!r} must be {_KIND_TEXT[k]}{allowed}, got {value!r}")
    return value


# TVM takes loop extents and factors as 32- or 64-bit integers: a larger one (10**30 in a steps
# file) reached TVM as a BigInt ("Mismatched type on argument #2"); no loop has 2**31 iterations
MAX_INT = 2**31 - 1

_KIND_TEXT = {
    "block": "a block name", "str": "a non-empty string", "index_map": "an index map such as 'lambda i, j: (j, i)'",
    "loop": "a loop reference BLOCK/LOOP such as 'C/i_0'", "target": "a block name or a loop BLOCK/LOOP",
    "loops": "a list of loop references", "factors": f"a list of 2+ positive integers up to {MAX_INT} with at most one null",
    "int": f"an integer between -{MAX_INT} and {MAX_INT}", "bool": "true or false", "choice": "one of the allowed values",
    "value": "a number, string or boolean", "buffer": "'read:N' or 'write:N'",
}


def validate_args(primitive: str, args: dict) -> dict:
    """Check ``args`` against the primitive's parameters; fill defaults. Raises StepsFileError."""
    prim = PRIMITIVES.get(primitive)
    if prim is None:
        raise StepsFileError(f"unknown primitive {primitive!r}; known: {', '.join(PRIMITIVES)}")
    names = {p.name for p in prim.params}
    extra = set(args) - names
    if extra:
        raise StepsFileError(f"{primitive} takes no argument {', '.join(sorted(extra))} "
                             f"(its arguments: {', '.join(p.name for p in prim.params)})")
    out = {}
    for p in prim.params:
        if p.name in args:
            out[p.name] = _check(p, args[p.name])
        elif p.required:
            raise StepsFileError(f"{primitive} needs argument {p.name!r}")
        else:
            out[p.name] = p.default
    return out


def apply_primitive(sch: s_tir.Schedule, primitive: str, args: dict) -> object:
    """Apply one primitive to ``sch`` (mutating it); TVM raises on invalid uses."""
    return PRIMITIVES[primitive].apply(sch, args)
