"""Facts about a block that the default rules decide on: its iterators (spatial or reduction),
which iterator indexes each dimension of what it writes and reads, whether its loops are still
one per iterator, and whether its body is costly (a call such as ``exp``) or a padding.

Read from TensorIR with :class:`tvm.s_tir.Schedule` queries; nothing here changes a schedule."""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from tvm import s_tir, sym, tirx
from tvm.ir.expr import Call as _Call
from tvm.ir.expr import TensorLoad
from tvm.tirx.analysis import undefined_vars

# Below this many iterations a parallel loop costs more (thread wake-up) than it saves (every rule).
PARALLEL_MIN_VOLUME = 1 << 15
# ... and below this many multiply-adds for a register-tiled reduction, whose iterations are a lane
# of a vector FMA each: an unrolled LSTM's 96x384 matrix-vector step (37k) took 1.3 us serial and
# 1.6 us in parallel timed alone, and a parallel region waits for a descheduled worker on a busy machine.
PARALLEL_MIN_MACS = 1 << 17


class NotApplicable(Exception):
    """The block has no shape this rule knows (the caller tries a simpler rule)."""


# Calls that cost no more than an add (conditionals the padding and masking blocks use).
_CHEAP_CALLS = {"prim.if_then_else", "prim.likely", "tirx.if_then_else", "tirx.likely"}


@dataclass(frozen=True)
class Access:
    """One buffer a block reads: its name and, per dimension, the iterators (positions in the
    block's iterator list) its index uses."""

    buffer: str
    dims: tuple[frozenset[int], ...]
    # iterators the innermost index uses outside any ``// c``: those that step along the row (a
    # grouped conv's ``ff // 68 * 68 + rc`` steps with ``rc`` only)
    stepped: frozenset[int]
    # (iterator, divisor) of every ``iter // c`` or ``iter % c`` in the innermost index: a grouped
    # conv reads input channel ``ff // 68 * 68 + rc``, contiguous only within a group
    groups: tuple[tuple[int, int], ...] = ()
    # iterators divided (``//``, ``%``) in an outer index: an NCHW channel shuffle reads plane
    # ``c % 2 * 116 + c // 2``, contiguous only within one plane
    divided: frozenset[int] = frozenset()

    def uses(self, k: int) -> bool:
        return any(k in d for d in self.dims)

    def broadcast_along(self, k: int) -> bool:
        """Whether the read is one element for consecutive values of ``k`` (a tile of them that
        stays within a group): ``k`` indexes no outer dimension and the innermost only divided
        (a grouped conv's input, read along its output channels)."""
        return not any(k in d for d in self.dims[:-1]) and k not in self.stepped

    @property
    def last(self) -> frozenset[int]:
        return self.dims[-1] if self.dims else frozenset()


@dataclass(frozen=True)
class BlockFacts:
    """``extents[k]`` and ``reduction[k]`` per iterator; ``out_dims`` gives, per dimension of the
    written buffer, the iterator that indexes it alone (None: a constant or an expression);
    ``loops_match``: the block sits under exactly one loop per iterator, in order (TE's nests)."""

    name: str
    extents: tuple[int, ...]
    reduction: tuple[bool, ...]
    out_dims: tuple[int | None, ...]
    reads: tuple[Access, ...]
    dtype: str
    loops_match: bool
    costly: bool
    padding: bool
    # buffers read through a border test (a padding inlined into a convolution): where the tile
    # broadcasts such a read, the padded value and the test take registers of its own (see
    # tile_choice.choose_tiles)
    bordered: frozenset[str] = frozenset()

    @property
    def spatial(self) -> list[int]:
        return [k for k, r in enumerate(self.reduction) if not r]

    @property
    def reduce(self) -> list[int]:
        return [k for k, r in enumerate(self.reduction) if r]

    @property
    def is_spatial(self) -> bool:
        return not any(self.reduction)

    @property
    def volume(self) -> int:
        return math.prod(self.extents)


