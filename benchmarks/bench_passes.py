"""Benchmark: the cost of snapshots, and how fast the UI switches between them.

Prints figures measured in this run (machines here are shared and noisy, so every figure is a
median over interleaved repeats, and the ratio is of medians taken side by side):
  1. ResNet-18 through the tuning pipeline, with snapshots / without (target <= 1.5);
  2. the same with every snapshot's TVMScript and graph rendered too (what `--out` costs);
     and the task pipeline a search and an export run first (``Workload.fused_module``: about 1 s on
     MobileNetV2; 45 s when FoldConstant computed the weights);
  3. switching snapshots on the Graph & passes page, server side (AppTest rerun, target <= 300 ms)
     and, when chromium is installed, end to end in a real browser until the new graph is drawn.

Run: ``make bench`` or ``python -m benchmarks.bench_passes [--repeats N] [--model NAME]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

from explorer.models import load_model
from explorer.passes import run_pipeline

ROOT = Path(__file__).resolve().parent.parent


def pipeline_overhead(model: str, repeats: int) -> None:
    mod = load_model(model).mod
    run_pipeline(mod, "tuning")  # warm-up: first FoldConstant pays LLVM start-up
    plain, snap, full = [], [], []
    for _ in range(repeats):
        t = time.perf_counter()
        run_pipeline(mod, "tuning", capture=False)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        run = run_pipeline(mod, "tuning")
        snap.append(time.perf_counter() - t)
        t = time.perf_counter()
        for i in range(-1, len(run.snapshots)):
            run.script(i)
            run.graph(i)
        full.append(snap[-1] + time.perf_counter() - t)
    p, s, f = (statistics.median(x) for x in (plain, snap, full))
    print(f"{model} through the tuning pipeline ({len(run.snapshots)} snapshots, median of {repeats}):")
    print(f"  without snapshots          {p * 1000:8.1f} ms")
    print(f"  with snapshots             {s * 1000:8.1f} ms   ratio {s / p:.2f}  (target <= 1.5)")
    print(f"  + every script and graph   {f * 1000:8.1f} ms   ratio {f / p:.2f}  (rendered on demand in the UI)")


def task_pipeline(model: str, repeats: int) -> None:
    """The fused module a search and an export start from, loaded afresh each time."""
    from explorer.workload import load_workload

    times = []
    for _ in range(repeats):
        workload = load_workload(model)
        t = time.perf_counter()
        workload.fused_module()
        times.append(time.perf_counter() - t)
    print(f"{model}'s task pipeline (fused_module, median of {repeats}): {statistics.median(times) * 1000:.0f} ms"
          "  (target: about 1 s on MobileNetV2)")


def ui_switch_apptest(repeats: int) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "ui" / "passes.py"), default_timeout=300).run()
    key = next(s.key for s in at.selectbox if s.label == "After pass")  # the pickers' keys follow the run
    options = list(at.selectbox(key=key).options)
    times = []
    for k in range(repeats):
        for label in options:
            t = time.perf_counter()
            at.selectbox(key=key).select(label).run()
            times.append(time.perf_counter() - t)
        if k == 0:
            times.clear()  # the first pass over the snapshots renders them (cache fill)
    print(f"switching snapshots, server side (AppTest rerun, {len(times)} switches over {len(options)} snapshots):")
    print(f"  median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms  (target <= 300 ms)")


def ui_switch_browser(repeats: int) -> None:
    """Click on a pass to both graphs painted, measured in the page (see benchmarks/bench_ui.py,
    which also times the first page and the Counts tab, on ResNet-18 and a 700-node model)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        print("switching snapshots in a browser: skipped (chromium not installed)")
        return
    from playwright.sync_api import sync_playwright

    from benchmarks.bench_ui import first_page, switching
    from tests.browser import CHROMIUM_ARGS, schedx_ui

    with schedx_ui() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1100})
        page.set_default_timeout(120_000)
        first_page(page, url)
        _, times = switching(page, repeats)
        browser.close()
    print(f"switching snapshots in chromium, click on a pass to both graphs redrawn ({len(times)} switches):")
    print(f"  median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms  (target <= 300 ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    pipeline_overhead(args.model, args.repeats)
    task_pipeline("mobilenet_v2", args.repeats)
    ui_switch_apptest(2)
    if not args.no_browser:
        ui_switch_browser(2)


if __name__ == "__main__":
    main()
