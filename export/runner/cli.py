"""``python run.py``: a bundle's command line (check, load, run, time, profile, compare), run from
the bundle's own folder. Part of a bundle's ``run.py`` (:mod:`export.runner`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from export.runner.bundle_check import MANIFEST, BundleCheckError
from export.runner.compare import describe_worst
from export.runner.running import run_bundle
from export.runner.threads import sampled_others, thread_environment

def _write(text: str) -> None:
    sys.stdout.write(text + "\n")


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description="Check, load and run a schedx bundle (needs only apache-tvm).")
    parser.add_argument("folder", nargs="?", default=str(here) if (here / MANIFEST).is_file() else None,
                        help="the bundle folder (default: the folder of this script)")
    parser.add_argument("--inputs", help="an .npz with the model's inputs by name (default: the bundle's inputs.npz)")
    parser.add_argument("--out", help="write the outputs to this .npz (output0, output1, ...)")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: the bundle's target")
    parser.add_argument("--runs", type=int, default=0, help="time this many runs after the first one")
    parser.add_argument("--budget", type=float, default=30.0, help="stop timing after this many seconds")
    parser.add_argument("--threads", type=int,
                        help="CPU threads for TVM (sets TVM_NUM_THREADS; default: TVM_NUM_THREADS or OMP_NUM_THREADS if "
                             "set, else the cores this process may use: TVM's own default is half the hardware "
                             "threads on x86)")
    parser.add_argument("--adapt-threads", action="store_true",
                        help="while timing, run on fewer threads while other processes' threads are runnable (a "
                             "kernel waits for its slowest thread); not measured better yet than workers that sleep")
    parser.add_argument("--profile", type=int, default=0, metavar="RUNS",
                        help="time every kernel call over this many runs (per-kernel profile)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--trust", metavar="PUBKEY.pem",
                        help="refuse the bundle unless manifest.sig verifies with this ed25519 public key "
                             "(needs the cryptography package)")
    parser.add_argument("--without-torch", action="store_true",
                        help="keep PyTorch out of this process (tvm_ffi imports it when installed, 2 s; the bundle "
                             "never needs it): proves a plain TVM runtime suffices")
    opts = parser.parse_args(argv)
    if opts.without_torch:
        sys.modules.setdefault("torch", None)  # `import torch` now raises ImportError, which tvm_ffi tolerates
    if opts.folder is None:
        parser.error("give the bundle folder")
    thread_environment(opts.threads, others=sampled_others())  # before TVM's thread pool starts (first run)
    try:
        report, outputs = run_bundle(opts.folder, inputs_file=opts.inputs, device=opts.device, runs=opts.runs,
                                     budget_s=opts.budget, profile=opts.profile, trust=opts.trust,
                                     adapt_threads=opts.adapt_threads)
    except BundleCheckError as err:
        if opts.json:
            _write(json.dumps({"error": str(err)}))
        else:
            sys.stderr.write(f"error: {err}\n")
        return 2
    if opts.out:
        import numpy as np

        np.savez(opts.out, **{f"output{k}": o for k, o in enumerate(outputs)})
    if opts.json:
        _write(json.dumps(report, indent=2))
        return 0 if report.get("check", {}).get("verified", True) else 1
    _write(f"{report['workload']} on {report['target']}: loaded in {report['load_s'] * 1e3:.1f} ms, "
           f"first inference {report['first_s'] * 1e3:.2f} ms")
    if "median_s" in report:
        _write(f"steady state over {report['runs']} runs: median {report['median_s'] * 1e3:.3f} ms, "
               f"p90 {report['p90_s'] * 1e3:.3f} ms")
    if "profile" in report:
        calls = sorted(report["profile"]["calls"].items(), key=lambda kv: -kv[1]["seconds"])
        total = sum(c["seconds"] for _, c in calls) or 1.0
        _write(f"time per kernel over {report['profile']['runs']} runs:")
        for name, c in calls[:15]:
            _write(f"  {c['seconds'] * 1e3:9.3f} ms {c['seconds'] / total:6.1%}  x{c['calls']:<3} {name}")
    check = report.get("check")
    if check:
        verdict = "matches" if check["verified"] else "DIFFERS FROM"
        _write(f"output {verdict} {check['reference']}: max abs error {check['max_abs_error']:.2e}, "
               f"relative to max |ref| {check['max_rel_error']:.2e}")
        worst = check.get("worst")  # the element that decided, and the rule it was held to
        if worst:
            _write(describe_worst(worst))
        elif check.get("why"):
            _write(check["why"])
        return 0 if check["verified"] else 1
    return 0


__all__ = ["main"]
