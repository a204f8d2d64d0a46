"""``FuseLayoutIntoConv``: a kernel that only changes a tensor's layout (a transpose, alone or fused
with elementwise or other injective steps: a reshape, a slice) and is read by one convolution or
matmul alone becomes part of that kernel, where it copies its input anyway (BERT at bf16: the heads
merged back by a transpose and reshape go into the output projection's packing, 0.75x those two
kernels' time, 1 thread, R3's measurement). So does a kernel of float elementwise or broadcast
steps, with or without injective ones (:data:`FUSE_ELEMENTWISE`): a pre-activation batch norm and ReLU
(DenseNet's, ResNet v2's ``x * scale + shift``, :mod:`explorer.passes.batch_norm_affine`) read by one
convolution is computed in that convolution's padding or bf16 packing, instead of writing a map the
convolution reads back once. Steps that read or write another type (a quantize, a dequantize) stay.

Every NCHW model that schedx computes in NHWC starts with ``transpose(input)`` before its first
convolution, and Relax's ``FuseOps`` never puts a producer into a convolution's group (it fuses an
elementwise or broadcast producer into an injective or reduction consumer only): the transpose stays a
kernel of its own, whose 0.6 MB output (224 x 224 x 3 floats) the convolution reads back once, in its
padding block (fp32: TOPI's ``pad_temp``) or its packing block (bf16: the input rounded, padded and
laid out for the product). Fused after ``FuseOps`` into the convolution's group, ``FuseTIR`` makes one
kernel of the two, and the default schedule inlines the transpose into that copy
(:func:`explorer.schedule.defaults.inline.inline_producers`; an fp32 padding then runs by rows,
:mod:`explorer.schedule.defaults.simple`): one kernel launch and one pass over the map less.

Fused only where the convolution's kernel reads the value in spatial blocks alone once the default
schedule has inlined what it inlines (a pad, a packing): a convolution that reads it in its reduction
(an fp32 1x1 without padding) would load it through the transpose at every multiply-add. A quantized
model's image is quantized, transposed and padded in one kernel before an int8 convolution that reads
it in its product: it stays. Runs after ``FuseOps``, before ``FuseTIR``; a CPU rewrite
(:func:`explorer.passes.pass_target.cpu_rewrite`): the decision rests on schedx's CPU schedules.

Measured (Intel Xeon KVM guest, AVX-512 and AMX; transpose + stem conv against the fused stem, default
schedules): 1 thread, CPU time of the kernels alone, 21 alternated rounds, load 0.9-1.0: ResNet-18 bf16
(the AMX direct conv) 0.415 -> 0.378 ms (0.91x), MobileNetV2 bf16 0.192 -> 0.152 (0.79x; its stem is
fp32), fp32 0.194 -> 0.163 (0.82x), ResNet-18 fp32 1.331 -> 1.318 (0.996x); 2 threads in the model
(bundles alternated, 14 rounds with the CPU otherwise idle): 0.297 -> 0.262 ms (0.90x), 0.126 -> 0.101
(0.79x), 0.135 -> 0.115 (0.83x), 0.684 -> 0.706 (1.00x per round); whole models within their noise
(0.98-1.00x). ResNet-18 bf16 again with its stem's output as bf16 bits, 30 rounds: 0.239 -> 0.209 ms (0.87x),
the model 2.514 -> 2.492 ms (0.989x, quartiles 0.959-1.011).
Pre-activation batch norms (bf16, two bundles alternated in one process, outputs bit-identical, other sessions
measuring beside: 2-thread walls inflated): tf_densenet121 (59 of its 62 batch norms join a 1x1 AMX conv's
packing; 200 -> 140 tasks) 2 threads 0.920x and 0.906x (24 idle rounds each), kernel sum 5.98 -> 5.49 ms,
1 thread 0.880x (kernel sum 8.42 -> 7.32); tf_resnet50_v2 2 threads 0.931x, 0.949x, 1 thread 0.901x (kernel
sum 9.53 -> 8.88). An fp32 stride-2 3x3 (its padding copy) after a batch norm: conv + batch norm 0.856 -> 0.813 ms
(1 thread). The zoo's kernel lists (ResNet-18, MobileNetV2 at fp32 and bf16, BERT at bf16) and int8 QDQ models'
are unchanged; tf_efficientnet_b0's input normalisation (a multiply-add on the 224 x 224 x 3 image) joins its stem's
padding copy, and its squeeze-and-excitation squeezes their 1x1 convs (R3: 74 -> 73 kernels at fp32, 77 -> 73 at bf16).
A search may move a fused padding copy inside output-channel tiles, recomputing the steps per tile: it keeps such a
schedule only where it measures faster.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax, s_tir, tirx
from tvm.ir.expr import TensorLoad

from explorer.ir.relax_walk import is_primitive, iter_bindings, kernel_call, use_counts
from explorer.ir.tir_walk import blocks
from explorer.passes.pass_target import cpu_rewrite
from explorer.schedule.defaults.expand_depthwise import expand_depthwise_blocks
from explorer.schedule.defaults.inline import inline_producers

# Relax's operator patterns (AnnotateTIROpPattern's ``op_pattern``)
BROADCAST = 1
INJECTIVE = 2
OUT_ELEMWISE_FUSABLE = 4  # a convolution, a matmul: an epilogue fuses into it
_SPATIAL = 0  # an iteration variable's type: data parallel
# Whether a group of float elementwise or broadcast steps (a pre-activation batch norm and ReLU, with or without a
# reshape) is fused too (the module docstring); only groups with a transpose where False.
FUSE_ELEMENTWISE = True


def _pattern(func) -> int | None:
    value = (func.attrs or {}).get("op_pattern") if isinstance(func, tirx.PrimFunc) else None
    return None if value is None else int(value)


def _permutes(func: tirx.PrimFunc) -> bool:
    """Whether a block of ``func`` copies its input in another order of axes (a transpose)."""
    for block in blocks(func):
        store = block.body
        if not isinstance(store, tirx.BufferStore) or not isinstance(store.value, TensorLoad):
            continue
        stored, loaded = list(store.indices), list(store.value.indices)
        if len(stored) != len(loaded) or not all(isinstance(i, tirx.Var) for i in stored + loaded):
            continue
        order = [next((k for k, s in enumerate(stored) if s.same_as(i)), -1) for i in loaded]
        if sorted(order) == list(range(len(order))) and order != sorted(order):
            return True
    return False


@dataclass(frozen=True)
class _Group:
    """A fused group as a Primitive Relax function of one dataflow block, fresh variables."""

    func: relax.Function

    @property
    def bindings(self) -> list:
        return list(iter_bindings(self.func))

    def kernels(self, mod: tvm.IRModule) -> list[tuple[tirx.PrimFunc, list]]:
        """``(PrimFunc, arguments)`` of every ``call_tir`` of the group, in order."""
        out = []
        for b in self.bindings:
            found = kernel_call(b.value)
            if found is not None:
                out.append((mod[found[0]], found[1]))
        return out


def _group_of(call, mod: tvm.IRModule) -> _Group | None:
    """The fused group a caller's ``call`` runs (a Primitive function, or one ``call_tir`` made
    one), with fresh variables; None for anything else."""
    if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.GlobalVar):
        func = mod[call.op]
        if not isinstance(func, relax.Function) or not is_primitive(func):
            return None
        body = func.body
        if len(body.blocks) != 1 or not isinstance(body.blocks[0], relax.DataflowBlock):
            return None
        return _Group(relax.utils.copy_with_new_vars(func))
    found = kernel_call(call)
    if found is None or len(call.args) != 2:
        return None
    params = [relax.Var(arg.name if isinstance(arg, relax.Var) else f"p{k}", arg.ty) for k, arg in enumerate(found[1])]
    out = relax.Var("gv", call.ty)
    value = relax.Call(call.op, [found[0], relax.Tuple(params)], call.attrs, call.ty_args)
    body = relax.SeqExpr([relax.DataflowBlock([relax.VarBinding(out, value)])], out)
    return _Group(relax.Function(params, body, call.ty, is_pure=True).with_attr("Primitive", True))


def _floats(ty) -> bool:
    """Whether every tensor of a Relax type (a tensor or a tuple of them) holds floating-point values."""
    if isinstance(ty, relax.TupleType):
        return all(_floats(f) for f in ty.fields)
    dtype = str(ty.dtype) if isinstance(ty, relax.TensorType) else ""
    return dtype.startswith("float") or dtype == "bfloat16"


def _copy_step(group: _Group, mod: tvm.IRModule) -> bool:
    """Whether the group only moves or maps data (every kernel elementwise, broadcast or injective) and
    one of its kernels transposes, or one computes (elementwise or broadcast) and the group reads and writes
    floats alone (a pre-activation batch norm and its ReLU, with the reshape of a map to conv_rows' row:
    :data:`FUSE_ELEMENTWISE`; not a quantize or dequantize step, nor a reshape alone, which is a view once
    ``RewriteDataflowReshape`` has run)."""
    kernels = group.kernels(mod)
    if not kernels or len(kernels) != len(group.bindings):
        return False
    if any(_pattern(f) is None or _pattern(f) > INJECTIVE for f, _ in kernels):
        return False
    if any(_permutes(f) for f, _ in kernels):
        return True
    # (reshapes alone: a view; a squeeze is "broadcast" to AnnotateTIROpPattern, so a group of squeezes and
    # reshapes of a few values, tf_efficientnet_b0's squeeze-and-excitation, joins its conv: a copy less, harmless)
    if not FUSE_ELEMENTWISE or all(_pattern(f) > BROADCAST for f, _ in kernels):
        return False
    # floats in, out and between: a quantize -> dequantize pair inside the group (ortq_cnn_qdq) stays apart
    return (all(_floats(p.ty) for p in group.func.params) and _floats(group.func.ret_ty)
            and all(_floats(b.var.ty) for b in group.bindings))


def _kept_copy_reads(func: tirx.PrimFunc, index: int) -> bool:
    """Whether, once the default schedule has inlined what it inlines
    (:func:`explorer.schedule.defaults.inline.inline_producers`), ``func`` reads its parameter
    ``index`` in spatial blocks alone (a pad, a packing), never in a reduction. Not a kernel the
    default schedules by a rule of its own, which inlines nothing it does not expect (an expansion
    computed by bands inside its depthwise conv: a transpose there stayed a serial loop nest)."""
    from explorer.workload.keys import owned_task_module  # (explorer.workload runs the pipelines: on first use)

    sch = s_tir.Schedule(owned_task_module(func))
    if expand_depthwise_blocks(sch) is not None:
        return False
    inline_producers(sch)
    scheduled = sch.mod["main"]
    buffer = scheduled.params[index]
    reading = [b for b in blocks(scheduled) if any(r.source.same_as(buffer) for r in b.reads)]
    return bool(reading) and all(int(iv.iter_type) == _SPATIAL for b in reading for iv in b.iter_vars)


def _copies_input(group: _Group, index: int, mod: tvm.IRModule) -> bool:
    """Whether the group's parameter ``index`` goes to a convolution or a matmul alone (a kernel an
    epilogue fuses into), which copies it (see :func:`_kept_copy_reads`)."""
    param = group.func.params[index]
    readers = [(f, args) for f, args in group.kernels(mod) if any(a.same_as(param) for a in args)]
    if len(readers) != 1 or sum(a.same_as(param) for a in readers[0][1]) != 1:
        return False
    func, args = readers[0]
    if _pattern(func) != OUT_ELEMWISE_FUSABLE:
        return False
    return _kept_copy_reads(func, next(k for k, a in enumerate(args) if a.same_as(param)))


def _merged(producer: _Group, consumer: _Group, index: int) -> relax.Function:
    """One group: the producer's steps, then the consumer's, which read the producer's result where
    they read their parameter ``index``."""
    steps = producer.bindings
    if not steps[-1].var.same_as(producer.func.body.body):
        raise ValueError("a fused group's result is not its last step")
    param = consumer.func.params[index]
    value = relax.DataflowVar(param.name, param.ty)
    reading = consumer.func.bind_params({param: value})
    bindings = steps[:-1] + [relax.VarBinding(value, steps[-1].value)] + list(iter_bindings(reading))
    body = relax.SeqExpr([relax.DataflowBlock(bindings)], reading.body.body)
    return relax.Function(list(producer.func.params) + list(reading.params), body, consumer.func.ret_ty,
                          is_pure=True, attrs=consumer.func.attrs)


def _arguments(call) -> list | None:
    """What a caller passes a fused group (a Primitive function's call, or a ``call_tir``'s inputs)."""
    if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.GlobalVar):
        return list(call.args)
    found = kernel_call(call)
    return None if found is None else found[1]


def _name(call) -> str:
    op = call.op if isinstance(call.op, tvm.ir.GlobalVar) else call.args[0]
    name = op.name_hint
    return name[len("fused_"):] if name.startswith("fused_") else name


class _Fuser:
    """Rewrites the callers of one module; new groups go to its ``builder``."""

    def __init__(self, mod: tvm.IRModule) -> None:
        self.mod = mod
        self.builder = relax.BlockBuilder(mod)
        self.taken = {gv.name_hint for gv in mod.functions}
        self.fused = 0

    def _add(self, func: relax.Function, name: str) -> tvm.ir.GlobalVar:
        unique, k = name, 0
        while unique in self.taken:
            k += 1
            unique = f"{name}{k}"
        self.taken.add(unique)
        return self.builder.add_func(self.builder.normalize(func), unique)

    def _fuse(self, call, values: dict, uses: dict, dropped: set):
        """The consumer ``call`` with a layout change or elementwise step it alone reads fused into it, else None."""
        args = _arguments(call)
        consumer = None
        for k, arg in enumerate(args or ()):
            made = values.get(arg) if isinstance(arg, relax.Var) and uses.get(arg, 0) == 1 else None
            producer = _group_of(made, self.mod) if made is not None else None
            if producer is None or not _copy_step(producer, self.mod):
                continue
            consumer = consumer or _group_of(call, self.mod)
            if consumer is None or not _copies_input(consumer, k, self.mod):
                continue
            gv = self._add(_merged(producer, consumer, k), f"fused_{_name(made)}_{_name(call)}")
            dropped.add(arg)
            self.fused += 1
            return relax.Call(gv, _arguments(made) + args[:k] + args[k + 1:])
        return None

    def rewrite(self, func: relax.Function) -> relax.Function:
        uses = use_counts(func)
        new_values, dropped = {}, set()
        for block in func.body.blocks:  # a producer in its consumer's block only (dataflow vars stay inside)
            values = {b.var: b.value for b in block.bindings}
            for b in block.bindings:
                if isinstance(b, relax.VarBinding) and isinstance(b.value, relax.Call):
                    new = self._fuse(b.value, values, uses, dropped)
                    if new is not None:
                        new_values[b.var] = new
        if not new_values:
            return func
        out_blocks = []
        for block in func.body.blocks:
            bindings = [relax.VarBinding(b.var, new_values[b.var]) if b.var in new_values else b
                        for b in block.bindings if b.var not in dropped]
            kind = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
            out_blocks.append(kind(bindings))
        body = relax.SeqExpr(out_blocks, func.body.body)
        return relax.Function(func.params, body, func.ret_ty, is_pure=func.is_pure, attrs=func.attrs)


def fuse_layout_into_conv(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` (after ``FuseOps``) with each layout change or float elementwise step read by one convolution
    alone fused into that convolution's group (see the module docstring); ``mod`` itself where there is none."""
    fuser = _Fuser(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function) and not is_primitive(func):
            fuser.builder.update_func(gv, fuser.builder.normalize(fuser.rewrite(func)))
    return fuser.builder.get() if fuser.fused else mod


@tvm.transform.module_pass(opt_level=0, name="FuseLayoutIntoConv")
@cpu_rewrite
def FuseLayoutIntoConv(mod: tvm.IRModule, target) -> tvm.IRModule:  # noqa: N802 - named as TVM names passes
    """A transpose, or float elementwise steps, read by one convolution alone, fused into its group (see the
    module docstring)."""
    return fuse_layout_into_conv(mod)


__all__ = ["FuseLayoutIntoConv", "fuse_layout_into_conv"]
