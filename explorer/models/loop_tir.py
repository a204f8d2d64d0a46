"""A kept loop whose body is straight-line kernels run as one PrimFunc with a TIR ``while``.

:mod:`explorer.models.loop_relax` keeps a data-dependent ``Loop`` as a recursive Relax function:
each turn is a VM call of the loop function and of the body, their argument checks and
allocations, and one VM call per kernel of the body and of the exit test. On a small body those
cost more than the kernels themselves (ts_while_converge, a 2x16 body: about 8 us a turn against
ONNX Runtime's 1.5, on a loaded 2-core machine).

After scheduling, this pass replaces such a loop, where it can, by a single kernel: when the body
function is nothing but calls of (scheduled) PrimFuncs, TVM's ``FuseTIR`` joins them into one
PrimFunc (the body's turn, its buffers substituted), and that turn becomes the inside of
a TIR ``while`` in a new PrimFunc, ``<loop>_while``:

    state_k = init_k; iter = iter0; cond = cond0
    while cond and iter < trip_count:          # "iter < trip_count" only for a counted loop
        assert iter < MAX_KEPT_TURNS            # the recursive form's limit and error, kept
        <turn: reads iter, cond, state_k, outer values; writes cond', new_k>
        state_k = new_k; cond = cond'; iter = iter + 1

The state buffers are the new PrimFunc's outputs, so the caller's ``Loop_loop(...)`` becomes one
``call_tir``; the loop and body functions, now unused, are dropped. The body's kernels keep the
schedules they were given (tuned records or defaults), since the pass runs after scheduling.

A loop whose body is anything else keeps its recursive form: an ``If`` left in it (small ones are
selected instead, :mod:`explorer.models.loop_branches`), a call of a Relax function or of a
packed function, a value returned as it came in, one value returned twice, a body FuseTIR
cannot join, or a loop PrimFunc that does not build for the target. CPU targets run this pass first among their lowering passes
(:meth:`explorer.target.model.CpuTarget.lowering_passes`); ``tvm.compile`` of the imported module
alone keeps the recursive form.
"""

from __future__ import annotations

import tvm
from tvm import relax, s_tir, tirx

from explorer.models.loop_relax import LOOP_BODY_ATTR, LOOP_COUNTED_ATTR, LOOP_MESSAGE_ATTR, MAX_KEPT_TURNS

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def _bindings(func: relax.Function) -> list | None:
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return None
    bindings = [b for block in body.blocks for b in block.bindings]
    ok = all(isinstance(b, relax.VarBinding) and isinstance(b.value, relax.Call) and b.value.op.same_as(_CALL_TIR)
             for b in bindings)
    return bindings if ok else None


def _turn(mod: tvm.IRModule, body: relax.Function) -> tuple[tirx.PrimFunc, list] | None:
    """The body as one PrimFunc (FuseTIR), with the Relax value each of its inputs comes from
    (a body parameter or a constant); its outputs are the body's tuple, in order. None when the
    body is not straight-line kernels, or returns a value it does not compute (or one twice)."""
    bindings = _bindings(body)
    outputs = body.body.body
    if bindings is None or not isinstance(outputs, relax.Tuple) or len(set(outputs.fields)) != len(outputs.fields):
        return None
    computed = {b.var for b in bindings}
    if not all(isinstance(o, relax.Var) and o in computed for o in outputs.fields):
        return None
    constants, lifted = [], []
    for b in bindings:  # FuseTIR takes no tensor constants: each becomes a parameter
        fields = []
        for arg in b.value.args[1].fields:
            if isinstance(arg, tvm.ir.Constant):
                var = relax.Var(f"const{len(constants)}", arg.ty)
                constants.append((var, arg))
                arg = var
            fields.append(arg)
        call = b.value
        lifted.append(relax.VarBinding(b.var, relax.Call(call.op, [call.args[0], relax.Tuple(fields)], call.attrs,
                                                         call.ty_args)))
    params = list(body.params) + [v for v, _ in constants]
    kernels = {b.value.args[0] for b in bindings}
    bb = relax.BlockBuilder(tvm.IRModule({gv: mod[gv] for gv in kernels}))
    turn = relax.Function(params, relax.SeqExpr([relax.DataflowBlock(lifted)], outputs), body.ret_ty)
    turn_gv = bb.add_func(turn.with_attr("Primitive", True), "turn")
    args = [relax.Var(p.name, p.ty) for p in params]
    with bb.function("caller", params=args):
        with bb.dataflow():
            result = bb.emit_output(relax.Call(turn_gv, args))
        bb.emit_func_output(result)
    try:
        fused = relax.transform.FuseTIR()(bb.get())
    except Exception:  # noqa: BLE001 - a body FuseTIR cannot join keeps the recursive form
        return None
    call = fused["caller"].body.blocks[0].bindings[0].value
    if not (isinstance(call, relax.Call) and call.op.same_as(_CALL_TIR)):
        return None
    position = {a: k for k, a in enumerate(args)}
    sources = []
    for arg in call.args[1].fields:
        k = position.get(arg)
        if k is None:
            return None
        sources.append(params[k] if k < len(body.params) else constants[k - len(body.params)][1])
    turn = fused[call.args[0]]
    if len(turn.params) != len(sources) + len(outputs.fields):
        return None
    return turn, sources


