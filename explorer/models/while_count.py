"""``while`` loops that are counters in disguise: their trip count found by running the condition.

tf2onnx writes a ``tf.while_loop`` (a Keras RNN stepped by hand, ``for t in tf.range(T)`` in a
``tf.function``) as an ONNX ``Loop`` with no trip count and a condition recomputed in each turn:
``Less(Cast(t + 1), T)``, where ``t`` is a loop-carried counter starting at a constant and ``T`` a
constant or the ``Shape`` of an input the fixed shapes decide. Read as a ``while`` loop it looks
data-dependent, and :mod:`explorer.models.loop_unroll` would refuse it. Yet the condition reads
nothing but the counter, constants and shapes: this module takes the part of the body that the
condition needs (the condition and the updates of the carried values it reads), runs it with
ONNX's reference runtime turn by turn from the loop's initial values until the condition is
false, and writes the count it found as the loop's trip count, with a condition that stays true.
The loop then means the same and :mod:`explorer.models.loop_unroll` unrolls it.

A loop whose condition reads a value computed from the data (an early exit on a threshold), a
loop-carried tensor other than through its ``Shape``, a nested graph, or that runs past
:data:`explorer.models.loop_unroll.MAX_TURNS` turns is left as it is (and refused there, by name).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from explorer.models.control_flow import fold_constants
from explorer.models.loop_unroll import MAX_TURNS
from explorer.models.onnx_rewrite import GraphView


def _body(node: onnx.NodeProto) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == "body")


def _counts_itself(body: onnx.GraphProto) -> bool:
    """Whether the condition output is computed in the body (not passed through, as a ``for`` loop does)."""
    return body.output[0].name != body.input[1].name and any(body.output[0].name in n.output for n in body.node)


class _Slice:
    """The part of a loop body that the condition needs, as a graph ONNX's reference runtime runs:
    inputs ``iter`` and the carried values read, outputs the condition and their updates."""

    def __init__(self, loop: onnx.NodeProto, view: GraphView, model: onnx.ModelProto) -> None:
        body = _body(loop)
        self.body, self.loop, self.view = body, loop, view
        producers = {o: n for n in body.node for o in n.output if o}
        index = {i.name: k for k, i in enumerate(body.input)}
        local_inits = {i.name for i in body.initializer}
        self.carried: list[int] = []  # indices k of carried values read (body input 2 + k)
        self.outer: dict[str, np.ndarray] = {}  # outer constants read
        nodes: dict[int, onnx.NodeProto] = {}
        order = {id(n): i for i, n in enumerate(body.node)}
        todo, seen = [body.output[0].name], set()
        while todo:
            name = todo.pop()
            if not name or name in seen:
                continue
            seen.add(name)
            if name in index:
                k = index[name] - 2
                if k >= 0 and k not in self.carried:
                    self.carried.append(k)
                    todo.append(body.output[1 + k].name)
                continue
            if name in local_inits:
                continue
            node = producers.get(name)
            if node is None:  # read from the graph around the loop: must be a constant there
                value = view.constant(name)
                if value is None:
                    raise _NotACounter(f"its condition reads {name!r}, computed at run time")
                self.outer[name] = value
                continue
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                raise _NotACounter("its condition is computed in a nested graph")
            nodes[order[id(node)]] = node
            todo.extend(node.input)
        self.nodes = [nodes[i] for i in sorted(nodes)]
        self.initial = {k: self._initial(k, model) for k in self.carried}

    def _initial(self, k: int, model: onnx.ModelProto) -> np.ndarray:
        """The carried value ``k``'s value before the first turn: a constant, or, for a tensor the
        condition reads only through ``Shape`` and that each turn passes on unchanged, zeros of
        its static shape."""
        name = self.loop.input[2 + k]
        value = self.view.constant(name)
        if value is not None:
            return value
        inner = self.body.input[2 + k].name
        chain = self._passed_on(k)
        readers = [n for n in self.nodes if inner in n.input and id(n) not in chain]
        passed_on = chain is not None
        shape = self.view.shape(name)
        if not (passed_on and readers and all(n.op_type == "Shape" for n in readers) and shape is not None):
            raise _NotACounter(f"its condition reads the loop-carried {inner!r}, computed from the data")
        dtype = helper.tensor_dtype_to_np_dtype(self.view.elem_types.get(name, onnx.TensorProto.FLOAT))
        return np.zeros(shape, dtype)

    def _passed_on(self, k: int) -> set[int] | None:
        """The ids of the ``Identity`` nodes through which each turn passes the carried value ``k``
        on unchanged (an empty set: directly), or None when a turn changes it."""
        producers = {o: n for n in self.body.node for o in n.output if o}
        name, chain = self.body.output[1 + k].name, set()
        while name != self.body.input[2 + k].name:
            node = producers.get(name)
            if node is None or node.op_type != "Identity":
                return None
            chain.add(id(node))
            name = node.input[0]
        return chain

    def model(self) -> onnx.ModelProto:
        body = self.body
        it = helper.make_tensor_value_info(body.input[0].name, onnx.TensorProto.INT64, [])
        carried = [body.input[2 + k] for k in self.carried]
        outs = [body.output[0]] + [body.output[1 + k] for k in self.carried]
        inits = list(body.initializer) + [numpy_helper.from_array(np.asarray(v), n) for n, v in self.outer.items()]
        graph = helper.make_graph(self.nodes, "while_condition", [it, *carried],
                                  [helper.make_value_info(o.name, onnx.TypeProto()) for o in outs], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.view.opset)])

    def count(self, limit: int) -> int | None:
        """Turns the loop runs (at most ``limit``), or None when it would run more."""
        from onnx.reference import ReferenceEvaluator

        cond = self.view.constant(self.loop.input[1]) if len(self.loop.input) > 1 and self.loop.input[1] else True
        if cond is None:
            raise _NotACounter("its first condition is computed at run time")
        run = ReferenceEvaluator(self.model())
        names = [self.body.input[2 + k].name for k in self.carried]
        values = [self.initial[k] for k in self.carried]
        turns = 0
        while bool(np.asarray(cond).reshape(())):
            if turns >= limit:
                return None
            outs = run.run(None, {self.body.input[0].name: np.array(turns, np.int64), **dict(zip(names, values))})
            cond, values = outs[0], outs[1:]
            turns += 1
        return turns


class _NotACounter(Exception):
    """The loop's condition depends on more than a counter, constants and shapes."""


