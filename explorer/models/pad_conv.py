"""Zero ``Pad`` nodes folded into the convolutions that read them.

Keras pads before a strided convolution with a ``ZeroPadding2D`` layer (EfficientNet's and
MobileNet V2/V3's stride-2 depthwise convolutions, asymmetric: one row and column after, or one
before and two after), and tf2onnx writes it as a ``Pad`` node feeding the ``Conv`` (or feeding a
``Transpose`` that feeds it, where the model stayed NHWC). TVM imports the ``Pad`` as a kernel of
its own: a copy of the whole activation (EfficientNet-B0's 112x112x96, 4.8 MB each way) whose only
use is the convolution after it, which reads padded inputs by itself. Here such a ``Pad`` goes and
its amounts join the convolution's ``pads`` (same output: the padded values are zeros either way).

:func:`fold_pads_into_convs` folds a ``Pad`` when it is constant-mode with a zero (or no) value,
its amounts are constants (or computed from constants: :meth:`explorer.models.onnx_rewrite.GraphView.constant`),
non-negative and zero on the batch and channel axes (as the convolution sees them), its output is no
graph output and is read by no subgraph (an ``If`` branch, a ``Loop`` body), and every reader is a
``Conv`` reading it as data with explicit ``pads`` (``auto_pad`` unset or ``VALID``) - directly, or
through a single ``Transpose`` whose readers are all such ``Conv`` nodes (the amounts then follow the
permutation). Anything else is left as it is. The nodes and initializers that made a folded ``Pad``'s
amounts go with it where nothing else reads them.
"""

from __future__ import annotations

import onnx
from onnx import helper

from explorer.models.onnx_rewrite import GraphView