def _scalar(buf) -> tirx.Expr:
    return tirx.BufferLoad(buf, [])


def _copy(src, dst) -> tirx.Stmt:
    """``dst = src`` element by element (two buffers of one static shape)."""
    shape = list(dst.ty.shape)
    index = [tirx.Var(f"i{k}", d.ty) for k, d in enumerate(shape)]
    stmt = tirx.BufferStore(dst, tirx.BufferLoad(src, index), index)
    for var, extent in reversed(list(zip(index, shape))):
        stmt = tirx.For(var, tirx.IntImm(str(extent.ty), 0), extent, tirx.ForKind.SERIAL, stmt)
    return stmt


def _buffer_like(ty, name: str):
    return tirx.decl_buffer([tirx.IntImm("int64", int(d)) for d in ty.shape], ty.dtype, name)


def _while_func(turn: tirx.PrimFunc, sources: list, body: relax.Function, *, counted: bool, message: str,
                max_turns: int) -> tuple[tirx.PrimFunc, list]:
    """The loop as one PrimFunc, and where its arguments after ``iter0, cond0, init..., [trip]``
    come from: a body parameter's index (an outer value) or a constant."""
    carried = len(body.ret_ty.fields) - 1
    turn_in, turn_out = list(turn.params[:len(sources)]), list(turn.params[len(sources):])
    index = {p: j for j, p in enumerate(body.params)}
    read = {index[src]: buf for src, buf in zip(sources, turn_in) if src in index}

    def loop_value(j: int, name: str):  # the buffer the turn reads body parameter j from, or a new one
        buf = read.get(j)
        return buf if buf is not None else _buffer_like(body.params[j].ty, name)

    it, cond = loop_value(0, "iter"), loop_value(1, "cond")
    states = [loop_value(2 + k, f"state{k}") for k in range(carried)]
    starts = [_buffer_like(p.ty, f"{p.name}_start") for p in body.params[:2 + carried]]
    trip = _buffer_like(relax.TensorType((), "int64"), "trip_count") if counted else None
    extra = [(buf, index[src] if src in index else src) for src, buf in zip(sources, turn_in)
             if index.get(src, len(body.params)) >= 2 + carried]

    go = _scalar(cond) if trip is None else tirx.And(_scalar(cond), _scalar(it) < _scalar(trip))
    # (TVM 0.27's Python AssertStmt names its first two arguments the wrong way round: condition, kind)
    limit = tirx.AssertStmt(_scalar(it) < tirx.IntImm("int64", max_turns), tvm.ir.StringImm("RuntimeError"),
                            [tvm.ir.StringImm(message)])
    update = [_copy(new, old) for new, old in zip(turn_out[1:], states)]
    update += [_copy(turn_out[0], cond), tirx.BufferStore(it, _scalar(it) + tirx.IntImm("int64", 1), [])]
    start = [_copy(starts[2 + k], states[k]) for k in range(carried)]
    start += [_copy(starts[0], it), _copy(starts[1], cond)]
    root = turn.body.block
    loop = tirx.SeqStmt([*start, tirx.While(go, tirx.SeqStmt([limit, root.body, *update]))])
    block = s_tir.SBlock([], [], [], "root", loop, alloc_buffers=[*root.alloc_buffers, it, cond, *turn_out])
    params = [*starts, *([trip] if trip is not None else []), *(buf for buf, _ in extra), *states]
    func = tirx.PrimFunc(params, s_tir.SBlockRealize([], True, block), attrs=turn.attrs)
    return func.with_attr("tirx.is_scheduled", True), [src for _, src in extra]


