"""``TopKBySelection``: a TopK on the CPU as a kernel that selects the k best of each row by
insertion, rows in parallel, not TVM's extern call that runs every row on one thread.

``DispatchSortScan`` lowers ``relax.topk`` on a CPU to TOPI's extern ``tvm.contrib.sort.topk``
(TVM's ``src/runtime/contrib/sort/sort.cc``): per row a heap of (index, value) pairs in a
``std::vector``, a push and a pop for every element that beats its top, then a stable sort of the
k; all rows on one thread. Here each row keeps its k best so far, sorted, in a buffer on the stack
(integer keys that order as the values do, and indices) and reads its elements in order: an element
is compared with the k-th best only, and the few that beat it enter with one vector update of all k
places (each place keeps its own, takes the new element's, or takes the one before it). Rows (every
axis but the TopK axis, fused) run in parallel where there are enough elements to pay for the
threads. A k-nearest-neighbours layer's top-16 of 512 distances (512 x 512 float32, smallest, each
kernel alone, ``time_evaluator`` medians): one thread 2.3 -> 1.1 ms, two threads 2.2 -> 0.43-1.0 ms
(a 2-core Zen 5 VM whose second core came and went; :data:`MAX_K`: where it stops paying).

What it computes is ONNX's TopK, as ONNX Runtime computes it: the k values sorted best first
(largest first for ``largest``, smallest first otherwise), equal values by the lower index first,
and NaN ordered above every number (+inf included) as ONNX Runtime orders it: a row's NaNs come
first among the largest and last among the smallest, in index order. The TopK axis may be any axis
(an element is read at a stride); float16/32/64 and integer tensors; ``ret_type`` "both", "values"
or "indices" (the kernel writes both, k per row; the call returns what was asked). The kernel is
written scheduled (``tirx.is_scheduled``): the default schedules leave it as it is.

Left to ``DispatchSortScan``: a symbolic shape, k larger than :data:`MAX_K` or than the axis, other
element types (bool, bfloat16). A :func:`explorer.passes.pass_target.cpu_rewrite` pass: a device
build keeps the dispatch to its own sort kernels.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax, tirx
from tvm.script import tirx as T

from explorer.passes.call_rewrite import rewrite_calls, static_ints
from explorer.passes.pass_target import cpu_rewrite
from explorer.schedule.defaults.analysis import PARALLEL_MIN_VOLUME

_TOPK = tvm.ir.Op.get("relax.topk")

# Where the selection stops paying: an element that enters the k best updates all k places (k / 16
# AVX-512 vectors of keys and as many of indices), where the extern's heap sifts twice through log k
# levels. Both timed alone on one thread (the extern has one), 512 x 512 float32 normal values,
# smallest, on a 2-core Zen 5 VM (ratios: its times varied from run to run), rows in random order / in
# the worst order (descending: every element enters): k = 8 0.48x / 0.40x, k = 16 0.45x / 0.48x
# (0.84 against 1.87 ms), k = 32 0.61x / 0.79x, k = 64 1.04x / 1.43x. Two threads divide the
# selection's time by up to two; the extern keeps one.
MAX_K = 32

_FLOATS = ("float16", "float32", "float64")
_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
# float keys: the bits as a signed integer of the same width
_KEYS = {"float16": "int16", "float32": "int32", "float64": "int64"}


def _key(v, dtype: str):
    """An integer that orders as ``v`` does, ONNX Runtime's way: a float's bits read as a signed
    integer, a negative one's magnitude bits flipped (so -inf is the lowest), -0.0 as +0.0, every NaN
    (of either sign) above +inf. An integer is its own key."""
    key_dtype = _KEYS.get(dtype)
    if key_dtype is None:
        return v
    bits = tirx.reinterpret(key_dtype, v)
    top = tvm.tirx.max_value(key_dtype)
    ordered = tirx.Select(bits < 0, tirx.bitwise_xor(bits, top), bits)
    ordered = tirx.Select(v == tirx.const(0, dtype), tirx.const(0, key_dtype), ordered)
    return tirx.Select(tirx.isnan(v), top, ordered)


def topk_select_kernel(shape: list[int], axis: int, k: int, dtype: str, *, largest: bool = True,
                       index_dtype: str = "int64") -> tirx.PrimFunc:
    """A scheduled PrimFunc ``(x, values, indices)``: the ``k`` best elements of ``x`` (static
    ``shape``, ``dtype``) along ``axis`` and their indices (``index_dtype``), best first (see the
    module docstring).

    A row's k best are kept as keys (:func:`_key`) in places 1..k of a buffer whose place 0 holds a
    key nothing beats, with their indices beside them. An element enters where its key beats the
    k-th: every place at once (vectors), a place whose key it beats takes its key or, where it beats
    the place before too, that place's; the others keep theirs. Keys compare strictly: an equal key,
    read later, goes after (the lower index first). The values written are read back from ``x`` at the
    indices (a NaN as it came)."""
    if dtype not in _FLOATS + _INTEGERS:
        raise ValueError(f"topk selection takes float16/32/64 and integer tensors, not {dtype}")
    n = shape[axis]
    if not 1 <= k <= n:
        raise ValueError(f"topk selection needs 1 <= k <= {n} (the axis' length), not k = {k}")
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    rows = outer * inner
    out_shape = [*shape[:axis], k, *shape[axis + 1:]]
    key_dtype = _KEYS.get(dtype, dtype)
    better = (lambda a, b: a > b) if largest else (lambda a, b: a < b)
    front = tvm.tirx.max_value(key_dtype) if largest else tvm.tirx.min_value(key_dtype)
    # rows in parallel where there is work enough to pay the threads' wake-up (the default rules' bound,
    # elements read): a mixture of experts' top-2 of 8 experts for a few tokens runs on one thread
    row_loop = T.parallel if rows > 1 and rows * n >= PARALLEL_MIN_VOLUME else T.serial

    def beaten(v, key, place, j, first: bool):
        """Whether key ``v`` (element ``j``) goes before ``key`` (0-based ``place``); while the first k
        enter, the places from ``j`` on are empty: taken by anything."""
        return tirx.Or(better(v, key), place >= j) if first else better(v, key)

    @T.macro
    def insert(keys, idxs, new_keys, new_idxs, v, j, first):
        for t in T.vectorized(k):
            new_keys[t] = T.Select(beaten(v, keys[t + 1], t, j, first),
                                   T.Select(beaten(v, keys[t], t - 1, j, first), keys[t], v), keys[t + 1])
            new_idxs[t] = T.Select(beaten(v, keys[t + 1], t, j, first),
                                   T.Select(beaten(v, keys[t], t - 1, j, first), idxs[t], j), idxs[t + 1])
        for t in T.vectorized(k):
            keys[t + 1] = new_keys[t]
            idxs[t + 1] = new_idxs[t]

    @T.macro
    def select_row(x_flat, keys, idxs, new_keys, new_idxs, at):
        keys[0] = front
        idxs[0] = 0
        for t in range(k):  # every place holds a key from the start: nothing reads memory unset
            keys[t + 1] = _key(x_flat[at(0)], dtype)
            idxs[t + 1] = 0
        for j in range(k):  # the first k: each enters
            insert(keys, idxs, new_keys, new_idxs, _key(x_flat[at(j)], dtype), j, True)
        for j in range(k, n):  # the rest: only what beats the k-th
            if better(_key(x_flat[at(j)], dtype), keys[k]):
                insert(keys, idxs, new_keys, new_idxs, _key(x_flat[at(j)], dtype), j, False)

    def source(r):  # where element j of row r is: rows are (outer, inner) pairs, the axis strided by inner
        return lambda j: (r // inner) * (n * inner) + j * inner + r % inner

    def dest(r, t):
        return (r // inner) * (k * inner) + t * inner + r % inner

    @T.prim_func(private=True, s_tir=True)
    def topk_select(x: T.Buffer(shape, dtype), values: T.Buffer(out_shape, dtype),
                    indices: T.Buffer(out_shape, index_dtype)):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        x_flat = T.decl_buffer((rows * n,), dtype, data=x.data)
        v_flat = T.decl_buffer((rows * k,), dtype, data=values.data)
        i_flat = T.decl_buffer((rows * k,), index_dtype, data=indices.data)
        for r in row_loop(rows):
            with T.sblock("topk_row"):
                T.reads()
                T.writes()
                keys = T.alloc_buffer((k + 1,), key_dtype, scope="local")
                idxs = T.alloc_buffer((k + 1,), "int32", scope="local")
                new_keys = T.alloc_buffer((k,), key_dtype, scope="local")
                new_idxs = T.alloc_buffer((k,), "int32", scope="local")
                select_row(x_flat, keys, idxs, new_keys, new_idxs, source(r))
                for t in range(k):
                    v_flat[dest(r, t)] = x_flat[source(r)(idxs[t + 1])]
                    i_flat[dest(r, t)] = T.Cast(index_dtype, idxs[t + 1])

    return topk_select


def selection_pays(k: int, n: int) -> bool:
    """Whether a TopK of ``k`` along an axis of ``n`` runs as a selection (:data:`MAX_K`)."""
    return 1 <= k <= min(n, MAX_K)


def _as_selection(call: relax.Call, builder: relax.BlockBuilder):
    if not call.op.same_as(_TOPK):
        return None
    ty = call.args[0].ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    shape = static_ints(ty.shape.values)
    dtype = str(ty.dtype)
    if shape is None or not shape or dtype not in _FLOATS + _INTEGERS:
        return None
    attrs = call.attrs
    axis = int(attrs.axis) % len(shape)
    k = int(attrs.k)
    if not selection_pays(k, shape[axis]) or math.prod(shape) >= 2 ** 31:  # (flat int32 offsets in the kernel)
        return None
    index_dtype = str(attrs.dtype)
    func = topk_select_kernel(shape, axis, k, dtype, largest=bool(attrs.largest), index_dtype=index_dtype)
    gv = builder.add_func(func, "topk_select")
    out_shape = [*shape[:axis], k, *shape[axis + 1:]]
    both = relax.call_tir(gv, [call.args[0]],
                          [relax.TensorType(out_shape, dtype), relax.TensorType(out_shape, index_dtype)])
    ret_type = str(attrs.ret_type)
    if ret_type == "both":
        return both
    # the kernel writes both (k per row: a few bytes); the one not asked for is dropped
    return relax.TupleGetItem(builder.emit(both), 0 if ret_type == "values" else 1)


@tvm.transform.module_pass(opt_level=0, name="TopKBySelection")
@cpu_rewrite
def TopKBySelection(mod: tvm.IRModule, target) -> tvm.IRModule:  # noqa: N802 - named as TVM names passes
    """Each static TopK with a small k as a parallel selection kernel (see the module docstring)."""
    return rewrite_calls(mod, _as_selection)


__all__ = ["MAX_K", "TopKBySelection", "selection_pays", "topk_select_kernel"]
