"""Benchmark: a quantized CNN with schedx's int8 kernels against its float model and ONNX Runtime.

For each model: ``schedx quantize`` (ONNX Runtime's quantizer, QDQ), then both the float and the
int8 model exported with default schedules only (no records) and verified, then timed in one run,
alternating: TVM float, TVM int8, ONNX Runtime float and int8 (2 threads). Also the per-kernel
profile of the int8 export (which schedule each kernel got, its GOPS). Prints the machine and its
int8 dot-product instruction set (``explorer.schedule.int8_dot``) first.

Run: ``python -m benchmarks.bench_int8 [--models resnet18 small_cnn] [--runs 20]``.
Figures are ratios measured in this run; the machines here are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.bench_models import bundle, machine, out


def bench(model: str, opts, target, tmp: Path) -> dict:
    from explorer.models.quantize import quantize_model
    from explorer.workload import load_workload
    from export.bench import alternate, bundle_row, ort_row
    from export.profile import profile_workload

    float_wl = load_workload(model)
    qpath = tmp / f"{model}.int8.onnx"
    _, report = quantize_model(float_wl.onnx_model, calibrate=4, eval_samples=2, runs=5, budget_s=0.2, output=qpath)
    int8_wl = load_workload(str(qpath))
    start = time.perf_counter()
    float_dir = bundle(float_wl, target, tmp / f"{model}-float", None)
    int8_dir = bundle(int8_wl, target, tmp / f"{model}-int8", None)
    exported_s = time.perf_counter() - start
    inputs = float_wl.sample_inputs()
    def tvm(folder: Path, name: str):
        return lambda runs, budget_s: bundle_row(folder, name, threads=2, runs=runs, budget_s=budget_s)[0]

    def ort(onnx_model):
        return lambda runs, budget_s: ort_row(onnx_model, inputs, threads=2, runs=runs, budget_s=budget_s)

    rows, _ = alternate({"tvm float": tvm(float_dir, "tvm float"), "tvm int8": tvm(int8_dir, "tvm int8"),
                         "onnxruntime float": ort(float_wl.onnx_model), "onnxruntime int8": ort(int8_wl.onnx_model)},
                        rounds=opts.rounds, runs=opts.runs * opts.rounds, budget_s=opts.budget * opts.rounds)
    ms = {name: row.median_s * 1e3 for name, row in rows.items()}
    prof = profile_workload(int8_wl, target, schedules=None, runs=5, threads=2, ort=False)
    return {"model": model, "quantized_nodes": report.quantized_nodes, "export_s": round(exported_s, 1),
            "median_ms": {k: round(v, 3) for k, v in ms.items()},
            "ratios": {"tvm int8 / tvm float": round(ms["tvm int8"] / ms["tvm float"], 2),
                       "tvm int8 / onnxruntime int8": round(ms["tvm int8"] / ms["onnxruntime int8"], 2),
                       "tvm int8 / onnxruntime float": round(ms["tvm int8"] / ms["onnxruntime float"], 2)},
            "top5": [{"task": k.task.split("/")[-1][:60], "ms": round(k.seconds * 1e3, 3), "share": round(k.share, 3),
                      "gops": round(k.gflops, 1) if k.gflops else None} for k in prof.top(5)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18"])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args()
    from explorer.schedule.int8_dot import isa_for
    from explorer.target import host_target

    target = host_target()
    info = {**machine(), "int8_dot": isa_for(target)}
    out(f"machine: {json.dumps(info)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="schedx-bench-int8-") as tmp:
        for model in opts.models:
            r = bench(model, opts, target, Path(tmp))
            results.append(r)
            if opts.json:
                continue
            out(f"\n{model}: {r['quantized_nodes']} nodes quantized, both exports (defaults only) {r['export_s']} s")
            out("  " + ", ".join(f"{n} {v:.3f} ms" for n, v in r["median_ms"].items()))
            out("  " + ", ".join(f"{n} = {v:.2f}x" for n, v in r["ratios"].items()))
            for k in r["top5"]:
                out(f"    {k['task']:<60} {k['ms']:8.3f} ms {100 * k['share']:5.1f}%  {k['gops'] or '-'} GOPS")
    if opts.json:
        out(json.dumps({"machine": info, "models": results}, indent=2))


if __name__ == "__main__":
    main()
