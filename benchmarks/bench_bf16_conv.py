"""Benchmark: one convolution (+ bias + ReLU) at a time, the default fp32 build against the bf16 one.

Each shape is a one-conv ONNX model built twice for this machine by :func:`export.build.build`
(schedx's default schedules, no records): ``fp32`` and ``bf16`` (:mod:`explorer.precision`: on an
AMX-BF16 CPU the direct NHWC kernel, :mod:`explorer.passes.bf16_conv_nhwc`, elsewhere the im2col
one), whatever :func:`explorer.passes.bf16_conv.why_fp32` says (the cut is what this measures:
``--min-reduction 1`` converts every convolution). The convolution kernel of each (conv + bias +
ReLU fused; not the transposes around it, which cancel between convolutions in a model) is timed
in alternated rounds (the machines here are shared), medians and best; the bf16 model's error
against the fp32 one, relative to the output's largest magnitude. Run: ``python -m benchmarks.bench_bf16_conv [--rounds 7] [--min-reduction 1] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np

# name: (C_in, C_out, input side, kernel, stride, pad): ResNet's and MobileNetV2's shapes around the cut
SHAPES = {"resnet_stem_7x7s2": (3, 64, 224, 7, 2, 3), "mobilenet_stem_3x3s2": (3, 32, 224, 3, 2, 1),
          "1x1_16to96_112": (16, 96, 112, 1, 1, 0), "1x1_24to144_56": (24, 144, 56, 1, 1, 0),
          "1x1_32to64_56": (32, 64, 56, 1, 1, 0), "resnet_down_1x1s2_64to128": (64, 128, 56, 1, 2, 0),
          "resnet_down_1x1s2_128to256": (128, 256, 28, 1, 2, 0), "3x3_64to64_56": (64, 64, 56, 3, 1, 1),
          "3x3_512to512_7": (512, 512, 7, 3, 1, 1)}


def conv_model(c: int, o: int, side: int, k: int, s: int, p: int):
    """A one-conv (+ bias + ReLU) ONNX model, He-initialised weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, (2 / (c * k * k)) ** 0.5, (o, c, k, k)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, o).astype("float32"), "b")
    out = (side + 2 * p - k) // s + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["a"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, out, out])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _conv_kernels(built):
    """The built model's kernels but its layout transposes (one convolution kernel, or a Winograd
    one's transforms and product), each compiled on its own with random arguments of its buffers'
    shapes: ``(names, a timer of their summed time)``. The transposes around the convolution are
    left out: in a model they cancel between consecutive convolutions."""
    import tvm

    rng = np.random.default_rng(2)
    names, timers = [], []
    for gv, func in built.lowered.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc) or gv.name_hint.startswith("transpose"):
            continue
        lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=built.target.tvm())
        args = []
        for buf in func.params:  # (TVM 0.27: the buffers themselves)
            shape, dtype = [int(d) for d in buf.shape], str(buf.dtype)
            data = rng.standard_normal(shape).astype("float32")
            args.append(tvm.runtime.tensor(data if dtype == "float32" else (data.view("uint32") >> 16).astype(dtype)))
        timer = lib.jit().time_evaluator("main", tvm.cpu(), number=20, repeat=1)
        names.append(gv.name_hint)
        timers.append((timer, args))
    return names, (lambda: sum(timer(*args).mean for timer, args in timers))


def _model_output(built, x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(built.executable, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(v) for v in built.param_values]).numpy()


def bench(name: str, rounds: int) -> dict:
    import onnx

    from explorer.target import host_target
    from explorer.workload import load_workload
    from export.build import build

    c, o, side, k, s, p = SHAPES[name]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        onnx.save(conv_model(c, o, side, k, s, p), path)
        workload, target = load_workload(str(path)), host_target()
        builds = {precision: build(workload, target, precision=precision) for precision in ("fp32", "bf16")}
    x = np.random.default_rng(1).standard_normal((1, c, side, side)).astype("float32")
    ref, got = _model_output(builds["fp32"], x), _model_output(builds["bf16"], x)
    kernels = {precision: _conv_kernels(b) for precision, b in builds.items()}
    times = {precision: [] for precision in kernels}
    for _ in range(rounds):  # alternated: each round times both kernels once
        for precision, (_, timed) in kernels.items():
            times[precision].append(timed())
    med = {precision: statistics.median(t) for precision, t in times.items()}
    return {"conv": name, "K": c * k * k, "fp32_ms": round(med["fp32"] * 1e3, 4), "bf16_ms": round(med["bf16"] * 1e3, 4),
            "bf16_over_fp32": round(med["bf16"] / med["fp32"], 2),
            "best_ratio": round(min(times["bf16"]) / min(times["fp32"]), 2),
            "kernels": {precision: kernel for precision, (kernel, _) in kernels.items()},
            "rel_error": float(f"{np.abs(got - ref).max() / np.abs(ref).max():.2e}")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"shapes to time (default: all): {', '.join(SHAPES)}")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-reduction", type=int, default=None,
                    help="convert convolutions from this reduction on (default: the rule's cuts)")
    opts = ap.parse_args()
    if opts.min_reduction is not None:
        from explorer.passes import bf16_conv

        bf16_conv.MIN_REDUCTION = bf16_conv.MIN_REDUCTION_DIRECT = opts.min_reduction
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    rows = [bench(name, opts.rounds) for name in opts.names or SHAPES]
    after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"uptime_before": uptime, "uptime_after": after, "results": rows}, indent=1))


if __name__ == "__main__":
    main()