def _compiles(prim: tirx.PrimFunc, name: str) -> bool:
    """Whether ``prim`` builds for the current target (a few tens of ms): one that does not leaves
    its loop recursive rather than fail the whole build."""
    target = tvm.target.Target.current(allow_none=True)
    if target is None:
        return True  # no target to check against: the build that follows says
    try:
        tvm.tirx.build(tvm.IRModule({name: prim.with_attr("global_symbol", name)}), target=target)
    except Exception:  # noqa: BLE001 - any build error keeps the recursive form
        return False
    return True


@relax.expr_functor.mutator
class _LoopCalls(relax.expr_functor.PyExprMutator):
    """Each call of a converted loop function made a ``call_tir`` of its ``_while`` PrimFunc."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.loops: dict = {}  # loop GlobalVar -> (while GlobalVar, counted, extra sources, carried types)

    def add_loop(self, loop_gv: relax.GlobalVar, prim: tirx.PrimFunc, counted: int, extra: list, types: list) -> None:
        while_gv = self.builder_.add_func(prim, loop_gv.name_hint.removesuffix("_loop") + "_while")
        self.loops[loop_gv] = (while_gv, counted, extra, types)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        found = next((v for gv, v in self.loops.items() if call.op.same_as(gv)), None)
        if found is None:
            return call
        while_gv, counted, extra, types = found
        head = list(call.args[:2 + len(types) + counted])
        args = head + [call.args[src + counted] if isinstance(src, int) else src for src in extra]
        result = relax.call_tir(while_gv, relax.Tuple(args), list(types))
        if len(types) == 1:  # call_tir gives the tensor itself; the loop function gave a tuple
            return relax.Tuple([self.builder_.emit(result)])
        return result


def loops_as_tir(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` (scheduled) with every kept loop whose body is straight-line kernels run as one
    PrimFunc with a TIR ``while`` (see the module); the others as they were."""
    loops, dropped = {}, set()
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or func.attrs is None or LOOP_BODY_ATTR not in func.attrs:
            continue
        body_gv = mod.get_global_var(str(func.attrs[LOOP_BODY_ATTR]))
        found = _turn(mod, mod[body_gv])
        if found is None:
            continue
        counted = int(func.attrs[LOOP_COUNTED_ATTR])
        prim, extra = _while_func(*found, mod[body_gv], counted=bool(counted),
                                  message=str(func.attrs[LOOP_MESSAGE_ATTR]), max_turns=MAX_KEPT_TURNS)
        if not _compiles(prim, gv.name_hint):
            continue
        loops[gv] = (prim, counted, extra, list(func.ret_ty.fields))
        dropped |= {gv, body_gv}
    if not loops:
        return mod
    mutator = _LoopCalls(mod)
    for gv, converted in loops.items():
        mutator.add_loop(gv, *converted)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function) and gv not in dropped:
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    rewritten = mutator.builder_.get()
    kept = tvm.IRModule({gv: f for gv, f in rewritten.functions_items() if gv not in dropped}, attrs=rewritten.attrs,
                        global_infos=rewritten.global_infos)
    entries = [gv.name_hint for gv, f in kept.functions_items() if f.attrs is not None and "global_symbol" in f.attrs]
    return relax.transform.DeadCodeElimination(entries)(kept)


def loops_as_tir_pass() -> tvm.transform.Pass:
    """:func:`loops_as_tir` as a module pass (first of a CPU target's lowering passes)."""
    return tvm.transform.module_pass(lambda mod, _ctx: loops_as_tir(mod), opt_level=0, name="schedx.LoopsAsTIR")


__all__ = ["loops_as_tir", "loops_as_tir_pass"]
