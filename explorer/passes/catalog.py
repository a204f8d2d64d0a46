"""The Relax passes a user can pick for a custom pipeline, with the arguments schedx gives them.

A pass is named as TVM names it (``FuseOps``, ``ConvertLayout``), so what a user reads here is
what they find in ``tvm.relax.transform``. Passes that need arguments get sensible ones
(``ConvertLayout`` to NHWC, ``ToMixedPrecision`` to fp16 with fp32 accumulation); the summary
says which. Some are schedx's own (:mod:`explorer.passes.fold_numpy`,
:mod:`explorer.passes.clip_ops`, :mod:`explorer.passes.layout`, :mod:`explorer.passes.onnx_idioms`):
they prepare an inference graph for fusion.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import relax

from explorer.errors import PipelineError
from explorer.passes.batch_norm_affine import BatchNormAsScaleShift
from explorer.passes.clip_ops import ClipToRelaxOps
from explorer.passes.conv_channels import PadConvOutputChannels
from explorer.passes.conv_taps import DropDeadConvTaps
from explorer.passes.winograd import WinogradConv3x3
from explorer.passes.sink_transposes import SinkTransposes
from explorer.passes.upsampling_conv import TransposedConvAsPixelShuffle
from explorer.passes.concat_copies import ConcatAsCopies
from explorer.passes.constant_pad import ConstantPadToRelaxOp
from explorer.passes.expand_depthwise import ExpandIntoDepthwise
from explorer.passes.fast_activations import FastActivations
from explorer.passes.fast_math import FastMathTransform
from explorer.passes.fold_numpy import FoldConstantNumpy
from explorer.passes.gate_weights import GateIntoConvWeights
from explorer.passes.layout import NHWC, ConvertLayoutNHWC
from explorer.passes.layout_into_conv import FuseLayoutIntoConv
from explorer.passes.weight_buffers import MarkWeightBuffers
from explorer.passes.qdq_int8 import QDQToInt8Kernels
from explorer.passes.onnx_idioms import SimplifyInference
from explorer.passes.topk_select import TopKBySelection


@dataclass(frozen=True)
class PassSpec:
    """One pass of the catalogue: its TVM name, what it does, and how schedx builds it."""

    name: str
    summary: str
    factory: Callable[[], tvm.transform.Pass]

    def to_dict(self) -> dict:
        return {"name": self.name, "summary": self.summary}


def _t(name: str, summary: str, factory: Callable[[], tvm.transform.Pass] | None = None) -> PassSpec:
    return PassSpec(name, summary, factory or getattr(relax.transform, name))



PASS_CATALOG: dict[str, PassSpec] = {
    p.name: p
    for p in [
        _t("DecomposeOpsForInference", "Rewrite batch_norm, layer_norm and friends into elementwise ops for inference."),
        _t("CanonicalizeBindings", "Remove trivial rebindings (x = y) and fold tuple get-items."),
        _t("FoldBatchnormToConv2D", "Fold a batch_norm that follows a conv2d into the conv's weights and a bias add."),
        _t("BatchNormAsScaleShift", "schedx: a batch-norm no convolution absorbs (pre-activation: BN -> ReLU -> conv) "
           "as one multiply-add per element by constant per-channel scale and shift, not a subtract, divide, multiply "
           "and add (Relay's SimplifyInference / FoldScaleAxis).", lambda: BatchNormAsScaleShift),
        _t("ConvertLayout", "Convert conv2d to NHWC data / HWIO weights (pooling and elementwise ops follow), "
           "inserting layout transforms.", lambda: relax.transform.ConvertLayout(NHWC)),
        _t("ConvertLayoutNHWC", "schedx: ConvertLayout to NHWC/HWIO for models with a conv2d; a model TVM cannot "
           "convert keeps its own layouts instead of failing.", lambda: ConvertLayoutNHWC),
        _t("FoldConstantNumpy", "schedx: evaluate arithmetic and layout ops on constants (folded batch-norm "
           "scales, weight transposes) with numpy, in milliseconds instead of an LLVM build each.", lambda: FoldConstantNumpy),
        _t("SimplifyInference", "schedx: drop dropout, turn ONNX Sum (stack + sum) into adds, drop broadcasts to "
           "the same shape: the graph ConvertLayout and fusion can work on.", lambda: SimplifyInference),
        _t("QDQToInt8Kernels", "schedx: quantized conv2d/matmul (dequantize -> float op) as int8 kernels with int32 "
           "accumulation and weights packed for dot-product instructions, requantized by one multiplier per channel "
           "as ONNX Runtime's fused operators do (QNN's job in Relay).", lambda: QDQToInt8Kernels),
        _t("MarkWeightBuffers", "schedx: tell each kernel which arguments are weights (constants at every "
           "call), so a schedule may read them packed, packed once at build time.", lambda: MarkWeightBuffers),
        _t("ClipToRelaxOps", "schedx: turn Clip/ReLU6 emitted as TensorIR max/min back into Relax maximum/minimum, "
           "so layouts convert through them and they fuse into the convolution.", lambda: ClipToRelaxOps),
        _t("ConstantPadToRelaxOp", "schedx: a constant pad the importer emitted as TensorIR (ONNX Pad: Keras' "
           "ZeroPadding2D before a pool) becomes R.nn.pad again, recognised by equality with TOPI's pad, so "
           "transposes move through it and the pool after it runs NHWC.", lambda: ConstantPadToRelaxOp),
        _t("ToMixedPrecision", "Compute in float16 where safe, accumulating in float32.",
           lambda: relax.transform.ToMixedPrecision(out_dtype="float32")),
        _t("EliminateCommonSubexpr", "Reuse the result of identical computations."),
        _t("DeadCodeElimination", "Remove bindings and functions that nothing uses."),
        _t("FoldConstant", "Evaluate operators whose inputs are all constants, at compile time."),
        _t("CombineParallelMatmul", "Merge matmuls that share an input into one wider matmul."),
        _t("FuseTransposeMatmul", "Fuse a permute_dims feeding a matmul into the matmul."),
        _t("AdjustMatmulOrder", "Reorder chains of matmuls to do less work."),
        _t("RemoveRedundantReshape", "Drop reshapes that do not change the shape."),
        _t("FastMathTransform", "Replace exp, erf, tanh and softmax with fast approximations.",
           lambda: FastMathTransform),
        _t("SinkTransposes", "schedx: move transposes below elementwise ops and pools until they meet their "
           "inverse and vanish (a quantized model's NHWC int8 kernels in an NCHW graph).", lambda: SinkTransposes),
        _t("PadConvOutputChannels", "schedx: a channels-last convolution whose output channels no vector "
           "of the target divides (detection heads: 75, 255, 546; on AVX-512 also 24, 40) computes whole vectors "
           "of zero-padded weights and slices the real channels off.", lambda: PadConvOutputChannels),
        _t("WinogradConv3x3", "schedx: a 3x3 stride-1 convolution on a large enough map as Winograd's F(4x4, 3x3): "
           "input and output tiles transformed by constant matrices, one batched product per tile position, "
           "0.44x the multiply-adds (TOPI's conv2d_winograd in Relay's op strategy).", lambda: WinogradConv3x3),
        _t("GateIntoConvWeights", "schedx: a squeeze-and-excitation gate multiplied into the weights of the 1x1 "
           "convolution that reads the gated map (where the map has more pixels than the weights have "
           "columns), not into the map: one pass over the activations less.", lambda: GateIntoConvWeights),
        _t("ExpandIntoDepthwise", "schedx: a 1x1 expansion (bias, ReLU6) whose map is larger than a core's L2 "
           "computed inside the strided depthwise conv that reads it, by bands of output rows: the map never "
           "leaves the L2.", lambda: ExpandIntoDepthwise),
        _t("DropDeadConvTaps", "schedx: drop the kernel taps of a convolution that only ever read padding "
           "(dilated convolutions on small maps: DeepLabV3's ASPP reads 1 tap of 9).", lambda: DropDeadConvTaps),
        _t("TransposedConvAsPixelShuffle", "schedx: a transposed convolution (upsampling: U-Nets, GAN generators, "
           "decoders, vocoders) as one stride-1 convolution over all its stride x stride phases, a pixel shuffle "
           "and a crop (sub-pixel convolution): TOPI's multiplies zeros inserted between the input's pixels, "
           "3/4 of the work for stride 2, in NCHW.", lambda: TransposedConvAsPixelShuffle),
        _t("ConcatAsCopies", "schedx: a concatenation as one kernel of copies, a block per input: TOPI picks "
           "each element's input with a chain of one test per input, and vectorized, every element loads every "
           "input (an unrolled recurrent layer concatenates its 40-100 steps).", lambda: ConcatAsCopies),
        _t("FastActivations", "schedx: sigmoid, SiLU, GELU, sine and cosine (float32) as fast polynomials: TVM's own call libm "
           "once per element, which LLVM cannot vectorize.", lambda: FastActivations),
        _t("TopKBySelection", "schedx: a TopK with a small k (<= 32, static shapes) as a kernel that keeps each "
           "row's k best in a sorted buffer, updated by vectors, rows in parallel, on a CPU: TVM's dispatch keeps a "
           "heap per row, all rows on one thread (a k-nearest-neighbours layer's top-16 of 512: 0.45x its time on "
           "one thread).", lambda: TopKBySelection),
        _t("DispatchSortScan", "Lower sort, argsort, topk, cumsum and cumprod for the target (TOPI's CPU or GPU "
           "kernels): LegalizeOps has no lowering for sort, argsort and topk.",
           lambda: relax.backend.DispatchSortScan()),
        _t("LegalizeOps", "Lower every high-level Relax operator to a TensorIR PrimFunc called with call_tir."),
        _t("AnnotateTIROpPattern", "Tag each PrimFunc with its operator pattern (elementwise, injective, reduction, ...) for fusion."),
        _t("FuseOps", "Group operators into fused Relax functions by their patterns (conv + bias + relu, ...)."),
        _t("FuseLayoutIntoConv", "schedx: after FuseOps, a transpose read by one convolution or matmul alone (an NCHW model's "
           "input before the first NHWC conv), or float elementwise steps (a pre-activation batch norm and ReLU), "
           "joins that convolution's group, where the conv's pad or packing copy reads through it: one kernel and "
           "one pass over the map less.", lambda: FuseLayoutIntoConv),
        _t("FuseTIR", "Turn each fused Relax function into one fused TensorIR PrimFunc (a kernel)."),
        _t("RewriteDataflowReshape", "Turn reshapes that only reinterpret memory into views."),
        _t("ToNonDataflow", "Leave dataflow blocks: the graph becomes a plain binding sequence."),
        _t("RemovePurityChecking", "Drop purity annotations before lowering to the VM."),
        _t("CallTIRRewrite", "Make call_tir explicit: allocate outputs, then call the PrimFunc."),
        _t("StaticPlanBlockMemory", "Plan and reuse activation memory statically."),
        _t("LowerAllocTensor", "Lower tensor allocations to storage allocations."),
        _t("KillAfterLastUse", "Free tensors right after their last use."),
        _t("LowerRuntimeBuiltin", "Lower builtins to VM runtime calls."),
        _t("ComputePrimValue", "Compute primitive values with helper functions."),
        _t("VMShapeLower", "Lower shape computations to the VM's shape heap."),
        _t("AttachGlobalSymbol", "Give every function its exported symbol."),
        _t("TopologicalSort", "Sort bindings in topological order."),
        _t("Normalize", "Put the module in Relax's normal form."),
    ]
}


def make_pass(name: str) -> tvm.transform.Pass:
    """Build the pass called ``name`` (a catalogue name, or any pass of ``tvm.relax.transform``
    that takes no arguments)."""
    spec = PASS_CATALOG.get(name)
    if spec is not None:
        return spec.factory()
    factory = getattr(relax.transform, name, None)
    if name[:1].isupper() and callable(factory):
        try:
            made = factory()
        except TypeError as err:
            raise PipelineError(f"pass {name!r} needs arguments schedx does not know how to give ({err})") from err
        if isinstance(made, tvm.transform.Pass):
            return made
    choices = ", ".join(PASS_CATALOG)
    raise PipelineError(f"unknown pass {name!r}; known passes: {choices}")