def _int(x) -> int | None:
    return int(x.value) if isinstance(x, tirx.IntImm) else None


@functools.cache
def _is_expr_type(kind: type) -> bool:
    """Whether values of type ``kind`` are TIR expressions (asked once a type: ``isinstance`` with TVM's
    expression classes goes through ``abc`` every time)."""
    return issubclass(kind, tirx.Expr)


def sub_exprs(expr) -> Iterator[object]:
    """Every node of a TIR expression, ``expr`` first, each once (TVM 0.27 has no Python TIR visitor). An
    expression is a graph, not a tree: its nodes can be shared (``fast_exp`` reads its clamped input eight
    times, SiLU and GELU theirs twice), and walked as a tree a convolution with a few activations inlined
    into it was a million nodes (seconds a block)."""
    stack, seen = [expr], set()
    while stack:
        node = stack.pop()
        handle = node.__chandle__()
        if handle in seen:
            continue
        seen.add(handle)
        yield node
        for attr in ("a", "b", "value", "condition", "true_value", "false_value", "body"):
            child = getattr(node, attr, None)
            if _is_expr_type(type(child)):
                stack.append(child)
        for attr in ("args", "indices"):
            for child in getattr(node, attr, None) or ():
                if _is_expr_type(type(child)):
                    stack.append(child)


def _calls(expr) -> set[str]:
    return {str(n.op.name) for n in sub_exprs(expr) if isinstance(n, _Call) and hasattr(n.op, "name")}


def _is_padding(value) -> bool:
    """A value chosen between an input element and a constant: what pad (and masking) blocks compute."""
    if not isinstance(value, _Call) or str(getattr(value.op, "name", "")) not in _CHEAP_CALLS:
        return False
    return any(isinstance(a, (tirx.FloatImm, tirx.IntImm)) for a in value.args[1:])


def _iter_positions(expr, positions: dict[str, int]) -> frozenset[int]:
    return frozenset(positions[v.name] for v in undefined_vars(expr) if v.name in positions)


def _divisions(expr, positions: dict[str, int]) -> tuple[tuple[int, int], ...]:
    found = []
    for node in sub_exprs(expr):
        if isinstance(node, (tirx.FloorDiv, tirx.FloorMod)) and isinstance(node.b, tirx.IntImm):
            found += [(k, int(node.b.value)) for k in _iter_positions(node.a, positions)]
    return tuple(sorted(set(found)))


def _stepping(expr, positions: dict[str, int]) -> frozenset[int]:
    """The iterators ``expr`` uses outside every floor division by a constant."""
    found, stack, seen = set(), [expr], set()
    while stack:
        node = stack.pop()
        handle = node.__chandle__()
        if handle in seen or isinstance(node, tirx.FloorDiv) and isinstance(node.b, tirx.IntImm):
            continue
        seen.add(handle)
        if isinstance(node, tirx.Var) and node.name in positions:
            found.add(positions[node.name])
        for attr in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(node, attr, None)
            if isinstance(child, tirx.Expr):
                stack.append(child)
        stack.extend(c for c in getattr(node, "args", None) or () if isinstance(c, tirx.Expr))
    return frozenset(found)


def _access(read, positions: dict[str, int], analyzer) -> Access:
    """What ``read`` (a buffer region) indexes with which iterators. Trailing dimensions of extent 1
    are left out: they change no stride, so the dimension before them is the contiguous one (a
    ``[7, 16, 1]`` weight of a one-channel convolution is contiguous along its 16 channels)."""
    region = list(read.region)
    shape = list(getattr(read.source, "shape", ()))
    while len(region) > 1 and len(shape) == len(region) and _int(shape[-1]) == 1:
        region.pop()
        shape.pop()
    last = analyzer.simplify(region[-1].min) if region else None
    return Access(str(getattr(read.source, "name", read.source)),
                  dims=tuple(_iter_positions(rg.min, positions) for rg in region),
                  stepped=_stepping(last, positions) if region else frozenset(),
                  groups=_divisions(last, positions) if region else (),
                  divided=frozenset(k for rg in region[:-1]
                                    for k, _ in _divisions(analyzer.simplify(rg.min), positions)))


