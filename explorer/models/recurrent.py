"""Rewrite ONNX recurrent layers (LSTM, GRU, RNN) into operators TVM imports.

TVM 0.27's ONNX importer has no LSTM, GRU or RNN converter. Over a sequence length fixed by the
input shapes, each layer is the same cell applied step after step, so it can be written out as
plain operators: one MatMul of the whole input sequence by the input weights (all steps at
once), then per step a MatMul of the hidden state by the recurrence weights, Slices for the
gates, Sigmoid/Tanh, Mul and Add, and finally Concat/Reshape for the outputs ``Y``, ``Y_h`` and
``Y_c``. The rewrite is ONNX-to-ONNX, so ONNX Runtime can run the rewritten model against the
original one; the identical per-step kernels fuse into a few tasks that tune like any other.

By default (float32 layers) a layer is one MatMul for the input projections of all its
directions, then one node of schedx's own (``ai.schedx`` ``Recurrence``, :data:`RECURRENCE_OP`)
that the importer turns into one kernel running every step of every direction
(:mod:`explorer.schedule.defaults.recurrence`): unrolled, a step is two or three kernels, each a call of the
VM that costs about a microsecond, more than a narrow step computes. ``sequence_kernels=False``
unrolls the steps into plain operators (which ONNX Runtime can run: the tests check the cell
arithmetic that way).

Covered: directions forward, reverse and bidirectional; layouts 0 and 1; the bias, initial
states and peepholes optional; ``clip``; GRU's ``linear_before_reset`` both ways; the
parameter-free activations (Sigmoid, Tanh, Relu, Softsign, Softplus). Refused with a
:class:`RecurrentLayerError` naming the node: ``input_forget``, activations that take
``alpha``/``beta``, weights that are not constants, a ``sequence_lens`` whose lengths differ from
the sequence length, and a sequence length or batch size that is not static (give ``--shapes``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from explorer.errors import UnsupportedOperatorError
from explorer.schedule.defaults.recurrence_spec import ACTIVATIONS as SUPPORTED_ACTIVATIONS
from explorer.schedule.defaults.recurrence_spec import DEFAULT_ACTIVATIONS as _DEFAULT_ACTIVATIONS
from explorer.schedule.defaults.recurrence_spec import GATES as _GATES
from explorer.schedule.defaults.recurrence_spec import RecurrenceSpec
from explorer.models.onnx_rewrite import Emitter, GraphView, if_branches, replace_nodes

RECURRENT_OPS = ("LSTM", "GRU", "RNN")
RECURRENCE_DOMAIN = "ai.schedx"
RECURRENCE_OP = "Recurrence"  # a layer's steps as one kernel; attribute ``spec``: RecurrenceSpec JSON


class RecurrentLayerError(UnsupportedOperatorError):
    """A recurrent layer in a form the rewrite does not cover; the message says which and why."""

    def __init__(self, op_type: str, node_name: str, why: str, *, where: str = "") -> None:
        self.op_type = op_type
        self.node_name = where + node_name  # where: the If branch it sits in ("" in the main graph)
        self.why, self.where = why, where
        named = f" (node {self.node_name!r})" if self.node_name else ""
        Exception.__init__(self, f"{op_type}{named} cannot be rewritten for TVM: {why}")


@dataclass(frozen=True)
class _Layer:
    """Everything the rewrite needs about one recurrent node, checked."""

    op: str
    name: str
    seq: int
    batch: int
    hidden: int
    directions: tuple[str, ...]  # "forward" / "reverse" per direction index
    activations: tuple[tuple[str, ...], ...]  # per direction
    clip: float | None
    batch_first: bool
    linear_before_reset: bool
    dtype: np.dtype


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _inputs(node: onnx.NodeProto, count: int) -> list[str]:
    names = list(node.input) + [""] * count
    return names[:count]


def _describe(node: onnx.NodeProto, view: GraphView) -> _Layer:
    op, name = node.op_type, node.name or (node.output[0] if node.output else "")
    fail = lambda why: RecurrentLayerError(op, name, why, where=view.where)
    attrs = _attrs(node)
    direction = _text(attrs.get("direction", b"forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise fail(f"unknown direction {direction!r}")
    directions = ("forward", "reverse") if direction == "bidirectional" else (direction,)
    if attrs.get("input_forget", 0):
        raise fail("input_forget=1 (coupled input and forget gates) is not supported")
    names = [_text(a) for a in attrs.get("activations", [])] or list(_DEFAULT_ACTIVATIONS[op]) * len(directions)
    per_dir = len(_DEFAULT_ACTIVATIONS[op])
    if len(names) != per_dir * len(directions):
        raise fail(f"expected {per_dir * len(directions)} activations for {len(directions)} direction(s), got {len(names)}")
    odd = sorted({a for a in names if a not in SUPPORTED_ACTIVATIONS})
    if odd or attrs.get("activation_alpha") or attrs.get("activation_beta"):
        raise fail(f"activation(s) {', '.join(odd) or 'with alpha/beta'} are not supported "
                   f"(supported: {', '.join(SUPPORTED_ACTIVATIONS)})")
    activations = tuple(tuple(names[d * per_dir:(d + 1) * per_dir]) for d in range(len(directions)))
    x_name, w_name = node.input[0], node.input[1]
    w = view.constant(w_name)
    if w is None:
        raise fail(f"its weights W ({w_name!r}) are computed at run time; only constant weights are supported")
    batch_first = bool(attrs.get("layout", 0))
    x_shape = view.shape(x_name)
    rank = view.rank(x_name)
    if rank is not None and rank != 3:
        branch = (" in this If branch: with these input shapes the branch cannot run (ONNX Runtime would fail "
                  "in it too); fix the input that chooses the branch so that it is folded away (--shapes NAME=VALUE)"
                  if view.where else "")
        raise fail(f"its input {x_name!r} has rank {rank} where a recurrent layer takes rank 3{branch}")
    if x_shape is None:
        raise fail(f"the shape of its input {x_name!r} is not static, so the sequence length is unknown; "
                   "fix the model's input shapes with --shapes (e.g. 'input:1x16x40' or 'seq=16')")
    seq, batch = (x_shape[1], x_shape[0]) if batch_first else (x_shape[0], x_shape[1])
    hidden = int(attrs.get("hidden_size", w.shape[1] // _GATES[op]))
    if w.shape[0] != len(directions) or w.shape[1] != _GATES[op] * hidden:
        raise fail(f"W has shape {list(w.shape)}, expected [{len(directions)}, {_GATES[op] * hidden}, input_size]")
    seq_lens = view.constant(node.input[4]) if len(node.input) > 4 and node.input[4] else None
    if len(node.input) > 4 and node.input[4]:
        if seq_lens is None:
            raise fail("sequence_lens is given at run time; only full-length sequences are supported")
        if np.any(seq_lens != seq):
            raise fail(f"sequence_lens {seq_lens.tolist()} differ from the sequence length {seq}; "
                       "only full-length sequences are supported")
    for k, label in ((2, "R"), (3, "B"), (7, "P")):
        if len(node.input) > k and node.input[k] and view.constant(node.input[k]) is None:
            raise fail(f"its {label} ({node.input[k]!r}) is computed at run time; only constant weights are supported")
    clip = attrs.get("clip")
    return _Layer(op=op, name=name, seq=seq, batch=batch, hidden=hidden, directions=directions,
                  activations=activations, clip=float(clip) if clip is not None else None, batch_first=batch_first,
                  linear_before_reset=bool(attrs.get("linear_before_reset", 0)), dtype=w.dtype)


class _Cell:
    """Emits one direction of one layer, step by step."""

    def __init__(self, em: Emitter, layer: _Layer, d: int, node: onnx.NodeProto) -> None:
        self.em, self.layer, self.d = em, layer, d
        view, H = em.view, layer.hidden
        gates = _GATES[layer.op]
        get = lambda k: view.constant(node.input[k]) if len(node.input) > k and node.input[k] else None
        self.w = get(1)[d]  # [gates*H, input]
        self.r = get(2)[d]  # [gates*H, H]
        b = get(3)
        b = b[d] if b is not None else np.zeros(2 * gates * H, layer.dtype)
        self.wb, self.rb = b[:gates * H], b[gates * H:]
        p = get(7) if layer.op == "LSTM" else None
        self.p = p[d] if p is not None else None
        self.act = layer.activations[d]

    def _f(self, x: str, which: int) -> str:
        """Clip (if asked) then the ``which``-th activation of this direction."""
        if self.layer.clip is not None:
            x = self.em.clip(x, -self.layer.clip, self.layer.clip, self.layer.dtype)
        return self.em.op(self.act[which], [x])

    def projection(self) -> tuple[np.ndarray, np.ndarray]:
        """``W^T`` [input, gates*H] and the bias added to ``X @ W^T`` (both biases, but for a GRU
        with linear_before_reset the h gate's recurrence bias, which sits inside r * (...))."""
        H = self.layer.hidden
        bias = self.wb + self.rb
        if self.layer.op == "GRU" and self.layer.linear_before_reset:
            bias = self.wb.copy()
            bias[:2 * H] += self.rb[:2 * H]
        return self.w.T.copy(), bias.astype(self.layer.dtype)

    def input_projection(self, x_seq: str) -> str:
        """``X @ W^T + bias`` for every step at once: [seq, batch, gates*H]."""
        w_t, bias = self.projection()
        xw = self.em.op("MatMul", [x_seq, self.em.const(w_t, "W_t")])
        return self.em.op("Add", [xw, self.em.const(bias, "bias")])

    def step(self, xt: str, h: str, c: str | None) -> tuple[str, str | None]:
        return getattr(self, f"_{self.layer.op.lower()}")(xt, h, c)

    def _rnn(self, xt: str, h: str, c: str | None) -> tuple[str, None]:
        em = self.em
        pre = em.op("Add", [xt, em.op("MatMul", [h, em.const(self.r.T.copy(), "R_t")])])
        return self._f(pre, 0), None

    def _lstm(self, xt: str, h: str, c: str) -> tuple[str, str]:
        em = self.em
        pre = em.op("Add", [xt, em.op("MatMul", [h, em.const(self.r.T.copy(), "R_t")])])
        # The new cell state is written twice, once for the next step and once for this step's
        # output: shared, it has two consumers and fusion cuts the step's gates into three kernels
        # (each a call of the VM, the cost of a 96-wide LSTM step); recomputed, they are two.
        c_new = self._cell(pre, c)
        c_out = self._cell(pre, c)
        H = self.layer.hidden
        o_pre = em.slice(pre, H, 2 * H, 2)
        if self.p is not None:
            o_pre = em.op("Add", [o_pre, em.op("Mul", [c_out, em.const(self.p[H:2 * H].copy(), "P")])])
        o = self._f(o_pre, 0)
        return em.op("Mul", [o, em.op(self.act[2], [c_out])]), c_new

    def _cell(self, pre: str, c: str) -> str:
        """``f * c + i * g`` from the step's gate sums ``pre`` (ONNX's order: i, o, f, c)."""
        em, H = self.em, self.layer.hidden
        i_pre, f_pre = em.slice(pre, 0, H, 2), em.slice(pre, 2 * H, 3 * H, 2)
        if self.p is not None:
            i_pre = em.op("Add", [i_pre, em.op("Mul", [c, em.const(self.p[:H].copy(), "P")])])
            f_pre = em.op("Add", [f_pre, em.op("Mul", [c, em.const(self.p[2 * H:].copy(), "P")])])
        i, f = self._f(i_pre, 0), self._f(f_pre, 0)
        g = self._f(em.slice(pre, 3 * H, 4 * H, 2), 1)
        return em.op("Add", [em.op("Mul", [f, c]), em.op("Mul", [i, g])])

    def _gru(self, xt: str, h: str, c: str | None) -> tuple[str, None]:
        em, H = self.em, self.layer.hidden
        x_zr, x_h = em.slice(xt, 0, 2 * H, 2), em.slice(xt, 2 * H, 3 * H, 2)
        if self.layer.linear_before_reset:
            hr = em.op("MatMul", [h, em.const(self.r.T.copy(), "R_t")])
            zr = self._f(em.op("Add", [x_zr, em.slice(hr, 0, 2 * H, 2)]), 0)
            r = em.slice(zr, H, 2 * H, 2)
            h_lin = em.op("Add", [em.slice(hr, 2 * H, 3 * H, 2), em.const(self.rb[2 * H:].copy(), "Rbh")])
            cand = self._f(em.op("Add", [x_h, em.op("Mul", [r, h_lin])]), 1)
        else:
            h_zr = em.op("MatMul", [h, em.const(self.r[:2 * H].T.copy(), "Rzr_t")])
            zr = self._f(em.op("Add", [x_zr, h_zr]), 0)
            r = em.slice(zr, H, 2 * H, 2)
            rh = em.op("MatMul", [em.op("Mul", [r, h]), em.const(self.r[2 * H:].T.copy(), "Rh_t")])
            cand = self._f(em.op("Add", [x_h, rh]), 1)
        z = em.slice(zr, 0, H, 2)
        # H' = (1 - z) * cand + z * H, written as cand + z * (H - cand)
        return em.op("Add", [cand, em.op("Mul", [z, em.op("Sub", [h, cand])])]), None


def _initial_state(em: Emitter, layer: _Layer, name: str, d: int, hint: str) -> str:
    """Direction ``d`` of an initial state input ([num_dir, batch, H], batch first under
    layout 1) as [1, batch, H]: every state of the unrolled loop has that shape."""
    if not name:
        return em.const(np.zeros((1, layer.batch, layer.hidden), layer.dtype), f"{hint}0")
    if layer.batch_first:
        name = em.op("Transpose", [name], perm=[1, 0, 2])
    return em.slice(name, d, d + 1, 0)


def _rewrite(node: onnx.NodeProto, view: GraphView, sequence_kernels: bool = True) -> Emitter | None:
    if node.op_type not in RECURRENT_OPS or node.domain not in ("", "ai.onnx"):
        return None
    layer = _describe(node, view)
    em = Emitter(view, node.name or f"{node.op_type}_{node.output[0]}")
    x = node.input[0]
    if layer.batch_first:
        x = em.op("Transpose", [x], perm=[1, 0, 2])
    names = list(node.output) + ["", "", ""]
    want_y, want_h, want_c = names[0], names[1], names[2] if layer.op == "LSTM" else ""
    inputs = list(node.input) + [""] * 8
    if sequence_kernels and layer.dtype == np.float32:
        _sequence(em, layer, node, x, inputs, (want_y, want_h, want_c))
        return em
    ys, hs, cs = [], [], []
    B, H = layer.batch, layer.hidden
    for d, direction in enumerate(layer.directions):
        cell = _Cell(em, layer, d, node)
        xw = cell.input_projection(x)
        h = _initial_state(em, layer, inputs[5], d, "h")
        c = _initial_state(em, layer, inputs[6], d, "c") if layer.op == "LSTM" else None
        order = range(layer.seq) if direction == "forward" else range(layer.seq - 1, -1, -1)
        per_step: dict[int, str] = {}
        steps_in = em.split(xw, [1] * layer.seq, 0)  # states and step inputs are [1, batch, *]
        for t in order:
            h, c = cell.step(steps_in[t], h, c)
            per_step[t] = h
        if want_y:
            steps = [per_step[t] for t in range(layer.seq)]
            y = em.op("Concat", steps, axis=0) if len(steps) > 1 else steps[0]
            ys.append(em.reshape(y, (layer.seq, 1, B, H)))
        hs.append(h)
        if c is not None:
            cs.append(c)
    _emit_output(em, ys, want_y, axis=1, perm=[2, 0, 1, 3] if layer.batch_first else None)
    _emit_output(em, hs, want_h, axis=0, perm=[1, 0, 2] if layer.batch_first else None)
    _emit_output(em, cs, want_c, axis=0, perm=[1, 0, 2] if layer.batch_first else None)
    return em


def _sequence(em: Emitter, layer: _Layer, node: onnx.NodeProto, x: str, inputs: list[str],
              wanted: tuple[str, str, str]) -> None:
    """The layer as one ``Recurrence`` node (every step of every direction), after one MatMul
    for the input projections of all directions; its outputs are ONNX's for layout 0."""
    cells = [_Cell(em, layer, d, node) for d in range(len(layer.directions))]
    projections = [cell.projection() for cell in cells]
    w_t = np.concatenate([w for w, _ in projections], axis=1)
    bias = np.concatenate([b for _, b in projections])
    xw = em.op("Add", [em.op("MatMul", [x, em.const(w_t, "W_t")]), em.const(bias, "bias")])
    H = layer.hidden
    spec = RecurrenceSpec(op=layer.op, seq=layer.seq, batch=layer.batch, hidden=H, directions=layer.directions,
                          activations=layer.activations, clip=layer.clip,
                          linear_before_reset=layer.linear_before_reset, peepholes=cells[0].p is not None,
                          dtype=str(np.dtype(layer.dtype)))
    args = [xw, em.const(np.stack([cell.r.T for cell in cells]), "R_t"), _states(em, layer, inputs[5], "h")]
    if layer.op == "LSTM":
        args.append(_states(em, layer, inputs[6], "c"))
        if spec.peepholes:
            args.append(em.const(np.stack([cell.p for cell in cells]), "P"))
    if spec.op == "GRU" and spec.linear_before_reset:
        args.append(em.const(np.stack([cell.rb[2 * H:] for cell in cells]), "Rbh"))
    outs = em.custom(RECURRENCE_OP, RECURRENCE_DOMAIN, args, len(spec.output_names()), spec=spec.to_json())
    for out, name, perm in zip(outs, wanted, ([2, 0, 1, 3], [1, 0, 2], [1, 0, 2])):
        if name:
            em.op("Transpose" if layer.batch_first else "Identity", [out], out=name,
                  **({"perm": perm} if layer.batch_first else {}))


def _states(em: Emitter, layer: _Layer, name: str, hint: str) -> str:
    """An initial state input as [num_dir, batch, H] (zeros when the model gives none)."""
    if not name:
        return em.const(np.zeros((len(layer.directions), layer.batch, layer.hidden), layer.dtype), f"{hint}0")
    return em.op("Transpose", [name], perm=[1, 0, 2]) if layer.batch_first else name


def _emit_output(em: Emitter, parts: list[str], name: str, *, axis: int, perm: list[int] | None) -> None:
    """Join the per-direction ``parts`` into the original output ``name`` (skipped when unused)."""
    if not name or not parts:
        return
    if perm is None:
        if len(parts) == 1:
            em.op("Identity", parts, out=name)
        else:
            em.op("Concat", parts, out=name, axis=axis)
        return
    joined = parts[0] if len(parts) == 1 else em.op("Concat", parts, axis=axis)
    em.op("Transpose", [joined], out=name, perm=perm)


def _layers(graph: onnx.GraphProto, where: str = "") -> list[tuple[onnx.NodeProto, str]]:
    """The LSTM, GRU and RNN nodes of ``graph`` and of its ``If`` branches, with where they sit."""
    found = [(n, where) for n in graph.node if n.op_type in RECURRENT_OPS and n.domain in ("", "ai.onnx")]
    for _node, _label, branch, path in if_branches(graph, where):
        found += _layers(branch, path)
    return found


def _nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    return list(graph.node) + [n for _, _, branch, _ in if_branches(graph) for n in _nodes(branch)]


def has_recurrent_layers(model: onnx.ModelProto) -> bool:
    """Whether the main graph or an ``If`` branch in it holds an LSTM, GRU or RNN node."""
    return bool(_layers(model.graph))


def rewrite_recurrent(model: onnx.ModelProto, *, sequence_kernels: bool = True) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` whose LSTM/GRU/RNN nodes are rewritten for TVM, and one note per
    rewritten layer: all its steps as one ``Recurrence`` node (float32 layers), or
    unrolled into plain operators (``sequence_kernels=False``, and other dtypes). Needs static
    input shapes (run shape inference first). Layers inside ``If`` branches are rewritten in
    their branch (the branch stays control flow)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    layers = [f"{n.op_type} {where + (n.name or n.output[0])!r}" for n, where in _layers(model.graph)]
    if not layers:
        return out, []
    before = len(_nodes(out.graph))
    replace_nodes(out, lambda node, view: _rewrite(node, view, sequence_kernels), branches=True)
    # value_info of the old outputs stays valid (the names and shapes are kept)
    kernels = sum(n.op_type == RECURRENCE_OP and n.domain == RECURRENCE_DOMAIN for n in _nodes(out.graph))
    if kernels:
        if all(o.domain != RECURRENCE_DOMAIN for o in out.opset_import):
            out.opset_import.append(helper.make_opsetid(RECURRENCE_DOMAIN, 1))
        how = f"every step of a layer in one kernel ({kernels} in all)"
    else:
        how = "unrolled into plain operators"
    note = (f"{len(layers)} recurrent layer(s) rewritten for TVM, {how} ({', '.join(layers)}; "
            f"{before} -> {len(_nodes(out.graph))} nodes)")
    return out, [note]


__all__ = ["RECURRENCE_DOMAIN", "RECURRENCE_OP", "RECURRENT_OPS", "SUPPORTED_ACTIVATIONS", "RecurrentLayerError", "has_recurrent_layers", "rewrite_recurrent"]
