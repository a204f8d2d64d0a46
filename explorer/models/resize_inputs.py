"""``Resize`` inputs that are empty tensors dropped, as ONNX allows and TVM's importer needs.

ONNX's ``Resize`` takes either ``scales`` or ``sizes``; an exporter may fill the one it does not
use with an empty tensor instead of leaving the input out (paddle2onnx writes
``Resize(x, roi=[], scales=[], sizes=Concat(...))`` for every up-sampling of a PaddleOCR DB
detector). ONNX reads an empty ``scales`` as absent; TVM 0.27's importer sees two inputs and
refuses the node ("Only one of scales and sizes can be provided in Resize").
:func:`drop_empty_resize_inputs` leaves such an input out (an empty name), the ``roi`` too when it
is empty; the model computes the same values. (Before opset 13 ONNX asks for the empty ``scales``
and ``roi`` themselves, so there the rewritten node is the form only TVM's importer reads: ONNX
Runtime checks the model as an opset-11 one and refuses it.)
"""

from __future__ import annotations

import onnx

from explorer.models.onnx_rewrite import GraphView


def _empty(view: GraphView, name: str) -> bool:
    value = view.constant(name) if name else None
    return value is not None and value.size == 0


def drop_empty_resize_inputs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` whose main-graph ``Resize`` nodes name no empty ``roi``/``scales``/``sizes``
    beside the one they use, and a note; a model with none comes back unchanged, with no note."""
    resizes = [n for n in model.graph.node if n.op_type == "Resize" and len(n.input) >= 3]
    if not resizes:
        return model, []
    view = GraphView(model)
    fixes = {}
    for node in resizes:
        names = list(node.input) + [""] * (4 - len(node.input))
        roi, scales, sizes = names[1:4]
        if sizes and not _empty(view, sizes) and _empty(view, scales):
            names[2] = ""
        elif scales and not _empty(view, scales) and _empty(view, sizes):
            names[3] = ""
        if _empty(view, roi):
            names[1] = ""
        while names and not names[-1]:
            names.pop()
        if names != list(node.input):
            fixes[node.name or node.output[0]] = names
    if not fixes:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.op_type == "Resize" and (node.name or node.output[0]) in fixes:
            del node.input[:]
            node.input.extend(fixes[node.name or node.output[0]])
    return out, [f"{len(fixes)} Resize nodes: empty roi/scales/sizes inputs left out"]


__all__ = ["drop_empty_resize_inputs"]
