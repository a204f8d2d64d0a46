"""A bf16 build computes a convolution in fp32 when the default schedule cannot tile its bf16 kernel
(:mod:`explorer.passes.bf16_conv_retry`): the kernel would run as plain loops over bf16 bits, tens of
times slower than fp32 (efficientnet_b0 197 ms against 3.7 when a rule failed). The tile is made to
fail on one convolution of two, as a rule that declines it (NotApplicable) and as one that breaks
(an error: the plain schedule takes the kernel); compile only, for a Zen 5 whose ``vdpbf16ps`` pays
(which only such a machine measures)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from explorer.passes import bf16_conv
from explorer.schedule.defaults import bf16 as bf16_rules
from explorer.schedule.defaults.analysis import NotApplicable
from explorer.target import parse_target
from explorer.workload import load_workload
from tests.cpu_marks import NEEDS_BF16

TARGET = "cpu:znver5"


def _convs(tmp_path, outs: tuple[int, ...] = (64, 32)) -> str:
    """A chain of 3x3 convolutions from 64 channels to each of ``outs`` in turn, a relu between two, at
    14x14 (each a direct bf16 kernel on vdpbf16ps: K = 9 x its input channels >= 432)."""
    rng = np.random.default_rng(3)
    ins = (64, *outs[:-1])
    inits = [numpy_helper.from_array(rng.normal(0, 0.05, (o, i, 3, 3)).astype("float32"), f"w{n}")
             for n, (i, o) in enumerate(zip(ins, outs))]
    nodes, x = [], "x"
    for n in range(len(outs)):
        last = n == len(outs) - 1
        nodes.append(helper.make_node("Conv", [x, f"w{n}"], ["y" if last else f"c{n}"], pads=[1, 1, 1, 1]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"c{n}"], [f"r{n}"]))
            x = f"r{n}"
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, outs[-1], 14, 14])], inits)
    path = tmp_path / f"convs{len(outs)}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def _failing_on_channels(error: type[Exception], channels: int = 32, rule: str = "tile_vector_conv"):
    """The bf16 convolution tile ``rule`` of :mod:`explorer.schedule.defaults.bf16`, raising ``error``
    on the convolution with ``channels`` output channels (its output's last axis, NHWC)."""
    real = getattr(bf16_rules, rule)

    def tile(sch, block, cpu, *args, **kwargs):
        if int(sch.get(block).writes[0].source.shape[-1]) == channels:
            raise error("the tile fails here (made to, by the test)")
        return real(sch, block, cpu, *args, **kwargs)
    return tile


def _bf16_convs(built) -> list[str]:
    return [gv.name_hint for gv, f in built.lowered.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc) and "conv2d_nhwc_bf16" in gv.name_hint]


@pytest.mark.parametrize("target, rule, error", [
    (TARGET, "tile_vector_conv", NotApplicable), (TARGET, "tile_vector_conv", RuntimeError),
    ("cpu:sapphirerapids", "tile_amx_conv", RuntimeError)], ids=["vectors-declined", "vectors-broken", "amx-broken"])
def test_a_convolution_whose_bf16_kernel_cannot_be_tiled_is_built_in_fp32(tmp_path, monkeypatch, target, rule, error):
    """(An AMX tile that declines hands the kernel to the vector tile: still tiled, nothing to retry.)"""
    from export.build import build

    monkeypatch.setattr(bf16_conv, "vdpbf16ps_pays", lambda _target: True)
    target, path = parse_target(target), _convs(tmp_path)
    both = build(load_workload(path), target, precision="bf16")
    assert len(_bf16_convs(both)) == 2 and both.precision.convs_fp32 == ()  # the rule tiles both

    monkeypatch.setattr(bf16_rules, rule, _failing_on_channels(error, rule=rule))
    built = build(load_workload(path), target, precision="bf16")
    assert built.precision.convs_fp32 == (1,)  # the second convolution (of the two, in order)
    assert len(_bf16_convs(built)) == 1, _bf16_convs(built)
    assert built.precision.converted == both.precision.converted - 1
    line = next(k for k in built.precision.kept_fp32 if "could not tile" in k)
    assert line.startswith("1 convolution computed in fp32") and "made to, by the test" in line, line
    assert line in built.warnings  # what `schedx export` prints as a warning
    assert built.workload.precision.convs_fp32 == (1,)  # the workload as built says so too
    # the kernel that computes it now is the fp32 convolution's, under the first rule: no fallback note
    assert built.fallbacks == [], built.fallbacks
    assert built.precision.to_dict()["convs_fp32"] == [1]
    print("\n".join(["kept:", *built.precision.kept_fp32, "warnings:", *built.warnings]))


