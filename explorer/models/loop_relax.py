"""A ``Loop`` whose exit depends on its data, imported as a recursive Relax function.

:mod:`explorer.models.loop_unroll` unrolls a loop whose trip count the fixed shapes decide; a
``while`` loop (scripted PyTorch's iterate-until-converged: the condition recomputed from the data
in each turn) has no such count, and TVM 0.27's importer has no ``Loop``. Such a loop is kept when
it has no scan outputs (they grow by one slice per turn, so their shape is known only at run
time) and its loop-carried values have static shapes. The tracing importer
(:mod:`explorer.graph.onnx_names`) then converts the node with :func:`convert_loop` into two Relax
functions and a call:

- ``<name>_body(iter, cond, carried..., outer...)``: the body graph imported like an ``If``
  branch, in a dataflow block (so FuseOps fuses its operators into kernels of their own),
  returning the new condition and the new carried values;
- ``<name>_loop(iter, cond, carried..., [M,] outer...)``: ``if cond and iter < M`` it calls the
  body, then itself with ``iter + 1``; else it returns the carried values. The Relax VM runs the
  recursion; ``outer`` are the values of the graph around the loop that the body reads.

The node's outputs are the carried values the loop function returns. A small ``If`` in the body
(scripted PyTorch's ``while a and b``) is computed both ways and selected
(:mod:`explorer.models.loop_branches`), so the body stays one dataflow block. When a CPU build's
body is then nothing but kernels, :mod:`explorer.models.loop_tir` runs the whole loop as one
PrimFunc with a TIR ``while`` instead of the recursion (same turn limit, same error).
"""

from __future__ import annotations

import onnx
import tvm
from tvm import relax

from explorer.errors import UnsupportedOperatorError
from explorer.models.loop_branches import select_small_branches

# The Relax VM calls a function on the native stack: a recursion of 3450 turns overflowed the 8 MiB
# default stack (a segfault), 1730 ran. A loop running past this many turns stops with an error instead.
MAX_KEPT_TURNS = 1000
# On the loop function, for :mod:`explorer.models.loop_tir` (which runs a loop of straight-line kernels
# as one PrimFunc with a TIR while, keeping the same limit and error): its body function's name,
# whether it takes a trip count (1 or 0), and the error past the turn limit.
LOOP_BODY_ATTR = "schedx.loop_body"
LOOP_COUNTED_ATTR = "schedx.loop_counted"
LOOP_MESSAGE_ATTR = "schedx.loop_turn_limit"
_SCALAR_BOOL = relax.TensorType((), "bool")
_SCALAR_INT = relax.TensorType((), "int64")


def scan_outputs(node: onnx.NodeProto) -> int:
    """How many scan outputs (per-turn values stacked by the loop) ``node`` (a Loop) has."""
    body = next(a.g for a in node.attribute if a.name == "body")
    return len(body.output) - (len(body.input) - 1)


