"""Benchmark: this tree's default export against another commit's, and ONNX Runtime, in one run.

What a change to the default schedules or the export bought, measured as deployed: each model is
exported with no records from this working tree and from ``--base`` (a git revision, checked out
in a temporary worktree), each bundle runs in a fresh process, and the two bundles and ONNX
Runtime (2 threads) are timed in alternating rounds (the order reversed every other round); each
reports its best round's median, as bench_models does, and its median round. The machine heads
the output.

Run: ``python -m benchmarks.bench_vs_commit --base REV [--models resnet18,mobilenet_v2] [--precision bf16]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_EXPORT = """
import sys
sys.path.insert(0, {root!r})
from explorer.target import host_target
from explorer.workload import load_workload
from export.flow import export_workload
export_workload(load_workload({model!r}), host_target(), {folder!r}, schedules=None, verify=False, layers=False,
                precision={precision!r})
"""


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def export_with(root: Path, model: str, folder: Path, precision: str = "fp32") -> None:
    """Export ``model`` with no records at ``precision`` using the code under ``root``, in a child process."""
    code = _EXPORT.format(root=str(root), model=model, folder=str(folder), precision=precision)
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"export of {model} with {root} failed:\n{proc.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare with (e.g. HEAD~3, a commit)")
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "int8"),
                        help="export both trees' bundles at this precision (as `schedx export --precision`)")
    opts = parser.parse_args()
    os.environ.setdefault("TVM_NUM_THREADS", str(opts.threads))

    from benchmarks.bench_models import machine
    from explorer.workload import load_workload
    from export.bench import bundle_row, ort_row

    m = machine()
    out(f"machine: {m['cpu']}, {m['usable_cores']} usable cores, avx512 lines in /proc/cpuinfo: "
        f"{m['avx512_lines']}, target {m['target']}, vector width {m['vector_width']} bits")
    with tempfile.TemporaryDirectory(prefix="schedx-vs-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), opts.base], cwd=ROOT, check=True)
        try:
            for model in opts.models.split(","):
                stem = Path(model).name  # (a path's name: an absolute path joined to tmp would replace it)
                folders = {"this tree": Path(tmp) / f"{stem}-new", opts.base: Path(tmp) / f"{stem}-base"}
                export_with(ROOT, model, folders["this tree"], opts.precision)
                export_with(base, model, folders[opts.base], opts.precision)
                workload = load_workload(model)
                inputs = workload.sample_inputs()
                contenders = {name: (lambda folder=folder, name=name: bundle_row(
                    folder, name, threads=opts.threads, runs=opts.runs, budget_s=8.0)[0].median_s)
                    for name, folder in folders.items()}
                contenders["onnxruntime"] = lambda: ort_row(workload.onnx_model, inputs, threads=opts.threads,
                                                            runs=opts.runs, budget_s=8.0).median_s
                times: dict[str, list[float]] = {name: [] for name in contenders}
                for r in range(opts.rounds):  # the order reversed every other round: nobody always runs first
                    for name, run in list(contenders.items())[::1 if r % 2 == 0 else -1]:
                        times[name].append(run() * 1e3)
                ort = min(times["onnxruntime"])
                out(f"\n{model}: default {opts.precision} export (no records), {opts.rounds} alternated rounds: "
                    f"the best round's median (the median round's), per round")
                for name, values in times.items():
                    rounds = ", ".join(f"{v:.2f}" for v in values)
                    out(f"  {name:<14} {min(values):8.2f} ms ({statistics.median(values):.2f})  ({rounds})  "
                        f"{min(values) / ort:5.2f}x ORT {opts.threads}t")
                new, old = times["this tree"], times[opts.base]
                ratios = sorted(a / b for a, b in zip(new, old))
                out(f"  this tree / {opts.base}: {min(new) / min(old):.2f}x best round, "
                    f"{statistics.median(new) / statistics.median(old):.2f}x median round; per round "
                    f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}), "
                    f"{sum(r < 1 for r in ratios)} of {len(ratios)} rounds faster")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
