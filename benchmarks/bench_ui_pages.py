"""Benchmark: the other pages in a real browser (Playwright + Debian's chromium), on a leaderboard
database of 100 000 records.

Prints figures measured in this run (not a test: machines here are shared and noisy):
  1. the Leaderboard at 100k records, to its table and its chart drawn (target <= 2 s), four ways:
     from the app's first page by the navigation (as users get there), in a new tab of the same
     browser, reloaded, and in a fresh browser profile (no HTTP cache: a first visit ever);
  2. every page's first load on a warm server (target <= 2 s): Graph & passes (to both graphs
     drawn), Schedule, Search, Profile, Export (to its main element drawn), each in a new tab of
     the browser (its HTTP cache holds Streamlit's scripts), in alternated rounds: median and range;
  3. the Schedule page's tabs after a step (TVMScript, Lowered TIR, LLVM IR, Assembly): from the
     click to the tab's content (target <= 1 s each).

Run: ``python -m benchmarks.bench_ui_pages [--records 100000 | --db PATH]``.
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
    from explorer.target.environment import hardware_fingerprint
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


def wait_all(page, start: float, *ready: str) -> float:
    """Seconds from ``start`` until every selector in ``ready`` is on the page."""
    for selector in ready:
        page.locator(selector).first.wait_for(timeout=180_000)
    return time.perf_counter() - start


def timed_goto(page, url: str, *ready: str) -> float:
    start = time.perf_counter()
    page.goto(url)
    return wait_all(page, start, *ready)


FLOOR_PAGE = """import streamlit as st
st.title("Floor")
st.dataframe([{"a": i, "b": str(i)} for i in range(50)])
st.bar_chart({"a": [1, 2, 3], "b": [3, 1, 2]})
"""


def streamlit_floor(browser, tmp: str, ready: tuple[str, ...]) -> dict[str, float]:
    """The same four loads on a bare Streamlit page (a title, a 50-row table, a Vega-Lite chart):
    what Streamlit's own front end costs before schedx draws anything."""
    import subprocess
    import urllib.request

    from tests.browser import free_port

    script = Path(tmp) / "floor.py"
    script.write_text(FLOOR_PAGE)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true",
                             "--server.port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).close()
                break
            except OSError:
                time.sleep(0.5)
        context = browser.new_context()
        timed_goto(context.new_page(), url, *ready)  # the browser's cache filled once
        times: dict[str, list] = {"new tab": [], "reloaded": [], "fresh profile": []}
        for _ in range(3):
            page = context.new_page()
            times["new tab"].append(timed_goto(page, url, *ready))
            times["reloaded"].append(timed_goto(page, url, *ready))
            fresh = browser.new_page()
            times["fresh profile"].append(timed_goto(fresh, url, *ready))
            fresh.close()
        context.close()
        return {how: statistics.median(t) for how, t in times.items()}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


PAGES = {"Graph & passes": ("passes", None), "Schedule": ("schedule", "text=Next step"),
         "Search": ("search", "text=Start a search"), "Profile": ("profile", "text=Time per kernel"),
         "Export": ("export", "text=Kernels (")}


def first_loads(context, url: str, rounds: int = 3) -> dict[str, list[float]]:
    """Seconds from opening each page in a new tab to its content drawn (Graph & passes: both
    graphs); every page visited once first (the server's caches), then ``rounds`` alternated rounds."""
    from tests.test_browser_graph import wait_graph_drawn

    def load(path: str, ready: str | None) -> float:
        page = context.new_page()
        start = time.perf_counter()
        page.goto(f"{url}/{path}")
        if ready is None:
            wait_graph_drawn(page)
            seconds = time.perf_counter() - start
        else:
            seconds = wait_all(page, start, ready)
        page.close()
        return seconds

    for path, ready in PAGES.values():
        load(path, ready)
    times: dict[str, list[float]] = {name: [] for name in PAGES}
    for _ in range(rounds):
        for name, (path, ready) in PAGES.items():
            times[name].append(load(path, ready))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--db", type=Path, help="an existing database to show instead (e.g. one an earlier run kept)")
    opts = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from tests.browser import CHROMIUM_ARGS, apply_schedule_step, chromium_path, schedx_ui, settle
    from tests.test_browser_graph import wait_graph_drawn

    with tempfile.TemporaryDirectory(prefix="schedx-bench-pages-") as tmp:
        db = opts.db or Path(tmp) / "lb.db"
        if opts.db is None:
            start = time.perf_counter()
            fill(db, opts.records)
            out(f"leaderboard database: {opts.records} records written in {time.perf_counter() - start:.1f} s "
                f"({db.stat().st_size / 1e6:.0f} MB)")
        with schedx_ui({"SCHEDX_DB": str(db)}) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            table = '[data-testid="stDataFrame"]'
            ready = (table, '[data-testid="stVegaLiteChart"] svg')
            # straight from the server start, while the warm-up prepares the default page
            cold = timed_goto(page, f"{url}/leaderboard", *ready)
            context = browser.new_context(viewport={"width": 1600, "height": 1100})
            figures: dict[str, list] = {"by the navigation": [], "new tab": [], "reloaded": [], "fresh profile": []}
            for _ in range(3):
                page = context.new_page()  # a tab of the same browser: its HTTP cache is shared
                page.goto(url)
                wait_graph_drawn(page)
                start = time.perf_counter()
                page.locator('[data-testid="stSidebarNav"] a', has_text="Leaderboard").click()
                figures["by the navigation"].append(wait_all(page, start, *ready))
                figures["new tab"].append(timed_goto(context.new_page(), f"{url}/leaderboard", *ready))
                figures["reloaded"].append(timed_goto(page, f"{url}/leaderboard", *ready))
                fresh = browser.new_page(viewport={"width": 1600, "height": 1100})  # a context of its own
                figures["fresh profile"].append(timed_goto(fresh, f"{url}/leaderboard", *ready))
                fresh.close()
            out(f"1. Leaderboard of {db.name}, table and chart drawn (target <= 2 s), median of 3: "
                + ", ".join(f"{how} {statistics.median(t):.2f} s" for how, t in figures.items())
                + f"; {cold:.2f} s when opened while the server still warms up the default page")
            floor = streamlit_floor(browser, tmp, ready)
            out("   a bare Streamlit page with one table and one chart, for reference: "
                + ", ".join(f"{how} {t:.2f} s" for how, t in floor.items()))
            loaded = first_loads(context, url)
            out("2. first load on a warm server, new tab (target <= 2 s), median [min-max] of "
                f"{len(next(iter(loaded.values())))}: "
                + ", ".join(f"{n} {statistics.median(t):.2f} s [{min(t):.2f}-{max(t):.2f}]" for n, t in loaded.items()))
            page = context.new_page()
            page.goto(f"{url}/schedule")
            page.get_by_text("Next step").first.wait_for()
            apply_schedule_step(page, "split", "C/j  (", "None, 16")
            apply_schedule_step(page, "vectorize", "C/j_1  (")
            tabs = {}
            for tab, ready in (("Lowered TIR", ".sx-asm"), ("LLVM IR", ".sx-asm"), ("Assembly", ".sa-line.fma"),
                               ("TVMScript", ".sx-code")):
                times = []
                for _ in range(2):
                    page.get_by_role("tab", name="Loop nest").click()
                    settle(page)
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
