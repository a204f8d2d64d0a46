"""Named Relax pipelines: what ``tvm.compile`` runs, the tuning pipeline, the CUDA one, or a
custom list of passes from the catalogue.

A pipeline is built for a target because several of TVM's pipelines read it (the CUDA pipeline
applies dlight GPU schedules, FoldConstant compiles with it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import tvm
from tvm import relax

from explorer.errors import PipelineError
from explorer.passes.catalog import make_pass

# the targets the pipelines run for, as explorer.target spells them: a generic CPU, dlight's GPU
CPU_TARGET = '{"kind": "llvm"}'
CUDA_TARGET = "cuda"

# FuseLayoutIntoConv right after FuseOps: a transpose read by one convolution or matmul alone (an NCHW model's
# input), or float elementwise steps (a pre-activation batch norm and ReLU), joins that convolution's group,
# which copies its input anyway (explorer.passes.layout_into_conv).
# MarkWeightBuffers last: each kernel learns which arguments are weights (a schedule may read
# them packed, computed once at build time: export.weight_layouts); it changes the kernels' keys.
# DispatchSortScan first: LegalizeOps has no lowering for sort, argsort and topk (a k-nearest-
# neighbours layer's TopK failed the build with "CodeGenVM cannot emit this Relax operator").
# TopKBySelection before it: on a CPU a TopK with a small k becomes a parallel selection kernel
# (explorer.passes.topk_select); a device build's dispatch keeps its own sort (a cpu_rewrite pass).
TUNING_PASSES: tuple[str, ...] = (
    "TopKBySelection", "DispatchSortScan", "LegalizeOps", "AnnotateTIROpPattern", "FoldConstant", "FuseOps", "FuseLayoutIntoConv", "FuseTIR",
    "DeadCodeElimination", "MarkWeightBuffers",
)
# The graph for inference before fusion: batch-norm folded into the convolution's weights and a
# bias (its tuple output no longer stops conv + bias + activation (+ residual) from being one
# kernel), what is left of batch-norm made elementwise, clips made Relax operators again, and the
# constant arithmetic done once here (numpy), so that no kernel recomputes weights per call.
# QDQToInt8Kernels comes first, while a quantized model's weights are still int8 constants under a
# dequantize (any folding would turn them into floats): its convolutions and matmuls become int8
# kernels with int32 accumulation (explorer.passes.qdq_int8); other models are left as they are.
# SimplifyInference drops what ONNX graphs carry and ConvertLayout fails on (dropout, Sum as
# stack + sum); the first numpy folding turns weights written as expressions into constants,
# which FoldBatchnormToConv2D needs to see. DropDeadConvTaps needs the folded weights (constants).
# A batch-norm that follows no convolution (after a bias add, DenseNet's pre-activations) is
# decomposed into a tuple whose get-item ended the fused group before its relu: CanonicalizeBindings
# folds the get-item, and the relu joins the kernel.
# BatchNormAsScaleShift first makes such a batch-norm one multiply-add by constants (no divide).
_PREPARE: tuple[str, ...] = (
    "QDQToInt8Kernels", "SimplifyInference", "FoldConstantNumpy", "FoldBatchnormToConv2D", "BatchNormAsScaleShift", "DecomposeOpsForInference", "CanonicalizeBindings", "FoldConstantNumpy", "DropDeadConvTaps", "TransposedConvAsPixelShuffle", "ClipToRelaxOps", "ConstantPadToRelaxOp",
)
# FastMathTransform and FastActivations: exp, erf, tanh, softmax, sigmoid, SiLU, GELU, sine and cosine as
# vectorizable polynomials (libm's expf/erff are a scalar call per element: BERT's GELU matmul 14.8 ->
# 6.7 ms, its softmax 0.73 -> 0.27 ms; outputs within the export's tolerance of ONNX Runtime, which
# approximates them too). After the layout conversion: what they emit is a call_tir, which
# ConvertLayout cannot see through (it would wrap each in transposes).
_FAST_MATH: tuple[str, ...] = ("FastMathTransform", "FastActivations", "ConcatAsCopies")

# ... and with NHWC data / HWIO weights (the weights transposed once, here): the channel axis that
# a default schedule vectorizes is innermost. ConvertLayout must come after the numpy folding:
# right after FoldBatchnormToConv2D (weights still an expression) TVM segfaults. Models TVM
# cannot convert keep their layouts (explorer.passes.layout).
# SinkTransposes cancels the transposes left around kernels that run in NHWC inside an NCHW graph
# (int8 ones); PadConvOutputChannels needs the channels last and the weights folded, and so does
# WinogradConv3x3 (3x3 stride-1 convolutions as Winograd products: their weights transformed once);
# GateIntoConvWeights (an SE gate scaling a 1x1 conv's weights, not the map) too, after both: the
# weights it scales are no longer constants.
# Those four (and QDQToInt8Kernels) rewrite for a CPU's vectors and caches: in a device build's task
# pipeline, which runs under the device's target, they leave the module as it is
# (explorer.passes.pass_target.cpu_rewrite).
INFERENCE_PASSES: tuple[str, ...] = (_PREPARE + ("ConvertLayoutNHWC", "FoldConstantNumpy", "SinkTransposes",
                                                 "PadConvOutputChannels", "WinogradConv3x3", "GateIntoConvWeights",
                                                 "ExpandIntoDepthwise")
                                     + _FAST_MATH + TUNING_PASSES)
INFERENCE_NCHW_PASSES: tuple[str, ...] = _PREPARE + _FAST_MATH + TUNING_PASSES
# What schedx tunes and exports: its PrimFuncs are the tasks (explorer.workload.fusion).
TASK_PIPELINE = "inference"


@dataclass(frozen=True)
class PipelineSpec:
    """A named pipeline: a title for people, a target kind, and how to build the pass."""

    name: str
    title: str
    description: str
    target: str  # an explorer.target spelling
    build: Callable[[tvm.target.Target], tvm.transform.Pass]
    passes: tuple[str, ...] = ()  # set for a custom list of catalogue passes

    def to_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "description": self.description,
                "target": self.target}


def _sequential(names: Sequence[str], label: str) -> tvm.transform.Pass:
    return tvm.transform.Sequential([make_pass(n) for n in names], name=label)


PIPELINES: dict[str, PipelineSpec] = {
    p.name: p
    for p in [
        PipelineSpec(
            "inference", "Inference (folded batch-norm, NHWC, fusion)",
            "Batch-norm folded into the convolutions, clips as Relax ops, NHWC/HWIO layouts with the weights "
            "transposed at build time, then LegalizeOps .. FuseTIR and MarkWeightBuffers: the module schedx "
            "tunes and exports (its fused kernels are the tasks).",
            CPU_TARGET, lambda t: _sequential(INFERENCE_PASSES, "inference")),
        PipelineSpec(
            "inference-nchw", "Inference, NCHW (folded batch-norm, fusion)",
            "The inference pipeline without the layout conversion: batch-norm folded, the model's own NCHW "
            "layouts, then fusion.",
            CPU_TARGET, lambda t: _sequential(INFERENCE_NCHW_PASSES, "inference-nchw")),
        PipelineSpec(
            "tuning", "Fusion only",
            "TopKBySelection, DispatchSortScan, LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseLayoutIntoConv, FuseTIR, "
            "DeadCodeElimination, MarkWeightBuffers on the graph as imported: batch-norm stays its own kernels, layouts as the model "
            "has them.",
            CPU_TARGET, lambda t: _sequential(TUNING_PASSES, "tuning")),
        PipelineSpec(
            "cpu-default", "tvm.compile on CPU",
            "The pipeline tvm.compile runs for an llvm target (relax.get_pipeline('default')): "
            "legalizes and lowers to the VM, fuses nothing and schedules nothing.",
            CPU_TARGET, lambda t: relax.get_pipeline("default")),
        PipelineSpec(
            "cpu-backend", "CPU backend (with fusion)",
            "relax.get_default_pipeline(llvm): library dispatch, legalization with fusion, "
            "dataflow lowering and memory planning.",
            CPU_TARGET, lambda t: relax.get_default_pipeline(t)),
        PipelineSpec(
            "cuda", "CUDA backend (dlight)",
            "relax.get_default_pipeline(cuda): fusion, then dlight's default GPU schedules "
            "(Matmul, GEMV, Reduction, GeneralReduction, Fallback), then lowering.",
            CUDA_TARGET, lambda t: relax.get_default_pipeline(t)),
    ]
}


def get_pipeline(name: str) -> PipelineSpec:
    """The named pipeline, or a :class:`PipelineError` listing the names."""
    try:
        return PIPELINES[name]
    except KeyError:
        raise PipelineError(f"unknown pipeline {name!r}; choose one of: {', '.join(PIPELINES)}") from None


def resolve_passes(names: Sequence[str] | str) -> PipelineSpec:
    """A custom pipeline from pass names (a list, or one comma-separated string).

    Every name is checked before anything runs, so a typo costs nothing."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    names = [n for n in names if n]
    if not names:
        raise PipelineError("a custom pipeline needs at least one pass")
    for n in names:
        make_pass(n)  # validates the name up front
    fixed = tuple(names)
    return PipelineSpec("custom", "Custom: " + ", ".join(fixed), "Passes chosen by the user, in order.",
                        CPU_TARGET, lambda t: _sequential(fixed, "custom"), passes=fixed)
