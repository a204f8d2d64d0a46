"""The precision of a build, a property of it as its target is: ``fp32`` (the model as written),
``bf16`` (the products with weights in bf16, fp32 accumulation, the rest in fp32) or ``int8`` (the
model quantized by ``schedx quantize``'s flow and built as that QDQ model is:
:mod:`explorer.models.int8_precision`).

:func:`for_precision` makes the workload as built at a precision once; the workload it returns
carries its :class:`Precision` (``Workload.precision``), and every later call with it (the
chooser of records, the build) takes it as it is instead of rewriting or quantizing it again.

``bf16`` rewrites a model's 2-D convolutions (:mod:`explorer.passes.bf16_conv`: an implicit GEMM
over the output pixels, or direct from the NHWC input on a CPU with AMX-BF16 tiles or a fast
``vdpbf16ps``) and matmuls (:mod:`explorer.passes.bf16_dense`) with constant weights:
weights rounded and packed once, at build time; activations rounded once per kernel; attention's
products of two activations too (:mod:`explorer.passes.bf16_attention`: both rounded per call); and
needs a CPU with AVX512-BF16 or AMX-BF16 (:mod:`explorer.schedule.bf16_dot`); it is refused,
with the reason, for other targets and for single kernels. Kept in fp32: :data:`KEPT_FP32`, and
the convolutions whose reduction is too short for bf16 to pay (listed, with why, per build:
:func:`explorer.passes.bf16_conv.why_fp32`), and every convolution on a CPU whose bf16
instruction is ``vdpbf16ps`` alone unless it was measured here to do 1.5x the fp32 FMA rate
(:func:`explorer.passes.bf16_conv.why_convs_fp32`: on the Intel CPU measured it does half, on a Zen 5
1.8-1.95x).

A bf16 build is verified against the fp32 reference at :data:`BF16_TOLERANCE` per output
(relative to that output's largest magnitude): rounding both operands of a product to bf16's 8
significant bits gives errors of about 2^-9 per operand; a sum of K such products with random
signs stays under 1e-2 of the output's scale (measured 2.5e-3 on 768- and 1024-long products).
Deep models add such errors layer after layer, and no rule by a layer's shape says where the sum
passes the tolerance (maxvit_t: 22 attention blocks and 11 MBConvs in series, the error spread over
its early weight products, its convolutions and its classifier, 1.0-1.36e-2 on 8 inputs; OpenVINO's
bf16 1.31e-2): a build can keep :data:`MATMULS_FP32` instead (``for_precision(..., matmuls_fp32=True)``;
:func:`with_matmuls_fp32` from a bf16 build, what an export builds where the bf16 bundle fails verification:
:mod:`export.flow`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from explorer.errors import ExplorerError
from explorer.passes.conv_groups_limit import MAX_GROUPS

PRECISIONS = ("fp32", "bf16", "int8")
BF16_TOLERANCE = 1e-2
ATTENTION_IN_BF16 = "; attention's QK^T and PV run in bf16: both operands rounded at run time"  # not with MATMULS_FP32
KEPT_FP32 = ("element-wise work (bias, activations, residual adds)", "softmax", "layer and batch normalisation",
             "reductions and pooling", "recurrent state",
             f"depthwise and grouped convolutions (on AMX-BF16, not those of at most {MAX_GROUPS} groups each a bf16 "
             "convolution: explorer.passes.conv_groups)",
             "products of two activations whose shapes the bf16 kernel does not take, and weight products whose "
             f"shape does not pay on the CPU's bf16 instructions (listed per build{ATTENTION_IN_BF16})")
# the class a bf16 build keeps in fp32 where its bundle failed verification: the one that carried most
# of maxvit_t's error (all its matmuls in fp32: 4.1-5.2e-3 on 8 inputs, against 6.9-11.9e-3 with all its
# convolutions in fp32 instead and 1.03-1.36e-2 with neither; 1 thread 81.1 against 71.7 ms)
MATMULS_FP32 = ("every matmul (weight products and attention's products): the build with them in bf16 missed "
                "the bf16 tolerance on its sample input, so they were built again in fp32")
INT8_KEPT_FLOAT = ("what ONNX Runtime's quantizer leaves in float (its QDQ model's float nodes)",
                   "grouped and dilated convolutions, computed in float between dequantize and quantize")


DEFAULT_SAMPLES = 16  # int8's calibration samples: `schedx quantize --calibrate`'s default


@dataclasses.dataclass(frozen=True)
class Calibration:
    """How an int8 build calibrates: ``samples`` inputs (``--calibrate``), random unless ``data``
    names an .npz file with one array per model input (``--data``: the first ``samples`` calibrate,
    the rest measure the accuracy lost). Part of what an int8 build is, as the precision is: a
    search job keeps it with its spec."""

    samples: int = DEFAULT_SAMPLES
    data: str | None = None

    def to_dict(self) -> dict:
        return {"samples": self.samples, "data": self.data}

    @classmethod
    def from_dict(cls, data: dict | None) -> Calibration:
        data = data or {}
        return cls(samples=int(data.get("samples") or DEFAULT_SAMPLES), data=data.get("data"))


class PrecisionError(ExplorerError):
    """A precision this build cannot have (unknown, or the target lacks the instructions)."""


@dataclasses.dataclass(frozen=True)
class Precision:
    """What a build's precision means: its name, the tolerance its outputs are verified at (None:
    the dtype's own), and what stays in fp32."""

    name: str
    tolerance: float | None
    kept_fp32: tuple[str, ...] = ()
    converted: int = 0  # products computed in bf16
    quantization: dict | None = None  # int8: the quantizer's report (the int8 model against the float one)
    matmuls_fp32: bool = False  # bf16: every matmul kept fp32 (MATMULS_FP32), the build's second try
    # bf16: the ordinals of convolutions kept fp32 because their bf16 kernel could not be scheduled, and the
    # kernels that failed, with why (explorer.passes.bf16_conv_retry; with_convs_fp32)
    convs_fp32: tuple[int, ...] = ()
    convs_fp32_why: str = ""
    # bf16: the Relax module as written, before the rewrite (what with_matmuls_fp32 builds again from)
    written: object | None = dataclasses.field(default=None, compare=False, repr=False)
    # bf16: each packed convolution weight constant of the build -> its convolution's ordinal
    packed_from: Mapping = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def untiled_line(self) -> str:
        """The line for the convolutions kept fp32 because their bf16 kernel could not be tiled ("": none)."""
        if not self.convs_fp32:
            return ""
        n = len(self.convs_fp32)
        return (f"{n} convolution{'s' if n > 1 else ''} computed in fp32: the default schedule could not tile "
                f"{'their' if n > 1 else 'its'} bf16 kernel (without its bf16 tile it runs many times slower than "
                f"fp32): {self.convs_fp32_why}")

    def to_dict(self) -> dict:
        d = {"name": self.name, "tolerance": self.tolerance, "kept_fp32": list(self.kept_fp32),
             "converted_products": self.converted}
        if self.quantization is not None:
            d["quantization"] = dict(self.quantization)
        if self.matmuls_fp32:
            d["matmuls_fp32"] = True
        if self.convs_fp32:
            d["convs_fp32"] = list(self.convs_fp32)
        return d