# value -> (the value, its facts): a rule asks for the facts of the same blocks after each step, and a step leaves
# the blocks it does not touch as they were (the same nodes); the value is held, so its handle is not reused
_VALUE_FACTS: OrderedDict[int, tuple[object, tuple[bool, bool, frozenset[str]]]] = OrderedDict()
_VALUE_FACTS_KEPT = 256
_VALUE_FACTS_LOCK = threading.Lock()


def _value_facts(value) -> tuple[bool, bool, frozenset[str]]:
    """``(costly, padding, bordered)`` of a block's stored value (see :class:`BlockFacts`), remembered for the
    last :data:`_VALUE_FACTS_KEPT` values: a convolution with fused activations stores a value of thousands of
    nodes (the activations' inputs inlined into each of their uses)."""
    handle = value.__chandle__()
    with _VALUE_FACTS_LOCK:  # (the UI's sessions schedule in threads of one process)
        if handle in _VALUE_FACTS:
            _VALUE_FACTS.move_to_end(handle)
            return _VALUE_FACTS[handle][1]
    costly = bool(_calls(value) - _CHEAP_CALLS)
    padding = _is_padding(value)
    bordered = frozenset() if padding else frozenset(
        str(getattr(load.source, "name", "")) for n in sub_exprs(value)
        if _is_padding(n) for load in sub_exprs(n) if isinstance(load, TensorLoad))
    with _VALUE_FACTS_LOCK:
        _VALUE_FACTS[handle] = (value, (costly, padding, bordered))
        if len(_VALUE_FACTS) > _VALUE_FACTS_KEPT:
            _VALUE_FACTS.popitem(last=False)
    return costly, padding, bordered


