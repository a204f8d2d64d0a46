"""Activations handed to a bf16 convolution already rounded, by the kernel that computes them.

The direct kernel (:mod:`explorer.passes.bf16_conv_nhwc`, on AMX tiles or ``vdpbf16ps`` vectors) rounds its
fp32 input to bf16 in a packing block of its own: one more pass over the activations, in fp32 (4 bytes a value read, 2
written). Where the input is the output of a convolution's chain (the convolution, its bias, its
activation: MobileNet's depthwise convolutions before their projections, ResNet's first convolution
of a block before its second) and this convolution is its only reader, the rounding moves into that
producer: the graph gets ``to_bits(x)`` (the same rounding to nearest even, so the numbers are
identical) between the two, ``FuseOps`` fuses it into the producer's kernel as one more
element-wise step (after the bias and the activation: a direct kernel's epilogue, or an fp32
kernel's tail), the producer writes 2 bytes a value instead of 4, and the consumer's packing only
pads (or, for a 1x1 convolution whose channels fill whole tile rows, or whose channels are pairs on
vectors, is not there). On AVX512-BF16 vectors (Zen 5, 2 threads, stop 65), with the max pool below:
ResNet-18's stem 0.55 -> 0.39 ms, its pool 0.066 -> 0.026, layer1's convolutions 0.61 / 0.65 -> 0.53 /
0.56 ms (`run.py --profile`), the model 0.95-0.97x in alternated rounds. On AMX:
MobileNetV2 ~3% (depthwise producers); ResNet-18 2-5% at 1 and 2 threads (its blocks' first
convolutions: the producers themselves faster, writing half the bytes; the second ones ~5%).

A producer with other readers (a block's output, read by the next block and its residual add) stays
fp32: it would need both outputs (unless :data:`SHARED_BITS`, off, has every reader take the bits). Between two direct kernels the rounding fuses only once
``SinkTransposes`` has cancelled their transposes without leaving an alias (``y = x``, a step
``FuseOps`` does not fuse through).

A max pool between them (ResNet's stem: conv, bias, ReLU, max pool, then layer1's first convolution
and its residual add) reads the chain's output as bits (:func:`pool_of_bits`): the chain's kernel
writes bf16 (1.6 MB, not 3.2, for ResNet-18's stem) and the pool reads it widened, writing fp32 as
before. The maximum of rounded values is the rounded maximum (rounding is monotone), so the
convolution reading the pool gets the numbers it rounded itself before; the residual add now adds the
rounded values (ResNet-18 at bf16 verifies at 2.63e-3 of ONNX Runtime's output, 2.68e-3 before). Only
where every convolution reading the pool is a bf16 one (which rounds it anyway: not a depthwise or
short-K one kept fp32) and the pool's output is no output of the model; any other reader (the residual
add, an average pool, a concatenation) gets the rounded values. ResNet-18 bf16, 2 threads (bundles
alternated in one process, 14-20 idle rounds a run, order swapped in turn, load 0.9-1.4): wall 0.946x,
0.952x, 0.971x, 0.971x; the stem and the pool 0.365 -> 0.298 and 0.341 -> 0.282 ms (the stem 0.255 ->
0.219, the pool 0.068 -> 0.053).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, te, topi

from explorer.ir.relax_walk import iter_bindings, use_counts
from explorer.schedule.bf16_dot import to_bits, widen

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")
_MAX_POOL = tvm.ir.Op.get("relax.nn.max_pool2d")
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
# the element-wise steps of a chain (bias, batch-norm's scale, activations); a call_tir counts where
# its output has its first input's shape (the legalized maximum and minimum of a relu6)
_STEPS = tuple(tvm.ir.Op.get(f"relax.{name}") for name in ("add", "multiply", "clip", "maximum", "minimum", "nn.relu"))
BITS_NAME = "bf16_bits"
POOL_NAME = "max_pool2d_bits"
# element-wise steps between the producing convolution and the consumer (bias add, max, min: relu6;
# a pre-activation batch-norm's multiply and add, then relu)
MAX_CHAIN = 4
# Max pools read a convolution chain's output as bits where a convolution reads the pool (module
# docstring). False: such a pool and its producer stay fp32, as before
POOL_READS_BITS = True
# A convolution chain's output read by several bindings, each a direct bf16 convolution (which reads bits as
# its producer's) or an element-wise add (any add: a residual add, a bias; it reads them widened back to fp32): the chain
# writes bits and nothing else (:func:`shared_as_bits`; ResNet's block outputs, 6 of ResNet-18's 8). It moves
# the residual adds by the rounding (at most half a bf16 step of each value; ResNet-18 2.73e-3 -> 2.82e-3 of
# ONNX Runtime's output). Off: on Zen 5 (2 threads, vdpbf16ps vectors) ResNet-18 was no faster, 0.993x in 12
# alternated rounds (6 faster), 5.49 against 5.50 ms profiled (layer1 3% faster, layer4 5% slower); not
# measured on AMX, whose faster tiles leave the bytes a larger share. True: block outputs as bits
SHARED_BITS = False
WIDEN_NAME = "bf16_widen"
_ADD = tvm.ir.Op.get("relax.add")


def _input(call: relax.Call):
    """The tensor an element-wise step reads first (a ``call_tir``'s first argument)."""
    if call.op.same_as(_CALL_TIR):
        return call.args[1].fields[0] if len(call.args[1].fields) else None
    return call.args[0] if call.args else None


def _conv_tail(var, bound: dict, uses: dict) -> bool:
    """Whether ``var`` ends a convolution's chain of element-wise steps (each read once)."""
    for _ in range(MAX_CHAIN + 1):
        value = bound.get(var)
        if not isinstance(value, relax.Call) or uses.get(var, 0) != 1:
            return False
        if value.op.same_as(_CONV2D):
            return True
        if not (any(value.op.same_as(op) for op in _STEPS) or value.op.same_as(_CALL_TIR)):
            return False
        var = _input(value)
        if var is None or not tvm_ffi.structural_equal(var.ty, value.ty):  # (a step that reshapes: no chain)
            return False
    return False


def rounded_by_producer(mod: tvm.IRModule) -> set:
    """The variables of ``mod``'s Relax functions that a convolution's chain computes and
    exactly one binding reads (module docstring): where a bf16 convolution reading one may take it
    as bf16 bits (:func:`emit_bits`)."""
    found = set()
    for func in mod.functions.values():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        bound = {b.var: b.value for b in iter_bindings(func) if isinstance(b, relax.VarBinding)}
        uses = use_counts(func)
        found.update(var for var in bound if _conv_tail(var, bound, uses))
    return found


def pools_reading_bits(mod: tvm.IRModule, converts) -> set:
    """The inputs of ``mod``'s max pools that may be bf16 bits rounded by their producer (module
    docstring): a convolution's chain read only by the pool, the pool read by at least one
    convolution and every convolution reading it one that ``converts`` (a predicate on the conv call:
    it becomes a bf16 kernel, which rounds its input anyway), the pool's output no output of the
    function (its values would change by up to half a bf16 step)."""
    found = set()
    for func in mod.functions.values() if POOL_READS_BITS else ():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        bound = {b.var: b.value for b in iter_bindings(func) if isinstance(b, relax.VarBinding)}
        uses = use_counts(func)
        convs: dict = {}  # what a conv reads -> whether every conv reading it converts
        for v in bound.values():
            if isinstance(v, relax.Call) and v.op.same_as(_CONV2D):
                convs[v.args[0]] = convs.get(v.args[0], True) and bool(converts(v))
        outputs = _outputs(func)
        found.update(v.args[0] for var, v in bound.items() if isinstance(v, relax.Call) and v.op.same_as(_MAX_POOL)
                     and convs.get(var) and var not in outputs and _conv_tail(v.args[0], bound, uses))
    return found


def _ends_a_chain(var, bound: dict, uses: dict) -> bool:
    """Whether ``var`` is a convolution or the last step of a convolution's chain (the steps before it each
    read once, ``var`` itself read any number of times)."""
    return _conv_tail(var, bound, {**uses, var: 1})


def shared_as_bits(mod: tvm.IRModule, reads_bits) -> set:
    """The variables of ``mod``'s Relax functions that a convolution's chain computes and that several
    bindings read, each either a convolution ``reads_bits`` (a predicate on the conv call: it becomes a direct
    bf16 kernel reading its input as its producer's bits), reading it as its input, or an element-wise add
    (:data:`SHARED_BITS`); at least one convolution; no output of the function."""
    found = set()
    for func in mod.functions.values() if SHARED_BITS else ():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        bound = {b.var: b.value for b in iter_bindings(func) if isinstance(b, relax.VarBinding)}
        uses, outputs = use_counts(func), _outputs(func)
        readers: dict = {}  # a variable -> (the call reading it, at which argument) of each call reading it
        for value in bound.values():
            for k, arg in enumerate(value.args if isinstance(value, relax.Call) else ()):
                if isinstance(arg, relax.Var):
                    readers.setdefault(arg, []).append((value, k))
        for var in bound:
            reads = readers.get(var, [])
            if var in outputs or uses.get(var, 0) < 2 or len(reads) != uses[var] or not _ends_a_chain(var, bound, uses):
                continue
            convs = [call for call, k in reads if call.op.same_as(_CONV2D) and k == 0 and reads_bits(call)]
            adds = [call for call, _ in reads if call.op.same_as(_ADD)]
            if convs and len(convs) + len(adds) == len(reads):
                found.add(var)
    return found


def add_of_bits(call: relax.Call, shared, bits_of, builder: relax.BlockBuilder) -> relax.Expr | None:
    """``call`` as an add reading the bits of its ``shared`` arguments (``bits_of(arg, builder)``)
    widened back to fp32; None where it is not an add reading any (:func:`shared_as_bits`)."""
    if not call.op.same_as(_ADD) or not any(a in shared for a in call.args):
        return None
    return relax.op.add(*(widened(bits_of(a, builder), builder) if a in shared else a for a in call.args))


def widened(bits: relax.Expr, builder: relax.BlockBuilder) -> relax.Expr:
    """NHWC ``bits`` (uint16) as the fp32 values they hold, in NCHW (an element-wise kernel ``FuseOps`` fuses into
    the reader, a transpose ``SinkTransposes`` cancels against the reader's)."""
    wide = builder.emit(builder.call_te(_widen, bits, primfunc_name_hint=WIDEN_NAME))
    return builder.emit(relax.op.permute_dims(wide, [0, 3, 1, 2]))


def _widen(bits: te.Tensor) -> te.Tensor:
    return te.compute(bits.shape, lambda *i: widen(bits(*i)), name=WIDEN_NAME)


def _outputs(func: relax.Function) -> set:
    """The variables ``func`` returns (alone or in a tuple)."""
    body = func.body.body
    fields = body.fields if isinstance(body, relax.Tuple) else [body]
    values = {b.var: b.value for b in iter_bindings(func) if isinstance(b, relax.VarBinding)}
    out = set()
    for f in fields:
        out.add(f)
        bound = values.get(f)  # ``gv = (a, b)`` bound in the dataflow block
        if isinstance(bound, relax.Tuple):
            out.update(bound.fields)
    return out


def pool_of_bits(call: relax.Call, builder: relax.BlockBuilder, inputs) -> relax.Expr | None:
    """The max pool ``call`` reading its input as bf16 bits (fused into the producer's kernel) where that
    input is one of ``inputs`` (:func:`pools_reading_bits`) and the pool is NCHW or NHWC without ceil
    mode; its output fp32, as before. None: ``call`` left as it is."""
    if not call.op.same_as(_MAX_POOL) or call.args[0] not in inputs:
        return None
    a = call.attrs
    layout = str(a.layout)
    if layout not in ("NCHW", "NHWC") or str(a.out_layout) != layout or a.ceil_mode:
        return None
    nchw = layout == "NCHW"
    x = builder.emit(relax.op.permute_dims(call.args[0], [0, 2, 3, 1])) if nchw else call.args[0]
    ints = lambda values: [int(v) for v in values]  # noqa: E731
    pooled = builder.emit(builder.call_te(_max_pool_bits, emit_bits(x, builder), ints(a.pool_size), ints(a.strides),
                                          ints(a.dilation), ints(a.padding), primfunc_name_hint=POOL_NAME))
    return relax.op.permute_dims(pooled, [0, 3, 1, 2]) if nchw else pooled


def _max_pool_bits(bits: te.Tensor, size, strides, dilation, padding) -> te.Tensor:
    """TOPI's NHWC max pool of the fp32 values of ``bits`` (widened as it reads them)."""
    return topi.nn.pool2d(_widen(bits), size, strides, dilation, padding, "max", False, "NHWC", False)


def _bits(x: te.Tensor) -> te.Tensor:
    return te.compute(x.shape, lambda *i: to_bits(x(*i)), name=BITS_NAME)


def emit_bits(x: relax.Expr, builder: relax.BlockBuilder) -> relax.Expr:
    """``x`` (fp32) rounded to nearest even bf16, as its bits (uint16): an element-wise kernel that
    ``FuseOps`` fuses into ``x``'s producer."""
    return builder.emit(builder.call_te(_bits, x, primfunc_name_hint=BITS_NAME))


__all__ = ["BITS_NAME", "POOL_NAME", "SHARED_BITS", "WIDEN_NAME", "add_of_bits", "emit_bits", "pool_of_bits", "pools_reading_bits",
           "rounded_by_producer", "shared_as_bits", "widened"]
