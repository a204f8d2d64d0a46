"""Benchmark: the other pages in a real browser (Playwright + Debian's chromium), on a leaderboard
database of 100 000 records.

Prints figures measured in this run (not a test: machines here are shared and noisy):
  1. the Leaderboard's first load at 100k records: from opening the URL (the server answers) to
     the table drawn, then a second load (target <= 2 s);
  2. every page's first load on a warm server: Schedule, Search, Profile, Export (to its main
     element drawn);
  3. the Schedule page's tabs after a step (TVMScript, Lowered TIR, LLVM IR, Assembly): from the
     click to the tab's content (target <= 1 s each).

Run: ``python -m benchmarks.bench_ui_pages [--records 100000]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def fill(path: Path, n: int) -> None:
    from benchmarks.bench_store import make_records
    from explorer.environment import hardware_fingerprint
    from store import Store, Workload

    rng = random.Random(0)
    keys = [str(1000 + i) for i in range(50)]
    records = make_records(n, keys, rng)
    here = hardware_fingerprint()
    records = [r if i % 2 else type(r)(**{**r.to_dict(), "hardware": here}) for i, r in enumerate(records)]
    with Store(path) as store:
        for k in keys:
            store.add_workload(Workload(key=k, name=f"kernel_{k}", flops=2 * 512 ** 3))
        store.add_records(records)


def timed_goto(page, url: str, ready: str) -> float:
    start = time.perf_counter()
    page.goto(url)
    page.locator(ready).first.wait_for(timeout=180_000)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    opts = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from tests.browser import CHROMIUM_ARGS, chromium_path, schedx_ui
    from tests.test_browser import _apply_step, _settle
    from tests.test_browser_graph import _wait_drawn

    with tempfile.TemporaryDirectory(prefix="schedx-bench-pages-") as tmp:
        db = Path(tmp) / "lb.db"
        start = time.perf_counter()
        fill(db, opts.records)
        out(f"leaderboard database: {opts.records} records written in {time.perf_counter() - start:.1f} s "
            f"({db.stat().st_size / 1e6:.0f} MB)")
        with schedx_ui({"SCHEDX_DB": str(db)}) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            table = '[data-testid="stDataFrame"]'
            # straight from the server start, while the warm-up prepares the default page
            cold = timed_goto(page, f"{url}/leaderboard", table)
            # as a user gets there: the app opens on Graph & passes, then the Leaderboard in a new session
            page.goto(url)
            _wait_drawn(page)
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            first = timed_goto(page, f"{url}/leaderboard", table)
            again = timed_goto(page, f"{url}/leaderboard", table)
            out(f"1. Leaderboard at {opts.records} records: first load in a new session {first:.2f} s, again "
                f"{again:.2f} s (target <= 2 s); {cold:.2f} s when opened while the server still warms up the "
                f"default page")
            loads = {"Schedule": ("schedule", "text=Next step"), "Search": ("search", "text=Start a search"),
                     "Profile": ("profile", "text=Time per kernel"), "Export": ("export", "text=Kernels (")}
            figures = {name: timed_goto(page, f"{url}/{path}", ready) for name, (path, ready) in loads.items()}
            out("2. first load on a warm server: " + ", ".join(f"{n} {s:.2f} s" for n, s in figures.items()))
            page.goto(f"{url}/schedule")
            page.get_by_text("Next step").first.wait_for()
            _apply_step(page, "split", "C/j  (", "None, 16")
            _apply_step(page, "vectorize", "C/j_1  (")
            tabs = {}
            for tab, ready in (("Lowered TIR", ".sx-asm"), ("LLVM IR", ".sx-asm"), ("Assembly", ".sx-asm .fma"),
                               ("TVMScript", ".sx-code")):
                times = []
                for _ in range(2):
                    page.get_by_role("tab", name="Loop nest").click()
                    _settle(page)
                    t0 = time.perf_counter()
                    page.get_by_role("tab", name=tab).click()
                    page.locator(f'[role="tabpanel"]:visible {ready}').first.wait_for()
                    times.append(time.perf_counter() - t0)
                tabs[tab] = statistics.median(times)
            out("3. Schedule page tabs after a step: " + ", ".join(f"{t} {s * 1e3:.0f} ms" for t, s in tabs.items())
                + " (target <= 1 s)")
            browser.close()


if __name__ == "__main__":
    main()
