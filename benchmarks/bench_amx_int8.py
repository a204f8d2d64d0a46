"""Benchmark: int8 convolutions on AMX-INT8 tiles against the vector instructions (vpdpbusd), one
kernel at a time: the default schedule for this CPU (AMX where the rule's cut lets it) and the one
without AMX (vpdpbusd), each checked exactly
against numpy, then timed in alternated rounds (medians). The figures behind
``explorer.schedule.defaults.int8_amx``'s cut (docs/notes/measurements.md, "AMX-INT8").

Run: ``python -m benchmarks.bench_amx_int8 [--rounds 5]`` on a CPU with AMX-INT8.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

# output side, stride, input channels, output channels, kernel size: ResNet-18's stages, then small ones
SHAPES = [(56, 1, 64, 64, 3), (28, 2, 64, 128, 3), (28, 1, 128, 128, 3), (14, 2, 128, 256, 3), (14, 1, 256, 256, 3),
          (7, 2, 256, 512, 3), (7, 1, 512, 512, 3), (8, 1, 64, 64, 3), (28, 2, 64, 128, 1), (14, 2, 128, 256, 1),
          (7, 2, 256, 512, 1), (28, 1, 128, 128, 1), (14, 1, 256, 64, 1), (32, 1, 64, 64, 1), (8, 1, 128, 64, 1),
          # few channels, a kernel row folded into K (a stem's 3 channels padded to 4; 16-channel 3x3s; 5x5 of 8)
          (112, 2, 4, 64, 7), (56, 2, 4, 64, 7), (16, 2, 4, 64, 7), (56, 1, 16, 64, 3), (28, 1, 16, 32, 3),
          (28, 1, 8, 32, 5)]


def conv(size: int, stride: int, cin: int, cout: int, kernel: int):
    """The QDQ pass's conv2d_nhwc_int8 kernel, random inputs and the exact numpy result."""
    from tvm import te

    from explorer.passes.qdq_int8 import conv2d_nhwc_int8

    side = (size - 1) * stride + kernel
    x_shape, w_shape = (1, side, side, cin), (cout // 16, kernel, kernel, cin // 4, 16, 4)
    x, w = te.placeholder(x_shape, "uint8", name="X"), te.placeholder(w_shape, "int8", name="W")
    func = te.create_prim_func([x, w, conv2d_nhwc_int8(x, w, stride, stride, size, size, 127)])
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 256, x_shape).astype("uint8")
    ws = rng.integers(-128, 128, w_shape).astype("int8")
    plain = ws.transpose(0, 4, 1, 2, 3, 5).reshape(cout, kernel, kernel, cin).astype(np.int64)
    end = (size - 1) * stride + 1
    ref = sum(np.einsum("nhwc,oc->nhwo", xs[:, a:a + end:stride, b:b + end:stride].astype(np.int64), plain[:, a, b])
              for a in range(kernel) for b in range(kernel))
    return func, [xs, ws, np.zeros(ref.shape, "int32")], ref


def main() -> None:
    import tvm

    from explorer.schedule.defaults import default_schedule
    from explorer.target import parse_target

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="", help="only the shapes whose input channels are at most this")
    opts = parser.parse_args()
    target = parse_target("cpu")
    amx = target.cpu_spec()
    if not amx.int8_amx:
        raise SystemExit("this CPU has no AMX-INT8 (amx-int8 not in its features)")
    specs = {"amx": amx, "vnni": dataclasses.replace(amx, int8_amx=False)}
    for size, stride, cin, cout, kernel in SHAPES:
        if opts.only and cin > int(opts.only):
            continue
        func, args, ref = conv(size, stride, cin, cout, kernel)
        timers, steps = {}, {}
        for name, spec in specs.items():
            scheduled, choice = default_schedule(func, spec)
            lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=target.tvm())
            nd = [tvm.runtime.tensor(a) for a in args]
            lib(*nd)
            if not np.array_equal(nd[2].numpy(), ref):
                raise SystemExit(f"{name} {size}px {cin}->{cout}: not exact")
            evaluator = lib.jit().time_evaluator("main", tvm.cpu(), number=20, repeat=1)
            timers[name], steps[name] = (lambda e=evaluator, a=nd: e(*a).mean * 1e3), choice.steps[0]
        times = {name: [] for name in specs}
        for _ in range(opts.rounds):
            for name, timer in timers.items():
                times[name].append(timer())
        a, v = np.median(times["amx"]), np.median(times["vnni"])
        gops = 2 * size * size * cout * cin * kernel * kernel / 1e6
        print(f"{kernel}x{kernel} {cin}->{cout} @{size} s{stride}: default {a:.4f} ms ({gops / a:.0f} GOPS), "
              f"vpdpbusd {v:.4f} ms ({gops / v:.0f} GOPS), {v / a:.2f}x; the default: {steps['amx'].split(' (')[0]}",
              flush=True)


if __name__ == "__main__":
    main()