def why_not_kept(node: onnx.NodeProto) -> str | None:
    """Why ``node`` (a Loop the shapes do not unroll) cannot be kept as Relax control flow, or None."""
    scans = scan_outputs(node)
    if scans:
        return (f"it has {scans} scan output(s) (a value per turn, stacked), whose shape depends on the number of "
                "turns, known only at run time; schedx keeps a data-dependent loop as Relax control flow only when "
                "it carries values of fixed shape and has no scan outputs")
    return None


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """Names ``graph`` (and its subgraphs) read that it does not define itself."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer} | \
        {o for n in graph.node for o in n.output if o}
    read = set()
    for node in graph.node:
        read.update(i for i in node.input if i)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else []) + list(attr.graphs):
                read |= _read_names(sub)
    read.update(o.name for o in graph.output)
    return read - defined


def _scalar(bb: relax.BlockBuilder, expr: relax.Expr, dtype: str) -> relax.Expr:
    """``expr`` as a 0-d tensor of ``dtype`` (ONNX allows a one-element condition or count)."""
    ty = expr.ty
    if list(ty.shape or []) != []:
        expr = bb.emit(relax.op.reshape(expr, ()))
    if ty.dtype != dtype:
        expr = bb.emit(relax.op.astype(expr, dtype))
    return expr


def _static(expr: relax.Expr) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and ty.shape is not None and \
        all(isinstance(d, int) or hasattr(d, "value") for d in ty.shape)


def _body_function(importer, body: onnx.GraphProto, params: list[relax.Var], outer: dict[str, relax.Var],
                   name: str) -> relax.Function:
    """The loop body as a Relax function of ``params`` (iter, cond, carried..., outer...)."""
    saved_bb, saved_nodes = importer.bb, importer._nodes
    bb = relax.BlockBuilder()
    importer.bb = bb
    importer._nodes = {**saved_nodes, **outer, **{i.name: p for i, p in zip(body.input, params)}}
    has_if = any(n.op_type == "If" for n in body.node)  # an If binding may not sit in a dataflow block
    try:
        with bb.function(name, params=params):
            if has_if:
                result = importer._convert_subgraph(bb, body)
                outs = [bb.emit(x) if not isinstance(x, relax.Var) else x for x in _fields(result, len(body.output))]
            else:
                with bb.dataflow():
                    result = importer._convert_subgraph(bb, body)
                    outs = [bb.emit_output(x) for x in _fields(result, len(body.output))]
            outs[0] = _scalar(bb, outs[0], "bool")
            bb.emit_func_output(relax.Tuple(outs))
    finally:
        importer.bb, importer._nodes = saved_bb, saved_nodes
    return select_small_branches(bb.get()[name]) if has_if else bb.get()[name]


def _fields(result: relax.Expr, count: int) -> list[relax.Expr]:
    if count == 1:
        return [result]
    return list(result.fields) if isinstance(result, relax.Tuple) else [relax.TupleGetItem(result, k) for k in range(count)]


def convert_loop(importer, inputs: list, attrs: dict) -> relax.Expr:
    """The Relax expression for an ONNX ``Loop`` (see the module): a call of the loop function."""
    body: onnx.GraphProto = attrs["body"]
    node_name = str(attrs.get("tvm_custom", {}).get("name", "") or "Loop")
    trip, cond, *init = list(inputs) + [None] * max(0, 2 - len(inputs))
    if len(body.output) != 1 + len(init):
        raise UnsupportedOperatorError("Loop", node_name, why_not_kept(
            onnx.helper.make_node("Loop", [], [], body=body)) or "its body's outputs do not match its inputs")
    for k, value in enumerate(init):
        if value is None or not _static(value):
            raise UnsupportedOperatorError("Loop", node_name, f"its loop-carried value {body.input[2 + k].name!r} has "
                                           "no static shape; schedx keeps a data-dependent loop only when every "
                                           "carried value has a fixed shape")
    bb: relax.BlockBuilder = importer.bb
    base = "".join(c if c.isalnum() else "_" for c in node_name).strip("_") or "loop"
    outer_names = sorted(n for n in _read_names(body) if n in importer._nodes
                         and not isinstance(importer._nodes[n], tvm.ir.Constant))
    outer_args = [importer._nodes[n] for n in outer_names]
    outer_params = {n: relax.Var(f"outer{k}", a.ty) for k, (n, a) in enumerate(zip(outer_names, outer_args))}

    body_params = [relax.Var("iter", _SCALAR_INT), relax.Var("cond", _SCALAR_BOOL)]
    body_params += [relax.Var(f"carried{k}", v.ty) for k, v in enumerate(init)]
    body_params += list(outer_params.values())
    body_gv = bb.add_func(_body_function(importer, body, body_params, outer_params, f"{base}_body"), f"{base}_body")

    carried = [relax.Var(f"carried{k}", v.ty) for k, v in enumerate(init)]
    iter_var, cond_var = relax.Var("iter", _SCALAR_INT), relax.Var("cond", _SCALAR_BOOL)
    count_var = [relax.Var("trip_count", _SCALAR_INT)] if trip is not None else []
    outer_vars = [relax.Var(f"outer{k}", a.ty) for k, a in enumerate(outer_args)]
    params = [iter_var, cond_var, *carried, *count_var, *outer_vars]
    ret_ty = relax.TupleType([v.ty for v in carried])
    loop_gv = bb.add_func(relax.Function(params, relax.Tuple(carried), ret_ty), f"{base}_loop")  # typed stub

    message = (f"Loop {node_name!r} ran past {MAX_KEPT_TURNS} turns: schedx stops a data-dependent loop there "
               "(run as a recursive Relax function, each turn is a native stack frame of the VM, and a longer "
               "loop would overflow the stack)")
    inner = relax.BlockBuilder()
    with inner.function(loop_gv.name_hint, params=params):
        go = cond_var
        if count_var:
            go = inner.emit(relax.op.logical_and(cond_var, relax.op.less(iter_var, count_var[0])))
        inner._begin_binding_block()
        within = inner.emit(relax.op.less(iter_var, relax.const(MAX_KEPT_TURNS, "int64")))
        inner.emit(relax.op.assert_op(within, format=message))
        step = inner.emit(relax.Call(body_gv, [iter_var, cond_var, *carried, *outer_vars]))
        nxt = inner.emit(relax.op.add(iter_var, relax.const(1, "int64")))
        news = [inner.emit(relax.TupleGetItem(step, k)) for k in range(1 + len(carried))]
        again = inner.emit(relax.Call(loop_gv, [nxt, *news, *count_var, *outer_vars]))
        then_seq = relax.SeqExpr([inner._end_block()], again)
        out = inner.emit(relax.If(go, then_seq, relax.SeqExpr([], relax.Tuple(carried))))
        inner.emit_func_output(out)
    # the turn limit's assert is the function's only effect: it stays callable from a dataflow block
    loop_func = inner.get()[loop_gv.name_hint].with_attrs({
        "relax.force_pure": True, LOOP_BODY_ATTR: body_gv.name_hint, LOOP_COUNTED_ATTR: int(bool(count_var)),
        LOOP_MESSAGE_ATTR: message})
    bb.update_func(loop_gv, loop_func)

    start = [bb.emit(relax.const(0, "int64")),
             _scalar(bb, cond, "bool") if cond is not None else bb.emit(relax.const(True, "bool"))]
    counts = [_scalar(bb, trip, "int64")] if trip is not None else []
    result = bb.emit(relax.Call(loop_gv, [*start, *init, *counts, *outer_args]))
    return relax.Tuple([bb.emit(relax.TupleGetItem(result, k)) for k in range(len(init))]) if len(init) > 1 \
        else bb.emit(relax.TupleGetItem(result, 0))


__all__ = ["LOOP_BODY_ATTR", "LOOP_COUNTED_ATTR", "LOOP_MESSAGE_ATTR", "MAX_KEPT_TURNS", "convert_loop", "scan_outputs",
           "why_not_kept"]
