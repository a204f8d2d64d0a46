"""Zero ``Pad`` nodes folded into the convolutions that read them.

Keras pads before a strided convolution with a ``ZeroPadding2D`` layer (EfficientNet's and
MobileNet V2/V3's stride-2 depthwise convolutions, asymmetric: one row and column after, or one
before and two after), and tf2onnx writes it as a ``Pad`` node feeding the ``Conv`` (or feeding a
``Transpose`` that feeds it, where the model stayed NHWC). TVM imports the ``Pad`` as a kernel of
its own: a copy of the whole activation (EfficientNet-B0's 112x112x96, 4.8 MB each way) whose only
use is the convolution after it, which reads padded inputs by itself. Here such a ``Pad`` goes and
its amounts join the convolution's ``pads`` (same output: the padded values are zeros either way).

:func:`fold_pads_into_convs` folds a ``Pad`` when it is constant-mode with a zero (or no) value,
its amounts are constants, non-negative and zero on the batch and channel axes (as the
convolution sees them), its output is no graph output, and every reader is a ``Conv`` reading it
as data with explicit ``pads`` (``auto_pad`` unset or ``VALID``) - directly, or through a single
``Transpose`` whose readers are all such ``Conv`` nodes (the amounts then follow the permutation).
Anything else is left as it is.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from explorer.models.onnx_rewrite import default_opset


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _decoded(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pad_amounts(node: onnx.NodeProto, constants: dict[str, np.ndarray], opset: int) -> list[int] | None:
    """The ``Pad``'s amounts (all begins, then all ends) where it pads with zeros, else None."""
    attrs = _attrs(node)
    if _decoded(attrs.get("mode", "constant")) != "constant":
        return None
    if opset < 11:
        pads, value = attrs.get("pads"), float(attrs.get("value", 0.0))
    else:
        if len(node.input) < 2 or node.input[1] not in constants or (len(node.input) > 3 and node.input[3]):
            return None  # amounts computed at run time, or only some axes padded (opset 18's axes)
        pads = constants[node.input[1]].tolist()
        value = 0.0
        if len(node.input) > 2 and node.input[2]:
            if node.input[2] not in constants or constants[node.input[2]].size != 1:
                return None
            value = float(constants[node.input[2]].reshape(()))
    if pads is None or value != 0.0 or any(int(p) < 0 for p in pads):
        return None
    return [int(p) for p in pads]


def _conv_readers(name: str, readers: dict[str, list[onnx.NodeProto]]) -> list[onnx.NodeProto] | None:
    """The ``Conv`` nodes reading ``name`` as their data, if those are all its readers and each has
    explicit pads; else None."""
    found = readers.get(name, [])
    if not found:
        return None
    for node in found:
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


def fold_pads_into_convs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` with each foldable zero ``Pad`` folded into its convolutions (see the
    module docstring), and a note saying how many; a model with none comes back unchanged."""
    graph = model.graph
    constants = _constants(graph)
    opset = default_opset(model)
    outputs = {o.name for o in graph.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    plans = []  # (pad node index, transpose node or None, convs, begins per conv axis, ends)
    for index, node in enumerate(graph.node):
        if node.op_type != "Pad" or node.domain not in ("", "ai.onnx") or node.output[0] in outputs:
            continue
        amounts = _pad_amounts(node, constants, opset)
        if amounts is None or len(amounts) % 2 or len(amounts) < 6:
            continue
        rank = len(amounts) // 2
        begins, ends = amounts[:rank], amounts[rank:]
        after = readers.get(node.output[0], [])
        transpose = after[0] if len(after) == 1 and after[0].op_type == "Transpose" else None
        if transpose is not None:
            perm = [int(p) for p in _attrs(transpose).get("perm", list(reversed(range(rank))))]
            if transpose.output[0] in outputs or sorted(perm) != list(range(rank)):
                continue
            begins, ends = [begins[p] for p in perm], [ends[p] for p in perm]
        convs = _conv_readers((transpose or node).output[0], readers)
        if convs is None or any(begins[:2]) or any(ends[:2]):
            continue
        plans.append((index, transpose, convs, begins[2:], ends[2:]))
    if not plans:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = list(out.graph.node)
    by_name = {id(n): k for k, n in enumerate(graph.node)}
    gone = set()
    for index, transpose, convs, begins, ends in plans:
        pad = nodes[index]
        for conv in convs:
            _set_pads(nodes[by_name[id(conv)]], begins, ends)
        if transpose is not None:  # the transpose reads the unpadded tensor
            nodes[by_name[id(transpose)]].input[0] = pad.input[0]
        else:
            for conv in convs:
                nodes[by_name[id(conv)]].input[0] = pad.input[0]
        gone.add(index)
    del out.graph.node[:]
    out.graph.node.extend(n for k, n in enumerate(nodes) if k not in gone)
    dropped = {graph.node[k].output[0] for k in gone} | {t.output[0] for _, t, *_ in plans if t is not None}
    kept_info = [vi for vi in out.graph.value_info if vi.name not in dropped]  # shapes change: inferred again
    del out.graph.value_info[:]
    out.graph.value_info.extend(kept_info)
    read = {name for n in out.graph.node for name in n.input} | {o.name for o in out.graph.output}
    amounts = {name for k in gone for name in graph.node[k].input[1:]} - read  # the Pads' own constants
    kept_inits = [i for i in out.graph.initializer if i.name not in amounts]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept_inits)
    return out, [f"{len(plans)} zero Pad nodes folded into the convolutions that read them"]


__all__ = ["fold_pads_into_convs"]