def check_precision(name: str, target) -> None:
    """Raise :class:`PrecisionError` unless ``target`` can build at precision ``name``."""
    if name not in PRECISIONS:
        raise PrecisionError(f"unknown precision {name!r}: use one of {', '.join(PRECISIONS)}")
    if name in ("fp32", "int8"):  # int8: built as a QDQ model is, for any target (int8 kernels where the CPU has them)
        return
    from explorer.schedule.bf16_dot import why_not

    why = why_not(target.features, target.arch) if target.cpu_rules else "it is not a CPU target"
    if why:
        raise PrecisionError(f"--precision bf16 needs a CPU with AVX512-BF16 or AMX-BF16; {target.label}: {why}. "
                             f"Build it in fp32, or name a CPU that has them (cpu:sapphirerapids, cpu:znver4)")


def refusal(name: str, target, kind: str = "model", what: str = "the workload") -> str:
    """Why a workload of ``kind`` (``model`` or ``kernel``; ``what``: its name) cannot be built for
    ``target`` at precision ``name``: the message :class:`PrecisionError` carries, "" where it can
    (what a page shows beside a disabled choice, before anything is loaded)."""
    try:
        check_precision(name, target)
    except PrecisionError as err:
        return str(err)
    if name == "int8" and kind != "model":
        return (f"--precision int8 quantizes models (ONNX Runtime's quantizer); {what} is a single kernel, "
                f"built as written")
    if name != "fp32" and kind != "model":
        return (f"--precision {name} applies to models (their products with constant weights); "
                f"{what} is a single kernel, built in fp32 as written")
    return ""


