"""``Loop`` nodes: unrolled where the fixed shapes decide the trip count, refused by name otherwise.

Scripted PyTorch (``torch.jit.script``) writes a Python ``for`` loop as an ONNX ``Loop``: over a
tensor's length (``for t in range(x.size(0))``, a recurrent cell stepped over time), or a number
read from an input (``for _ in range(int(steps))``); a ``while`` loop becomes a ``Loop`` whose
condition is recomputed in each turn. TVM 0.27's ONNX importer has no ``Loop`` at all. Once
``--shapes`` fixes the input dimensions (and pins scalar inputs such as ``steps=5``), the trip
count of the first two kinds is a constant: :func:`unroll_loops` writes such a loop's body once
per turn (the iteration number a constant, loop-carried values threaded from one copy to the
next, per-turn scan outputs stacked along a new first axis, as ONNX defines them), so the
recurrent layers in the body reach :mod:`explorer.models.recurrent` as main-graph layers.

A loop whose trip count is still unknown, whose condition depends on the data (an early exit),
or that would unroll to more than :data:`MAX_TURNS` copies is refused with
:class:`UnsupportedOperatorError` naming the node, what decides its trip count, the exporter
that wrote the file, and what to do (pin the input that sets the count, or export the model
traced instead of scripted). A loop whose condition depends on the data and that has no scan
outputs is kept instead: :mod:`explorer.models.loop_relax` imports it as a recursive Relax function.
"""

from __future__ import annotations

import numpy as np
import onnx

from explorer.errors import UnsupportedOperatorError
from explorer.models.control_flow import fold_constants, input_sources
from explorer.models.loop_relax import why_not_kept
from explorer.models.onnx_rewrite import Emitter, GraphView, replace_nodes

MAX_TURNS = 512  # a loop of more turns stays refused: its unrolled graph would be that many copies
DATA_CONDITION = ("its condition is computed from the data in each turn (a `while` loop or an early exit), so "
                  "the number of turns is known only at run time")


def has_loops(model: onnx.ModelProto) -> bool:
    return any(n.op_type == "Loop" for n in model.graph.node)


def _exporter(model: onnx.ModelProto) -> str:
    text = f"{model.producer_name} {model.producer_version}".strip()
    return f"written by {text}" if text else "the file names no producer"


def _true(view: GraphView, name: str) -> bool:
    value = view.constant(name)
    return value is not None and value.size == 1 and bool(value.reshape(()))


