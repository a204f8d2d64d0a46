"""schedx's own ONNX operators, which rewrites leave for the importer, converted to Relax.

A rewrite before import (:mod:`explorer.models.recurrent`) may replace a node by one that TVM's
importer has no converter for, because what it stands for is best written as one hand-written
kernel: ``ai.schedx`` ``Recurrence`` (a recurrent layer's steps) becomes a ``call_tir`` of the
kernel :mod:`explorer.schedule.defaults.recurrence` writes for its spec. The tracing importer
(:mod:`explorer.graph.onnx_names`) asks :func:`convert_custom` before TVM's converter table.
"""

from __future__ import annotations

from tvm import relax

from explorer.schedule.defaults.recurrence_cpu import cpu_recurrence
from explorer.schedule.defaults.recurrence_spec import RecurrenceSpec
from explorer.models.recurrent import RECURRENCE_OP

CUSTOM_OPS = frozenset({RECURRENCE_OP})


def _recurrence(bb: relax.BlockBuilder, inputs: list, attrs: dict) -> relax.Expr:
    spec_text = attrs["spec"]
    spec = RecurrenceSpec.from_json(spec_text.decode() if isinstance(spec_text, bytes) else str(spec_text))
    args = [x for x in inputs if x is not None]
    if len(args) != len(spec.input_names()):
        raise ValueError(f"Recurrence node: {len(args)} inputs, its spec needs {', '.join(spec.input_names())}")
    func = cpu_recurrence(spec)  # any CPU runs it; a build swaps in the variant for its target
    gv = bb.add_func(func, f"{spec.op.lower()}_sequence")
    # a second layer of another spec gets a new name (lstm_sequence1): its symbol must follow, else
    # the module holds two "lstm_sequence" symbols and the build refuses it (tf2onnx's stacked LSTMs)
    if bb.get()[gv].attrs.get("global_symbol") != gv.name_hint:
        bb.update_func(gv, func.with_attr("global_symbol", gv.name_hint))
    outs = [relax.TensorType(shape, spec.dtype) for shape in spec.output_shapes()]
    return bb.emit(relax.call_tir(gv, args, outs))


def convert_custom(op_name: str, bb: relax.BlockBuilder, inputs: list, attrs: dict) -> relax.Expr | None:
    """The Relax expression for one of schedx's own nodes, else None (TVM's converters apply)."""
    if op_name == RECURRENCE_OP:
        return _recurrence(bb, list(inputs), attrs)
    return None


__all__ = ["CUSTOM_OPS", "convert_custom"]