def _subgraph_reads(graph: onnx.GraphProto) -> set[str]:
    """Every name a node inside a subgraph of ``graph`` (an ``If`` branch, a ``Loop`` or ``Scan``
    body, at any depth) reads: those of the graph around it among them."""
    names: set[str] = set()
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names.update(i for n in sub.node for i in n.input)
                names.update(o.name for o in sub.output)
                names |= _subgraph_reads(sub)
    return names


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _decoded(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pad_amounts(node: onnx.NodeProto, view: GraphView) -> list[int] | None:
    """The ``Pad``'s amounts (all begins, then all ends) where it pads with zeros, else None."""
    attrs = _attrs(node)
    if _decoded(attrs.get("mode", "constant")) != "constant":
        return None
    if view.opset < 11:
        pads, value = attrs.get("pads"), float(attrs.get("value", 0.0))
    else:
        amounts = view.constant(node.input[1]) if len(node.input) > 1 else None
        if amounts is None or (len(node.input) > 3 and node.input[3]):
            return None  # amounts computed at run time, or only some axes padded (opset 18's axes)
        pads = amounts.tolist()
        value = 0.0
        if len(node.input) > 2 and node.input[2]:
            fill = view.constant(node.input[2])
            if fill is None or fill.size != 1:
                return None
            value = float(fill.reshape(()))
    if pads is None or value != 0.0 or any(int(p) < 0 for p in pads):
        return None
    return [int(p) for p in pads]


def _conv_readers(name: str, nodes: list[onnx.NodeProto], readers: dict[str, list[int]]) -> list[int] | None:
    """The indices of the ``Conv`` nodes reading ``name`` as their data, if those are all its readers
    and each has explicit pads; else None."""
    found = readers.get(name, [])
    if not found:
        return None
    for index in found:
        node = nodes[index]
        auto_pad = _decoded(_attrs(node).get("auto_pad", "NOTSET"))
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or list(node.input).count(name) != 1 \
                or node.input[0] != name or auto_pad not in ("NOTSET", "VALID"):
            return None
    return found


def _set_pads(conv: onnx.NodeProto, begins: list[int], ends: list[int]) -> None:
    """Add ``begins`` and ``ends`` (per spatial axis) to ``conv``'s pads."""
    attrs = _attrs(conv)
    spatial = len(begins)
    old = [int(p) for p in attrs.get("pads", [0] * 2 * spatial)]
    if _decoded(attrs.get("auto_pad", "NOTSET")) == "VALID":
        old = [0] * 2 * spatial
    pads = [old[k] + begins[k] for k in range(spatial)] + [old[spatial + k] + ends[k] for k in range(spatial)]
    kept = [a for a in conv.attribute if a.name not in ("pads", "auto_pad")]
    del conv.attribute[:]
    conv.attribute.extend(kept + [helper.make_attribute("pads", pads)])


def _plans(model: onnx.ModelProto) -> list[tuple[int, int | None, list[int], list[int], list[int]]]:
    """``(pad index, transpose index or None, conv indices, begins, ends per spatial axis)`` for each
    foldable ``Pad`` of ``model``'s main graph."""
    graph = model.graph
    nodes = list(graph.node)
    view = GraphView(model)
    # names nothing may lose: graph outputs, and what If/Loop bodies read from around them
    kept = {o.name for o in graph.output} | _subgraph_reads(graph)
    readers: dict[str, list[int]] = {}
    for index, node in enumerate(nodes):
        for name in node.input:
            readers.setdefault(name, []).append(index)
    plans = []
    for index, node in enumerate(nodes):
        if node.op_type != "Pad" or node.domain not in ("", "ai.onnx") or node.output[0] in kept:
            continue
        amounts = _pad_amounts(node, view)
        if amounts is None or len(amounts) % 2 or len(amounts) < 6:
            continue
        rank = len(amounts) // 2
        begins, ends = amounts[:rank], amounts[rank:]
        after = readers.get(node.output[0], [])
        transpose = after[0] if len(after) == 1 and nodes[after[0]].op_type == "Transpose" else None
        if transpose is not None:
            perm = [int(p) for p in _attrs(nodes[transpose]).get("perm", list(reversed(range(rank))))]
            if nodes[transpose].output[0] in kept or sorted(perm) != list(range(rank)):
                continue
            begins, ends = [begins[p] for p in perm], [ends[p] for p in perm]
        convs = _conv_readers((node if transpose is None else nodes[transpose]).output[0], nodes, readers)
        if convs is None or any(begins[:2]) or any(ends[:2]):
            continue
        plans.append((index, transpose, convs, begins[2:], ends[2:]))
    return plans


def _reads(graph: onnx.GraphProto) -> set[str]:
    return {i for n in graph.node for i in n.input} | {o.name for o in graph.output} | _subgraph_reads(graph)


def _drop_unread(graph: onnx.GraphProto, names: set[str]) -> None:
    """Remove from ``graph`` the initializers and nodes that made ``names`` (the removed Pads' amounts),
    and those that made their inputs, where nothing reads them any more."""
    made = set(names)
    while True:
        read = _reads(graph)
        dead = [n for n in graph.node if set(n.output) & made and not set(n.output) & read]
        if not dead:
            break
        for node in dead:
            made.update(node.input)
            graph.node.remove(node)
    unread = made - _reads(graph) - {i.name for i in graph.input}
    kept = [i for i in graph.initializer if i.name not in unread]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def fold_pads_into_convs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` with each foldable zero ``Pad`` folded into its convolutions (see the
    module docstring), and a note saying how many; a model with none comes back unchanged."""
    plans = _plans(model)
    if not plans:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = list(out.graph.node)
    for index, transpose, convs, begins, ends in plans:
        pad = nodes[index]
        for conv in convs:
            _set_pads(nodes[conv], begins, ends)
        for reader in ([transpose] if transpose is not None else convs):  # now reading the unpadded tensor
            nodes[reader].input[0] = pad.input[0]
    gone = {index for index, *_ in plans}
    dropped = {nodes[k].output[0] for k in gone} | {nodes[t].output[0] for _, t, *_ in plans if t is not None}
    amounts = {name for k in gone for name in nodes[k].input[1:]}
    del out.graph.node[:]
    out.graph.node.extend(n for k, n in enumerate(nodes) if k not in gone)
    kept_info = [vi for vi in out.graph.value_info if vi.name not in dropped]  # shapes change: inferred again
    del out.graph.value_info[:]
    out.graph.value_info.extend(kept_info)
    _drop_unread(out.graph, amounts)  # the Pads' own amounts
    return out, [f"{len(plans)} zero Pad nodes folded into the convolutions that read them"]


__all__ = ["fold_pads_into_convs"]