def count_while_loops(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with each main-graph ``while``-style ``Loop`` whose condition is a counter (see the
    module) given its trip count and a condition that stays true, and a note per loop; other loops
    are left as they are. A model without such loops comes back unchanged."""
    loops = [n for n in model.graph.node if n.op_type == "Loop" and _counts_itself(_body(n))]
    if not loops:
        return model, []
    try:
        out = fold_constants(model)  # a bound from Shape(input) becomes a constant
    except Exception:  # noqa: BLE001 - folding is a help: constants already there still count
        out = onnx.ModelProto()
        out.CopyFrom(model)
    view = GraphView(out)
    notes = []
    for node in out.graph.node:
        if node.op_type != "Loop" or not _counts_itself(_body(node)):
            continue
        trip = view.constant(node.input[0]) if node.input and node.input[0] else None
        limit = min(MAX_TURNS, int(np.asarray(trip).reshape(()))) if trip is not None else MAX_TURNS
        try:
            turns = _Slice(node, view, out).count(limit)
        except _NotACounter:
            continue
        except Exception:  # noqa: BLE001 - the reference runtime could not run it: leave the loop
            continue
        if turns is None:
            continue
        _fix_trip_count(out, node, turns)
        notes.append(f"Loop {node.name or node.output[0]!r}: a while loop whose condition is a counter; "
                     f"it runs {turns} turns, now its trip count")
    return (out, notes) if notes else (model, [])


def _fix_trip_count(model: onnx.ModelProto, node: onnx.NodeProto, turns: int) -> None:
    """Give ``node`` the trip count ``turns`` and a condition that stays true, in place."""
    body = _body(node)
    base = f"{node.name or 'loop'}_counted"
    trip, cond = f"{base}_trip", f"{base}_cond"
    model.graph.initializer.extend([numpy_helper.from_array(np.array(turns, np.int64), trip),
                                    numpy_helper.from_array(np.array(True), cond)])
    inputs = list(node.input) + [""] * max(0, 2 - len(node.input))
    inputs[0], inputs[1] = trip, cond
    del node.input[:]
    node.input.extend(inputs)
    stays = f"{base}_cond_out"
    body.node.append(helper.make_node("Identity", [body.input[1].name], [stays], name=f"{base}_cond_stays"))
    body.output[0].name = stays


__all__ = ["count_while_loops"]