def test_a_kernel_of_the_first_rule_or_of_other_kernels_is_not_retried(tmp_path, monkeypatch):
    """Nothing is built again where the untiled kernels compute no bf16 convolution (the ordinals of
    a build's packed weights name only its own convolutions)."""
    from explorer.passes.bf16_conv_retry import conv_ordinals, convs_of_kernels
    from explorer.precision import for_precision

    monkeypatch.setattr(bf16_conv, "vdpbf16ps_pays", lambda _target: True)
    workload, precision = for_precision(load_workload(_convs(tmp_path)), parse_target(TARGET), "bf16")
    fused = workload.fused_module()
    kernels = {gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    convs = sorted(k for k in kernels if "conv2d_nhwc_bf16" in k)
    assert sorted(precision.packed_from.values()) == [0, 1]
    assert convs_of_kernels(fused, kernels - set(convs), precision.packed_from) == {}
    per_kernel = convs_of_kernels(fused, convs, precision.packed_from)  # one convolution a kernel, each its own
    assert sorted(per_kernel) == convs and sorted(per_kernel.values()) == [frozenset({0}), frozenset({1})]
    assert list(conv_ordinals(precision.written).values()) == [0, 1]


def test_a_record_given_by_task_name_still_applies_after_the_kernels_are_numbered_anew(tmp_path, monkeypatch):
    """The last convolution's record, named as `schedx export` names it (by the task of the build
    before the retry: ``conv2d_nhwc_bf162``), applies to its kernel in the build that computes the
    first one in fp32, where that kernel is ``conv2d_nhwc_bf161``."""
    from export import TaskSchedule
    from export.build import build
    from explorer.precision import for_precision
    from explorer.schedule.defaults import default_schedule

    monkeypatch.setattr(bf16_conv, "vdpbf16ps_pays", lambda _target: True)
    target, path = parse_target(TARGET), _convs(tmp_path, (64, 48, 32))
    workload, _ = for_precision(load_workload(path), target, "bf16")
    last = next(t for t in workload.tasks() if t.name.endswith("/conv2d_nhwc_bf162"))
    _, choice = default_schedule(last.mod["main"], target.cpu_spec())
    record = TaskSchedule(trace=choice.trace, record_id=11, source="test")

    monkeypatch.setattr(bf16_rules, "tile_vector_conv", _failing_on_channels(RuntimeError, 64))
    built = build(workload, target, {last.name: record}, precision="bf16")
    assert built.precision.convs_fp32 == (0,)
    assert last.name not in {o.task.name for o in built.outcomes}  # numbered anew: the name is another's or none
    applied = [o for o in built.outcomes if o.schedule == "record"]
    assert [(o.task.key, o.record_id) for o in applied] == [(last.key, 11)], \
        [(o.task.name, o.schedule, o.error) for o in built.outcomes]
    assert not any(o.schedule == "failed" for o in built.outcomes)


@NEEDS_BF16
def test_the_bundle_with_a_convolution_in_fp32_after_all_verifies_and_says_so(tmp_path, monkeypatch):
    """Built for this machine (its vdpbf16ps taken to pay), run in a fresh process and checked against
    ONNX Runtime at bf16's tolerance; the manifest lists the convolution kept fp32 and why."""
    from export.flow import export_workload

    monkeypatch.setattr(bf16_conv, "vdpbf16ps_pays", lambda _target: True)
    monkeypatch.setattr(bf16_rules, "tile_vector_conv", _failing_on_channels(NotApplicable, 48))
    report = export_workload(_convs(tmp_path, (64, 48, 32)), "cpu", tmp_path / "bundle", precision="bf16", layers=False)
    assert report.verification.status == "verified", report.verification
    precision = report.manifest["precision"]
    assert precision["convs_fp32"] == [1] and precision["converted_products"] == 2
    assert any(k.startswith("1 convolution computed in fp32") for k in precision["kept_fp32"])
    assert any(w.startswith("1 convolution computed in fp32") for w in report.manifest["warnings"])