def _passes_condition_on(body: onnx.GraphProto, view: GraphView) -> bool:
    """Whether the body's condition output is its condition input (directly or through Identity)
    or a constant true (of the body, or of the graph around it): a loop without an early exit."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    producers = {o: n for n in body.node for o in n.output if o}
    while cond_out != cond_in:
        node = producers.get(cond_out)
        init = next((i for i in body.initializer if i.name == cond_out), None)
        if init is not None:
            value = onnx.numpy_helper.to_array(init)
            return value.size == 1 and bool(value.reshape(()))
        if node is None:  # an outer name
            return _true(view, cond_out)
        if node.op_type == "Constant":
            value = onnx.numpy_helper.to_array(node.attribute[0].t)
            return value.size == 1 and bool(value.reshape(()))
        if node.op_type != "Identity":
            return False
        cond_out = node.input[0]
    return True


def _why_not(node: onnx.NodeProto, view: GraphView, model: onnx.ModelProto) -> str | None:
    """Why ``node`` (a Loop) cannot be unrolled, or None when it can."""
    body = next(a.g for a in node.attribute if a.name == "body")
    trip, cond = (list(node.input) + ["", ""])[:2]
    if not _passes_condition_on(body, view) or (cond and not _true(view, cond)):
        return DATA_CONDITION
    count = view.constant(trip) if trip else None
    if count is None:
        producers = {o: n for n in model.graph.node for o in n.output if o}
        inits = {x.name for x in model.graph.initializer}
        pins = input_sources(trip, producers, {i.name for i in model.graph.input if i.name not in inits}) if trip else ()
        what = f"the input(s) {', '.join(map(repr, pins))}" if pins else "values computed at run time"
        fix = (f"; fix it with --shapes {','.join(f'{p}=N' for p in pins)} (a scalar input) or the input's "
               "dimensions, and the loop is unrolled") if pins else ""
        return f"its trip count is computed from {what} at run time{fix}"
    turns = int(np.asarray(count).reshape(()))
    if turns > MAX_TURNS:
        return f"it runs {turns} turns, more than the {MAX_TURNS} schedx unrolls"
    if turns < 1:
        return f"it runs {turns} turns"
    return None


def _rename_subgraph(graph: onnx.GraphProto, env: dict[str, str]) -> None:
    """Inside a nested graph (an If branch in the body), rename the outer names it reads."""
    local = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {o for n in graph.node for o in n.output}
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in env and name not in local:
                node.input[k] = env[name]
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _rename_subgraph(attr.g, {k: v for k, v in env.items() if k not in local})
            for g in attr.graphs:
                _rename_subgraph(g, {k: v for k, v in env.items() if k not in local})
    for out in graph.output:
        if out.name in env and out.name not in local:
            out.name = env[out.name]


def _unroll(node: onnx.NodeProto, em: Emitter, turns: int) -> None:
    body = next(a.g for a in node.attribute if a.name == "body")
    carried_in = [i.name for i in body.input[2:]]
    n_carried = len(carried_in)
    carried_out = [o.name for o in body.output[1:1 + n_carried]]
    scan_out = [o.name for o in body.output[1 + n_carried:]]
    shared = {}
    for init in body.initializer:  # written once, read by every turn
        copy = onnx.TensorProto()
        copy.CopyFrom(init)
        copy.name = em.fresh("body_const")
        em.initializers.append(copy)
        shared[init.name] = copy.name
    state = list(node.input[2:])
    scans: list[list[str]] = [[] for _ in scan_out]
    cond_true = em.const(np.array(True), "cond")
    for turn in range(turns):
        env = dict(shared)
        env[body.input[0].name] = em.const(np.array(turn, np.int64), f"turn{turn}")
        env[body.input[1].name] = cond_true
        env.update(zip(carried_in, state))
        for inner in body.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(inner)
            copy.name = em.fresh(f"t{turn}_{inner.name or inner.op_type}")
            for k, name in enumerate(copy.input):
                copy.input[k] = env.get(name, name)
            for k, name in enumerate(copy.output):
                if name:
                    env[name] = copy.output[k] = em.fresh(f"t{turn}_{name}")
            for attr in copy.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    _rename_subgraph(attr.g, env)
                for g in attr.graphs:
                    _rename_subgraph(g, env)
            em.nodes.append(copy)
        state = [env.get(name, name) for name in carried_out]
        for k, name in enumerate(scan_out):
            scans[k].append(env.get(name, name))
    outputs = list(node.output)
    for final, out in zip(state, outputs[:n_carried]):
        if out:
            em.op("Identity", [final], out=out)
    axes = em.const(np.array([0], np.int64), "axes") if em.view.opset >= 13 else None
    for parts, out in zip(scans, outputs[n_carried:]):
        if not out:
            continue
        lifted = [em.op("Unsqueeze", [p, axes]) if axes else em.op("Unsqueeze", [p], axes=[0]) for p in parts]
        em.op("Concat", lifted, out=out, axis=0)


def unroll_loops(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with every main-graph ``Loop`` unrolled (see the module), and a note per loop;
    raises :class:`UnsupportedOperatorError` naming each loop that cannot be. A model without
    loops comes back unchanged."""
    if not has_loops(model):
        return model, []
    try:
        out = fold_constants(model)  # trip counts from shapes (Shape -> Gather) become constants
    except Exception:  # noqa: BLE001 - folding is a help: constants already there still count
        out = onnx.ModelProto()
        out.CopyFrom(model)
    view = GraphView(out)
    refused, kept, notes = {}, set(), []
    for node in out.graph.node:
        if node.op_type == "Loop":
            why = _why_not(node, view, out)
            if why == DATA_CONDITION and why_not_kept(node) is None:
                kept.add(tuple(node.output))  # imported as a recursive Relax function (explorer.models.loop_relax)
                notes.append(f"Loop {node.name or node.output[0]!r} kept as a loop: {why}; imported as a recursive "
                             "Relax function (its body a function of its own, called while the condition holds)")
            elif why == DATA_CONDITION:
                refused[node.name or node.output[0]] = f"{why}, and {why_not_kept(node)}"
            elif why:
                refused[node.name or node.output[0]] = why
    if refused:
        first, why = next(iter(refused.items()))
        detail = (f"{why}. TVM 0.27's importer has no Loop; schedx unrolls a loop whose trip count the shapes "
                  f"fix ({_exporter(model)}; a scripted module can also be exported traced, torch.jit.trace, "
                  "which writes the loop unrolled)")
        others = {"Loop": (list(refused), detail)} if len(refused) > 1 else None
        raise UnsupportedOperatorError("Loop", first, detail, others=others)

    def rewrite(node: onnx.NodeProto, v: GraphView) -> Emitter | None:
        if node.op_type != "Loop" or tuple(node.output) in kept:
            return None
        turns = int(np.asarray(v.constant(node.input[0])).reshape(()))
        em = Emitter(v, node.name or "Loop")
        _unroll(node, em, turns)
        notes.append(f"Loop {node.name or node.output[0]!r} unrolled: {turns} turns, fixed by the input shapes")
        return em

    replace_nodes(out, rewrite)
    return out, notes


__all__ = ["MAX_TURNS", "has_loops", "unroll_loops"]
