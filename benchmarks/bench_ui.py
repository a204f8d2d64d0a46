"""Benchmark: the Graph & passes page in a real browser (Playwright + Debian's chromium).

Prints, per model, figures measured in this run (not a test: machines here are shared and noisy):
  1. first page: from opening the URL (the server already answers) to both graphs drawn;
     the first model is measured on a freshly started server (cold), the others on a warm one;
     then the cold first page again with the server started through ``app.warm_start`` (which
     fills the first view's caches while the server starts), opened as soon as it answers;
  2. switching passes: from the click on a pass in the "After pass" picker to both graphs drawn
     (the graphs of every snapshot the page shows are laid out once; the first visit of a
     snapshot and later visits are reported apart; target <= 300 ms);
  3. the Counts & time tab: from the click on the tab to its chart drawn, first open (target <= 1 s);
  4. a node clicked with the mouse (a real press at its centre, as a user clicks): from the press
     to its details box painted (target <= 100 ms);
  5. on the graph itself (the after panel, as Netron is judged): a zoom step (the "+" button: the
     script's work and the frame drawn, target <= 100 ms), a pan step (a drag of 40 px), Fit; and
     the redraw once a zoom or pan gesture rests (steps move the drawn picture, the rest lays the
     labels out again at the new scale: assets/graph_view.js, live()).

Models: ResNet-18 (zoo) and a generated ONNX residual chain of ~700 operators with a name on every
node (tests/big_onnx.py; ``--blocks 250`` makes 1000 operators). Run:
``python -m benchmarks.bench_ui [--blocks 250] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

PASSES = ["LegalizeOps", "FoldConstant", "FuseOps", "FuseTIR", "AnnotateTIROpPattern"]
ROOT_JS = ("(document.querySelector('[data-testid=\"stBidiComponentIsolated\"]') || {}).shadowRoot"
           "?.querySelector('.sx-root')")


def _settle(page) -> None:
    page.wait_for_timeout(150)
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')"
                           " && !document.querySelector('[data-testid=\"stStatusWidget\"]')")


def _drawn_at(page) -> float:
    value = page.locator(".sx-root").first.get_attribute("data-drawn-at")
    return float(value) if value else -1.0


def _wait_drawn(page, after_title: str, since: float) -> None:
    """Both graphs drawn for a page whose "after" panel shows ``after_title``, later than ``since``."""
    page.wait_for_function(
        "([title, since]) => { const root = " + ROOT_JS + """;
            if (!root) return false;
            const t = root.querySelector('.sx-panel[data-side="after"] .sx-title');
            return t && t.textContent.includes(title) && Number(root.dataset.drawnAt || -1) > since;
        }""", arg=[after_title, since], timeout=180_000)


def _watch_clicks(page) -> None:
    """Record in the page when each pointer press happens (the user's click, without the time
    Playwright itself takes to deliver it)."""
    page.evaluate("() => { window.__sxClicks = []; document.addEventListener('pointerdown', "
                  "() => window.__sxClicks.push(performance.now()), true); }")


def _click_to_drawn(page) -> float:
    """Seconds from the last pointer press to the graphs painted, both measured in the page."""
    return page.evaluate("() => { const r = " + ROOT_JS + "; const c = window.__sxClicks;"
                         " return (Number(r.dataset.drawnAt) - c[c.length - 1]) / 1000; }")


def first_page(page, url: str) -> float:
    t = time.perf_counter()
    page.goto(url)
    _wait_drawn(page, "After", -1)
    return time.perf_counter() - t


def load_model_in_page(page, model_path: str | None) -> float:
    """Open another model (an ONNX file by path); seconds until both graphs are drawn."""
    if model_path is None:
        return 0.0
    page.get_by_text("ONNX file", exact=True).click()
    _settle(page)
    box = page.get_by_label("...or a path on this machine", exact=True)
    box.fill(model_path)
    since = _drawn_at(page)
    t = time.perf_counter()
    box.press("Enter")
    page.wait_for_function(
        "(since) => { const r = " + ROOT_JS + "; return r && Number(r.dataset.drawnAt) > since"
        " && Number(r.querySelector('.sx-panel[data-side=\"after\"]').dataset.nodes) > 300; }", arg=since,
        timeout=300_000)
    return time.perf_counter() - t


def switching(page, repeats: int) -> tuple[list[float], list[float]]:
    from tests.browser import pick_option

    first, again = [], []
    _watch_clicks(page)
    for k in range(repeats + 1):
        for name in PASSES:
            since = _drawn_at(page)
            pick_option(page, "After pass", name)
            _wait_drawn(page, name, since)
            (first if k == 0 else again).append(_click_to_drawn(page))
            _settle(page)
    return first, again


def counts_tab(page) -> float:
    tab = page.get_by_role("radio", name="Counts & time", exact=True)
    t = time.perf_counter()
    tab.click()
    page.locator(".sx-bars").first.wait_for(timeout=120_000)
    page.locator(".sx-table").nth(1).wait_for(timeout=120_000)
    seconds = time.perf_counter() - t
    page.get_by_role("radio", name="Graph", exact=True).click()
    _settle(page)
    return seconds


# Set before a click: the time (page clock) of the first frame painted with the details box of the
# before panel shown, from the moment it opens (its class ``sx-open``).
_WATCH_INFO_JS = """() => { const root = %s;
  const info = root.querySelector('.sx-panel[data-side="before"] .sx-info');
  window.__sxInfoAt = null;
  const seen = new MutationObserver(() => {
    if (info.classList.contains('sx-open')) {
      seen.disconnect(); requestAnimationFrame(() => { window.__sxInfoAt = performance.now(); });
    }
  });
  seen.observe(info, {attributes: true, attributeFilter: ['class']});
}""" % ROOT_JS


def node_clicks(page, n: int = 3) -> list[float]:
    """Seconds from a mouse press on a node of the before panel to its details painted, ``n`` times
    (a different node each time where there are several; the details closed in between)."""
    from tests.test_browser_graph import clickable_op

    _watch_clicks(page)
    times = []
    for k in range(n):
        page.evaluate("() => { const i = " + ROOT_JS + ".querySelector('.sx-panel[data-side=\"before\"] .sx-info');"
                      " i.classList.remove('sx-open'); }")
        page.evaluate(_WATCH_INFO_JS)
        node = clickable_op(page, "before", k)
        page.mouse.click(node["x"], node["y"])
        page.wait_for_function("() => window.__sxInfoAt !== null", timeout=30_000)
        times.append(page.evaluate("() => (window.__sxInfoAt - window.__sxClicks[window.__sxClicks.length - 1]) / 1000"))
    return times


_STEP_JS = """async ([what, n]) => {
  const root = %s;
  const panel = root.querySelector('.sx-panel[data-side="after"]');
  const svg = panel.querySelector('svg');
  const button = what === 'zoom' ? panel.querySelector('.sx-tools button') : panel.querySelector('.sx-fit');
  const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const times = [];
  let t = 0;
  for (let k = 0; k < n; k++) {
    t = performance.now();
    if (what === 'pan') {
      const b = svg.getBoundingClientRect(), x = b.left + b.width / 2, y = b.top + b.height / 2;
      svg.dispatchEvent(new PointerEvent('pointerdown', {clientX: x, clientY: y, bubbles: true, pointerId: 1}));
      svg.dispatchEvent(new PointerEvent('pointermove', {clientX: x + 40, clientY: y + 20, bubbles: true, pointerId: 1}));
      svg.dispatchEvent(new PointerEvent('pointerup', {clientX: x + 40, clientY: y + 20, bubbles: true, pointerId: 1}));
    } else {
      button.click();
    }
    await frame();
    times.push(performance.now() - t);
  }
  let settle = null;
  if (what !== 'fit') {  // the sharp redraw once the gesture rests: from its script to its frame drawn
    const deadline = performance.now() + 5000;
    while (!(Number(panel.dataset.appliedAt) > t) && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
    const applied = Number(panel.dataset.appliedAt);
    if (applied > t) {
      await frame();
      settle = performance.now() - applied;
    }
  }
  return {times, settle};
}""" % ROOT_JS


def graph_steps(page, n: int = 8) -> dict[str, list[float]]:
    """Milliseconds per zoom, pan and Fit step on the after panel (the script and the next frame)."""
    out = {}
    for what in ("zoom", "pan", "fit"):
        got = page.evaluate(_STEP_JS, [what, n if what != "fit" else 3])
        out[what] = got["times"]
        if got.get("settle") is not None:
            out[f"{what} rest"] = [got["settle"]]
    return out


def report(name: str, figures: dict) -> None:
    print(f"{name}:")
    print(f"  first page                 {figures['first_page']:6.2f} s   (target <= 3 s)")
    if figures.get("load"):
        print(f"  open the model (path)      {figures['load']:6.2f} s   (import, pipeline, both graphs)")
    f, a = figures["switch_first"], figures["switch_again"]
    print(f"  switch pass, first visit   median {statistics.median(f) * 1000:5.0f} ms, max {max(f) * 1000:5.0f} ms")
    print(f"  switch pass, again         median {statistics.median(a) * 1000:5.0f} ms, max {max(a) * 1000:5.0f} ms"
          f"   (target <= 300 ms, {len(a)} switches)")
    print(f"  Counts & time tab          {figures['counts'] * 1000:5.0f} ms   (first open, target <= 1 s)")
    c = figures["clicks"]
    print(f"  node click to details      median {statistics.median(c) * 1000:5.0f} ms, max {max(c) * 1000:5.0f} ms"
          f"   (target <= 100 ms, {len(c)} clicks, a real mouse press)")
    for what, times in figures.get("steps", {}).items():
        if what.endswith(" rest"):  # once per gesture, after it rests: the labels laid out at the new view
            print(f"  graph {what:<10} redraw    {times[0]:5.0f} ms   (once, {what.split()[0]} gesture at rest)")
            continue
        print(f"  graph {what:<5} step          median {statistics.median(times):5.0f} ms, max {max(times):5.0f} ms"
              + ("   (target <= 100 ms)" if what in ("zoom", "pan") else ""))


@contextmanager
def warm_started_ui():
    """A UI server started as ``python -m app.warm_start run app/main.py``; yields its URL."""
    from tests.browser import ROOT, free_port

    port = free_port()
    cmd = [sys.executable, "-m", "app.warm_start", "run", str(ROOT / "app" / "main.py"), "--server.port", str(port),
           "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=175, help="residual blocks of the big model (4 nodes each)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    from tests.big_onnx import save_residual_chain
    from tests.browser import CHROMIUM_ARGS, schedx_ui

    with tempfile.TemporaryDirectory() as tmp:
        big = save_residual_chain(Path(tmp) / f"residual_chain_{args.blocks}.onnx", args.blocks)
        with schedx_ui() as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            for label, model in (("ResNet-18 (cold server)", None), (f"residual chain, {args.blocks * 4} operators", big)):
                page = browser.new_page(viewport={"width": 1600, "height": 1100})
                page.set_default_timeout(120_000)
                figures = {"first_page": first_page(page, url)}
                _settle(page)
                figures["load"] = load_model_in_page(page, model)
                _settle(page)
                figures["clicks"] = node_clicks(page)
                _settle(page)
                figures["steps"] = graph_steps(page)
                figures["counts"] = counts_tab(page)
                figures["switch_first"], figures["switch_again"] = switching(page, args.repeats)
                report(label, figures)
                page.close()
            browser.close()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            page.set_default_timeout(120_000)
            with warm_started_ui() as url:
                seconds = first_page(page, url)
            browser.close()
        print(f"ResNet-18, server started through app.warm_start:\n  first page                 {seconds:6.2f} s"
              "   (opened as soon as the server answered; target <= 3 s)")


if __name__ == "__main__":
    main()
