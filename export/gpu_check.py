"""The prepared GPU check: run a CUDA bundle on a real NVIDIA GPU and compare with the reference.

Run it on the machine with the card, in the environment that will serve the model::

    python -m export.gpu_check BUNDLE_DIR [--runs 50] [--json] [--out gpu_report.json]

It checks the bundle's hashes, says which GPU and driver it found (``nvidia-smi``), loads the
library on ``cuda:0`` (with the bundle's cubin on a GPU of its architecture; on another, the CUDA
source compiled there: with NVRTC when ``cuda-python`` is installed, else with nvcc, chosen via
``TVM_CUDA_COMPILE_MODE``; a runtime-only TVM is enough), runs the bundle's sample
inputs, compares with the reference saved at export (ONNX Runtime or numpy on the CPU), and times
``--runs`` runs. Exit status 0: outputs within tolerance; 1: they differ; 2: could not run.
Like ``run.py`` it imports only numpy and tvm (and this package's standalone loader).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys

from export import verify_bundle


def gpu_environment() -> dict:
    """GPU name, driver and memory from nvidia-smi, and how CUDA source will be compiled."""
    info: dict = {"nvidia_smi": None}
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
            info["nvidia_smi"] = [line.strip() for line in out.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError) as err:
            info["nvidia_smi"] = [f"nvidia-smi failed: {err}"]
    info.update(cuda_python=importlib.util.find_spec("cuda") is not None, nvcc=shutil.which("nvcc"),
                compile_mode=verify_bundle.cuda_compile_mode())
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a schedx CUDA bundle on this machine's GPU.")
    parser.add_argument("folder", help="the bundle folder")
    parser.add_argument("--runs", type=int, default=50, help="timed runs after the first")
    parser.add_argument("--budget", type=float, default=60.0, help="stop timing after this many seconds")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--out", help="also write the JSON report to this file")
    opts = parser.parse_args(argv)
    report: dict = {"environment": gpu_environment()}
    try:
        manifest = verify_bundle.check_bundle(opts.folder)
        if manifest["target"]["device"] != "cuda":
            raise verify_bundle.BundleCheckError("this is not a CUDA bundle (export with --target cuda:sm_XX)")
        import tvm

        report["environment"]["tvm_version"] = tvm.__version__
        if not verify_bundle.load_cuda_runtime():
            raise verify_bundle.BundleCheckError("no CUDA device is visible to TVM on this machine")
        report["environment"]["device"] = getattr(tvm.cuda(0), "device_name", "cuda:0")
        result, _ = verify_bundle.run_bundle(opts.folder, device="cuda", runs=opts.runs, budget_s=opts.budget)
        report.update(result)
        report["exported_for"] = manifest["target"]["label"]
    except verify_bundle.BundleCheckError as err:
        report["error"] = str(err)
    except Exception as err:  # noqa: BLE001 - a driver or JIT failure is the finding: report it
        report["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"
    text = json.dumps(report, indent=2, default=str)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(text)
    if opts.json:
        sys.stdout.write(text + "\n")
    else:
        _human(report)
    if "error" in report:
        return 2
    return 0 if report.get("check", {}).get("verified", False) else 1


def _human(report: dict) -> None:
    w = sys.stdout.write
    env = report["environment"]
    w(f"GPU: {', '.join(env.get('nvidia_smi') or ['nvidia-smi not found'])}; a compile, if one is needed, "
      f"with {env['compile_mode']}\n")
    if "error" in report:
        w(f"error: {report['error']}\n")
        return
    w(f"{report['workload']} ({report['exported_for']}) on {env.get('device')}: load {report['load_s'] * 1e3:.0f} ms, "
      f"first inference {report['first_s'] * 1e3:.2f} ms\n")
    for line in report.get("cuda_code", []):
        w(f"kernels: {line}\n")
    if "median_s" in report:
        w(f"steady state over {report['runs']} runs: median {report['median_s'] * 1e3:.3f} ms, "
          f"p90 {report['p90_s'] * 1e3:.3f} ms\n")
    check = report.get("check")
    if check:
        verdict = "matches" if check["verified"] else "DIFFERS FROM"
        w(f"output {verdict} {check['reference']}: max abs error {check['max_abs_error']:.2e}, normalised "
          f"{check['max_rel_error']:.2e} (tolerance {check['tolerance']:.0e})\n")


if __name__ == "__main__":
    sys.exit(main())