def block_facts(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> BlockFacts:
    """The facts of ``block`` in ``sch`` (see :class:`BlockFacts`)."""
    blk = sch.get(block)
    iters = list(blk.iter_vars)
    positions = {iv.var.name: k for k, iv in enumerate(iters)}
    extents = tuple(_int(iv.dom.extent) or 0 for iv in iters)
    reduction = tuple(int(iv.iter_type) != 0 for iv in iters)
    body = blk.body
    out_dims: tuple[int | None, ...] = ()
    dtype = "float32"
    costly = padding = False
    bordered: frozenset[str] = frozenset()
    if isinstance(body, tirx.BufferStore):
        dims = []
        for index in body.indices:
            if isinstance(index, tirx.Var) and index.name in positions:
                dims.append(positions[index.name])
            else:
                dims.append(None)
        out_dims = tuple(dims)
        dtype = str(body.buffer.dtype)
        costly, padding, bordered = _value_facts(body.value)
    # the innermost index simplified within the iterators' domains: inlined reshapes leave terms
    # such as ``(t // 100 + d) % 64 // 64`` that are 0 and would read as divisions of ``t``
    analyzer = sym.Analyzer()
    for iv in iters:
        analyzer.bind(iv.var, iv.dom)
    reads = tuple(_access(r, positions, analyzer) for r in blk.reads)
    return BlockFacts(name=blk.name_hint, extents=extents, reduction=reduction, out_dims=out_dims, reads=reads,
                      dtype=dtype, loops_match=_loops_match(sch, block, iters), costly=costly, padding=padding,
                      bordered=bordered)


def _loops_match(sch: s_tir.Schedule, block, iters) -> bool:
    """Whether the loops above ``block`` are exactly one per iterator, each bound to it alone."""
    loops = sch.get_loops(block)
    if len(loops) != len(iters):
        return False
    realize = sch.get_sref(block).stmt
    # the realize's bindings: walk the loop nest to the block
    loop_vars = []
    for lp in loops:
        stmt = sch.get(lp)
        if _int(stmt.min) != 0:
            return False
        loop_vars.append(stmt.loop_var)
    bindings = _bindings(sch, block)
    if bindings is None or len(bindings) != len(iters):
        return False
    for value, var, iv in zip(bindings, loop_vars, iters):
        if not (isinstance(value, tirx.Var) and value.same_as(var)):
            return False
        if _int(sch.get(loops[iters.index(iv)]).extent) != _int(iv.dom.extent):
            return False
    return realize is not None


def _bindings(sch: s_tir.Schedule, block) -> list | None:
    """The iterator bindings of ``block``'s realize (found under its innermost loop)."""
    loops = sch.get_loops(block)
    if not loops:
        return None
    name = sch.get(block).name_hint
    stack = [sch.get(loops[-1]).body]
    while stack:
        node = stack.pop()
        if isinstance(node, s_tir.SBlockRealize):
            if node.block.name_hint == name:
                return list(node.iter_values)
            continue
        if isinstance(node, tirx.SeqStmt):
            stack.extend(node.seq)
        elif isinstance(node, tirx.For):
            stack.append(node.body)
        elif isinstance(node, tirx.IfThenElse):
            stack.extend(s for s in (node.then_case, node.else_case) if s is not None)
    return None


def _shifted_iter(index, positions: dict[str, int]) -> int | None:
    """The iterator ``index`` is, alone or plus a constant (a concatenation's or a slice's offset)."""
    if isinstance(index, tirx.Add) and isinstance(index.b, tirx.IntImm):
        index = index.a
    return positions.get(index.name) if isinstance(index, tirx.Var) else None


def partial_rows(sch: s_tir.Schedule, block, facts: BlockFacts) -> tuple[int | None, int]:
    """(the iterator the written buffer's innermost index is, alone or shifted; the innermost
    iterator that runs over only part of a dimension of a buffer the block writes or reads, -1 if
    none). A concatenation's copy writes ``out[h, w, 64 + c]`` for ``c < 32``: fused with ``w``,
    its vectors would straddle two rows of ``out``."""
    blk = sch.get(block)
    positions = {iv.var.name: k for k, iv in enumerate(blk.iter_vars)}
    partial = -1
    store = blk.body if isinstance(blk.body, tirx.BufferStore) else None
    accesses = [(store.buffer.shape, store.indices)] if store is not None else []
    accesses += [(r.source.shape, [rg.min for rg in r.region]) for r in blk.reads]
    for shape, indices in accesses:
        for dim, index in zip(shape, indices):
            k = _shifted_iter(index, positions)
            if k is not None and isinstance(dim, tirx.IntImm) and int(dim) != facts.extents[k]:
                partial = max(partial, k)
    written = _shifted_iter(store.indices[-1], positions) if store is not None and len(store.indices) else None
    return written, partial


def root_blocks(sch: s_tir.Schedule) -> list:
    """The blocks in the root block's scope (loops are not scopes), in program order."""
    body = sch.mod["main"].body
    root = body.block.name_hint if isinstance(body, s_tir.SBlockRealize) else "root"
    return list(sch.get_child_blocks(sch.get_sblock(root)))


def covers_its_producers(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block`` iterates over at least as many points as each producer writes: only then may it
    be folded into one (``reverse_compute_inline``). TVM folds a slice too (a conv computing 80
    channels, the model wanting 75) and the folded block then writes all 80 past the output's end."""
    volume = math.prod(_int(iv.dom.extent) or 0 for iv in sch.get(block).iter_vars)
    for producer in sch.get_producers(block):
        for region in sch.get(producer).writes:
            if math.prod(_int(x) or 0 for x in region.source.shape) > volume:
                return False
    return True


__all__ = ["PARALLEL_MIN_MACS", "PARALLEL_MIN_VOLUME", "Access", "BlockFacts", "NotApplicable", "block_facts", "covers_its_producers",
           "partial_rows", "root_blocks", "sub_exprs"]
