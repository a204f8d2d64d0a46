"""Turn an ONNX model with static input shapes into one TVM's importer takes.

Each step is an ONNX-to-ONNX rewrite that keeps the model's meaning (ONNX Runtime gives the
same outputs before and after), and each says what it did in a note. First, ``Identity`` nodes
are bypassed (:mod:`explorer.models.identity_bypass`: paddle2onnx puts one behind every constant)
and empty ``Resize`` inputs left out (:mod:`explorer.models.resize_inputs`); then shape arithmetic
the fixed input shapes decide (``Shape -> Gather -> Range``, sizes of a ``Reshape``, ``Expand``,
``Split`` or ``Resize``) is folded to constants (:mod:`explorer.models.shape_fold`); then:

1. ``If`` nodes whose condition the shapes or constants fix are folded to the branch taken
   (:mod:`explorer.models.control_flow`), and ``Loop`` nodes whose trip count they fix are unrolled
   (:mod:`explorer.models.loop_unroll`; a ``while`` loop on the data without scan outputs is kept, for
   :mod:`explorer.models.loop_relax` to import as a recursive Relax function; the others are refused,
   naming what sets the count), a
   ``while`` loop whose condition is a counter (tf2onnx's ``tf.while_loop``) first given the trip
   count its condition gives (:mod:`explorer.models.while_count`);
2. ONNX Runtime's dynamically quantized LSTMs become LSTMs of their dequantized weights
   (:mod:`explorer.models.dynamic_lstm`), its other dynamic quantization operators standard ones
   (:mod:`explorer.models.dynamic_quant`), then LSTM, GRU and RNN layers are unrolled over the
   fixed sequence length (:mod:`explorer.models.recurrent`);
3. quantized operators in ONNX Runtime's QOperator form (QLinearConv, QLinearMatMul) and its
   contrib Quantize/DequantizeLinear become standard QDQ (:mod:`explorer.models.qdq`);
4. signal operators (STFT, DFT, window generators) become products by constant Fourier matrices
   (:mod:`explorer.models.spectral`);
5. zero ``Pad`` nodes before convolutions are folded into their padding
   (:mod:`explorer.models.pad_conv`);
6. every node left is checked against what TVM's importer takes
   (:mod:`explorer.models.onnx_ops`), so an unsupported one is named before conversion.
"""

from __future__ import annotations

import onnx

from explorer.models.control_flow import enclosing_branches, fold_branches, fold_constants
from explorer.models.dynamic_lstm import dequantize_dynamic_lstm
from explorer.models.dynamic_quant import rewrite_dynamic_quantization
from explorer.models.identity_bypass import bypass_identities
from explorer.models.loop_unroll import unroll_loops
from explorer.models.resize_inputs import drop_empty_resize_inputs
from explorer.models.while_count import count_while_loops
from explorer.models.onnx_ops import check_operators
from explorer.models.pad_conv import fold_pads_into_convs
from explorer.models.qdq import rewrite_qoperators
from explorer.models.shape_fold import fold_shape_arithmetic
from explorer.models.spectral import has_spectral_ops, rewrite_spectral
from explorer.models.recurrent import (
    RecurrentLayerError,
    has_recurrent_layers,
    rewrite_recurrent,
)


def _infer(model: onnx.ModelProto, *, data_prop: bool = False) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=data_prop)
    except Exception:  # noqa: BLE001 - inference is a help, not a requirement
        return model


def prepare_for_tvm(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """The model TVM's importer should be given for ``model`` (input shapes already fixed), and
    notes on every rewrite made; raises ``UnsupportedOperatorError`` naming a node none of the
    rewrites covers."""
    notes: list[str] = []
    model, bypassed = bypass_identities(model)  # paddle2onnx's Identity(Constant): shapes flow through
    notes += bypassed
    model, resized = drop_empty_resize_inputs(model)  # Resize(x, [], [], sizes): paddle2onnx's
    notes += resized
    model, shapes_folded = fold_shape_arithmetic(_infer(model))
    notes += shapes_folded
    model, folded = fold_branches(model)
    notes += folded
    model, counted = count_while_loops(model)  # tf2onnx's tf.while_loop: a counter, its trip count found
    notes += counted
    model, unrolled = unroll_loops(model)
    notes += unrolled
    model, dequantized = dequantize_dynamic_lstm(model)
    notes += dequantized
    model, dynamic = rewrite_dynamic_quantization(model)
    notes += dynamic
    if has_recurrent_layers(model):
        model = _infer(model, data_prop=True)
        try:
            try:
                model, rewritten = rewrite_recurrent(model)
            except RecurrentLayerError as err:
                if "not static" not in str(err):
                    raise
                # the sequence length may be computed by shape arithmetic that folding makes static
                model, rewritten = rewrite_recurrent(_infer(fold_constants(model)))
        except RecurrentLayerError as err:  # in an If branch: say what chooses the branch
            context = enclosing_branches(model, err.where) if err.where else ""
            if not context:
                raise
            raise RecurrentLayerError(err.op_type, err.node_name[len(err.where):], f"{err.why}; {context}",
                                      where=err.where) from err
        notes += rewritten
    model, requant = rewrite_qoperators(model)
    notes += requant
    if has_spectral_ops(model):
        model, spectral = rewrite_spectral(_infer(model, data_prop=True))
        notes += spectral
    model, pads = fold_pads_into_convs(model)  # Keras's ZeroPadding2D before a strided conv: no copy of its own
    notes += pads
    check_operators(model, skip=("Loop",))  # those left are kept as Relax control flow (loop_relax)
    return (_infer(model) if notes else model), notes  # rewritten nodes get their shapes too


__all__ = ["prepare_for_tvm"]