def for_precision(workload, target, name: str = "fp32", calibration=None, *, matmuls_fp32: bool | None = None,
                  convs_fp32: tuple[tuple[int, ...], str] = ((), "")):
    """``(workload, precision)``: ``workload`` as built at precision ``name`` for ``target`` (a new
    workload for bf16: its weight products rewritten, none of its matmuls where ``matmuls_fp32``:
    :data:`MATMULS_FP32`; for int8: its QDQ model, quantized with ``calibration``, a
    :class:`Calibration`), and what that precision means. A workload already built at ``name``
    (one this function returned) comes back as it is, unless ``matmuls_fp32`` asks for other matmuls
    than it was built with (refused: :func:`with_matmuls_fp32` builds it again from the model as written).
    ``convs_fp32``: the ordinals of convolutions a bf16 build keeps fp32, and why (:func:`with_convs_fp32`)."""
    done = getattr(workload, "precision", None)
    if done is not None:
        if done.name != name:
            raise PrecisionError(f"{workload.name} is already built at {done.name}, not {name}: give the model as "
                                 f"written")
        if matmuls_fp32 is not None and bool(matmuls_fp32) != done.matmuls_fp32:
            raise PrecisionError(f"{workload.name} is already built at bf16 with its matmuls in "
                                 f"{'fp32' if done.matmuls_fp32 else 'bf16'}: give the model as written")
        return workload, done
    why = refusal(name, target, workload.kind, workload.name)
    if why:
        raise PrecisionError(why)
    if name == "fp32":
        return workload, Precision("fp32", None)
    if name == "int8":
        return _int8(workload, calibration, target)
    matmuls_fp32 = bool(matmuls_fp32)
    ordinals, why = convs_fp32
    packed_from: dict = {}
    mod, converted, kept = bf16_module(workload.mod, target, matmuls_fp32=matmuls_fp32,
                                       convs_fp32=frozenset(ordinals), packed_from=packed_from)
    note = () if converted else ("no product with constant weights to compute in bf16: the model runs in fp32",)
    always = tuple(k.replace(ATTENTION_IN_BF16, "") for k in KEPT_FP32) if matmuls_fp32 else KEPT_FP32
    precision = Precision("bf16", BF16_TOLERANCE, always + kept, converted, matmuls_fp32=matmuls_fp32,
                          convs_fp32=tuple(sorted(ordinals)), convs_fp32_why=why, written=workload.mod,
                          packed_from=packed_from)
    if precision.untiled_line:
        precision = dataclasses.replace(precision, kept_fp32=precision.kept_fp32 + (precision.untiled_line,))
    return (dataclasses.replace(workload, mod=mod, _fused=None, notes=tuple(workload.notes) + note,
                                precision=precision), precision)


def with_matmuls_fp32(workload, target):
    """``(workload, precision)``: a workload :func:`for_precision` built at bf16 with matmuls in bf16,
    built again from its module as written (kept on its :class:`Precision`: no reload of its spec)
    with every matmul in fp32 (:data:`MATMULS_FP32`)."""
    done = getattr(workload, "precision", None)
    if done is None or done.name != "bf16" or done.matmuls_fp32 or done.written is None:
        raise PrecisionError(f"{workload.name} is not a bf16 build with its matmuls in bf16: nothing to build again")
    written = dataclasses.replace(workload, mod=done.written, precision=None, _fused=None)
    return for_precision(written, target, "bf16", matmuls_fp32=True, convs_fp32=(done.convs_fp32, done.convs_fp32_why))


def with_convs_fp32(workload, target, ordinals, kernels: str):
    """``(workload, precision)``: a workload :func:`for_precision` built at bf16, built again from its
    module as written with the convolutions ``ordinals`` (and those it kept fp32 so already) in fp32:
    the default schedule could not tile their bf16 kernels (``kernels``: which, and why, for the line
    its precision keeps), which would run tens of times slower than fp32
    (:mod:`explorer.passes.bf16_conv_retry`)."""
    done = getattr(workload, "precision", None)
    if done is None or done.name != "bf16" or done.written is None:
        raise PrecisionError(f"{workload.name} is not a bf16 build: no convolution to build again in fp32")
    every = tuple(sorted(set(done.convs_fp32) | set(ordinals)))
    why = "; ".join(x for x in (done.convs_fp32_why, kernels) if x)
    written = dataclasses.replace(workload, mod=done.written, precision=None, _fused=None)
    return for_precision(written, target, "bf16", matmuls_fp32=done.matmuls_fp32, convs_fp32=(every, why))


def int8_kept_float(target) -> tuple[str, ...]:
    """What an int8 build for ``target`` (None: this machine) computes in float: what the quantizer
    leaves, and every convolution and matmul where the target has no int8 kernels (a CPU without int8
    dot-product instructions, or a device: QDQToInt8Kernels leaves the QDQ model as it is there)."""
    from explorer.passes.qdq_int8 import int8_kernels_for

    if target is None:
        from explorer.target import host_target

        target = host_target()
    if int8_kernels_for(target):
        return INT8_KEPT_FLOAT
    where = "a CPU without int8 dot-product instructions" if target.cpu_rules else "a device build"
    return INT8_KEPT_FLOAT[:1] + (f"every convolution and matmul, computed in float between dequantize and quantize "
                                  f"(no int8 kernels for {target.spec}: {where})",)


def _int8(workload, calibration, target):
    """The int8 build of a workload for ``target``: its QDQ model (quantized, or from the cache) as a workload."""
    from explorer.models.int8_precision import int8_workload
    from explorer.models.quantize import QuantizeError

    try:
        built, quantization = int8_workload(workload, calibration or Calibration())
    except QuantizeError as err:
        raise PrecisionError(str(err)) from err
    precision = Precision("int8", None, int8_kept_float(target), quantization=quantization)
    return dataclasses.replace(built, precision=precision), precision


def bf16_module(mod, target=None, *, matmuls_fp32: bool = False, convs_fp32: frozenset[int] = frozenset(),
                packed_from: dict | None = None):
    """``(mod, converted, kept)``: a model's Relax module with its convolutions and matmuls by
    constant weights rewritten to bf16 for ``target`` (None: this machine; on a CPU with AMX-BF16
    tiles, or vdpbf16ps measured to pay for them, the convolutions the direct kernel fits run direct in
    NHWC, others through an im2col: :func:`explorer.passes.bf16_conv.why_convs_fp32`), how many
    were, and lines for what stayed fp32 by size or by the target's instructions: the
    convolutions too short (:func:`explorer.passes.bf16_conv.why_fp32`), the weight products whose shape does not pay on
    the target's bf16 instructions (:func:`explorer.passes.bf16_dense.why_fp32`: the compute-bound ones only where
    the target's measured vdpbf16ps rate makes convolutions pay too, one rate for both); ``matmuls_fp32``:
    no matmul rewritten (:data:`MATMULS_FP32`, listed); ``convs_fp32`` and ``packed_from``: as
    :func:`explorer.passes.bf16_conv.bf16_convs` takes them. The caller checks the target first."""
    from explorer.passes.bf16_conv import bf16_convs, fold_batch_norms, has_convs, vdpbf16ps_pays, why_convs_fp32
    from explorer.passes.bf16_dense import bf16_products, kept_in_fp32
    from explorer.passes.conv_groups import convs_by_group
    from explorer.passes.conv_rows import convs_on_tiled_rows
    from explorer.schedule.bf16_dot import isa_from

    if target is None:
        from explorer.target import host_target

        target = host_target()
    isa = isa_from(target.features, target.arch) if target.cpu_rules else ""
    folded = None
    if isa == "amx" and has_convs(mod):  # batch norms folded once, for both rewrites (each would fold them)
        folded = fold_batch_norms(mod)
        # convolutions whose rows the direct kernel cannot tile: over rows it can (rewritten from the folded module)
        mod, tiled = convs_on_tiled_rows(mod, folded=folded)
        folded = mod if tiled else folded  # a rewrite of the folded module: folding it again changes nothing
        # grouped convolutions whose groups the direct kernel takes in bf16: one convolution per group
        grouped, split = convs_by_group(folded, folded=folded)
        mod, folded = (grouped, grouped) if split else (mod, folded)
    all_fp32 = why_convs_fp32(target, mod)  # no bf16 convolution pays on this target's instructions
    # vdpbf16ps measured at the rate where compute-bound convolutions pay: compute-bound products pay too
    fast_vectors = isa == "avx512bf16" and vdpbf16ps_pays(target)
    mod, convs, short = bf16_convs(mod, amx=isa == "amx", vectors=fast_vectors, folded=folded, fp32=convs_fp32,
                                   packed_from=packed_from) \
        if all_fp32 is None else (mod, 0, ())
    if matmuls_fp32:
        return mod, convs, ((all_fp32,) if all_fp32 else ()) + _short_convs(short) + (MATMULS_FP32,)
    mod, products, small = bf16_products(mod, isa=isa or None, fast_vectors=fast_vectors)
    return mod, convs + products, ((all_fp32,) if all_fp32 else ()) + _short_convs(short) + kept_in_fp32(small)


def _short_convs(why: tuple[str, ...]) -> tuple[str, ...]:
    """One line for the convolutions :func:`explorer.passes.bf16_conv.why_fp32` kept in fp32."""
    if not why:
        return ()
    from collections import Counter

    shapes = ", ".join(f"{w.split(':')[0]}" + (f" x{n}" if n > 1 else "") for w, n in Counter(why).items())
    # the cut each line names: MIN_REDUCTION, or MIN_REDUCTION_DIRECT where the direct kernel would take it
    cuts = " or ".join(sorted({w.split(" < ")[1].split(",")[0] for w in why}, key=int))
    return (f"{len(why)} convolution(s) with a reduction C_in*kh*kw < {cuts}, too short for bf16 to pay: "
            f"{shapes}",)


__all__ = ["BF16_TOLERANCE", "DEFAULT_SAMPLES", "INT8_KEPT_FLOAT", "int8_kept_float", "KEPT_FP32", "MATMULS_FP32",
           "PRECISIONS", "Calibration", "Precision", "PrecisionError", "bf16_module", "check_precision",
           "for_precision", "refusal", "with_matmuls_fp32"]
