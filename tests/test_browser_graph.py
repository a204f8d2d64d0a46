"""The Graph & passes page in a real browser (Debian's chromium driven by Playwright): the graph
viewer on ResNet-18 and on a 1000-node model, the text diff, the pass pickers, and speed.
Regression tests for issue 12, items 5, 7, 8 and the passes part of 10; one UI server for all."""

from __future__ import annotations

import re
import time

import pytest

from tests.browser import (chromium_page, describe_findings, pick_option, readability_findings,
                           schedx_ui, screenshot_dir)

pytestmark = pytest.mark.browser

ROOT_JS = ("(document.querySelector('[data-testid=\"stBidiComponentIsolated\"]') || {}).shadowRoot"
           "?.querySelector('.sx-root')")


@pytest.fixture(scope="module")
def ui_url():
    with schedx_ui() as url:
        yield url


@pytest.fixture
def page():
    with chromium_page() as pg:
        yield pg


def _settle(page) -> None:
    page.wait_for_timeout(200)
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')"
                           " && !document.querySelector('[data-testid=\"stStatusWidget\"]')")


def _drawn_at(page) -> float:
    return page.evaluate("() => { const r = " + ROOT_JS + "; return r ? Number(r.dataset.drawnAt || -1) : -1; }")


def wait_graph_drawn(page, after_title: str = "After", since: float = -1, min_nodes: int = 1) -> None:
    """Both graphs painted, the "after" panel titled ``after_title``, later than ``since``."""
    page.wait_for_function(
        "([title, since, n]) => { const r = " + ROOT_JS + "; if (!r) return false;"
        " const p = r.querySelector('.sx-panel[data-side=\"after\"]');"
        " return p.querySelector('.sx-title').textContent.includes(title) && Number(r.dataset.drawnAt || -1) > since"
        " && Number(p.dataset.nodes || 0) >= n; }", arg=[after_title, since, min_nodes], timeout=240_000)


def _open(page, url: str) -> None:
    page.goto(url)
    wait_graph_drawn(page, "FuseOps")
    _settle(page)


def _view(page, name: str) -> None:
    page.get_by_role("radio", name=name, exact=True).click()
    _settle(page)


def test_find_a_node_by_name_see_what_it_became_and_open_its_kernel(ui_url, page, tmp_path):
    """Issue 12, item 7: search by the model's node name, details on click, the kernel it becomes
    opens in the Schedule page."""
    _open(page, ui_url)
    before = page.locator('.sx-panel[data-side="before"]')
    after = page.locator('.sx-panel[data-side="after"]')
    titles = before.locator("g.n text.t.b").evaluate_all("els => els.map(e => e.textContent)")
    assert "layer1.0.conv1" in titles and not any(t.startswith("conv2d") for t in titles)
    box = page.locator(".sx-search")
    # issue 29: "Conv" counted every node a Conv became and every node of a group named after one
    box.fill("Conv")
    page.wait_for_function("() => " + ROOT_JS + ".querySelector('.sx-count').textContent.includes('before')")
    assert page.evaluate("() => " + ROOT_JS + ".querySelector('.sx-count').textContent") == "20 before · 20 after"
    box.fill("layer2.0.relu2")
    box.press("Enter")
    info = before.locator(".sx-info")
    info.wait_for()
    text = info.inner_text()
    assert "layer2.0.relu2" in text and "Relu" in text and "28x28" in text
    node, popup = before.locator("g.n.sel").bounding_box(), info.bounding_box()
    assert (node["x"] + node["width"] <= popup["x"] or popup["x"] + popup["width"] <= node["x"]
            or node["y"] + node["height"] <= popup["y"] or popup["y"] + popup["height"] <= node["y"]), \
        (node, popup)  # the details beside the node, not over it
    assert after.locator("g.n.twin").count() == 1  # the same model node, after FuseOps
    buttons = " ".join(info.locator("button.sx-open").all_inner_texts())
    assert "becomes: fused_" in buttons and "relu" in buttons.split("becomes: ")[1]
    # a conv: its attributes, the ONNX node it came from, and its kernel opened in the Schedule page
    box.fill("layer3.0.conv2")
    box.press("Enter")
    info = before.locator(".sx-info")
    page.wait_for_function("() => " + ROOT_JS + ".dataset.selected === 'before:layer3.0.conv2'")
    assert "kernel_shape=[3, 3]" in info.inner_text() and "Conv" in info.inner_text()
    button = info.locator("button.sx-open").first
    kernel = button.get_attribute("data-kernel")
    button.click()
    page.get_by_text("From the graph:").first.wait_for()
    _settle(page)
    assert f"resnet18/{kernel}" in page.locator('[data-testid="stCaptionContainer"]').first.inner_text()
    assert page.get_by_role("heading", name="Schedule").count() >= 1
    page.screenshot(path=str(screenshot_dir(tmp_path) / "passes-open-kernel.png"), full_page=False)


def test_side_by_side_diff_fits_the_page(ui_url, page, tmp_path):
    """Issue 12, item 5: the side-by-side table was 6066 px wide, the "after" column off-screen."""
    _open(page, ui_url)
    _view(page, "TVMScript")
    page.get_by_text("Side by side").click()
    _settle(page)
    page.locator('[data-testid="stExpander"] summary').filter(has_text="main: changed").first.click()
    table = page.locator("table.sbs").first
    table.wait_for()
    wrap = page.locator("div.sbs-wrap").first.bounding_box()
    box = table.bounding_box()
    assert box["width"] <= wrap["width"] + 1 and box["x"] + box["width"] <= 1600
    right = table.locator("tr").filter(has=page.locator("mark.ins")).first.locator("td.text").nth(1)
    right_box = right.bounding_box()
    assert right_box["x"] + right_box["width"] <= 1600 and right_box["x"] > box["x"] + box["width"] / 3


def test_switching_model_relabels_the_pass_pickers(ui_url, page):
    """Issue 12, item 8: after switching model the pickers kept the previous model's timings."""
    _open(page, ui_url)
    pick_option(page, "Model", "Small CNN")
    wait_graph_drawn(page, "FuseOps", -1)
    _settle(page)
    shown = page.get_by_role("combobox", name="After pass", exact=True).input_value()
    page.get_by_role("combobox", name="After pass", exact=True).click()
    options = page.get_by_role("option").all_inner_texts()
    page.keyboard.press("Escape")
    assert any(" ".join(o.split()) == " ".join(shown.split()) for o in options), (shown, options)
    title = page.locator('.sx-panel[data-side="after"] .sx-title').inner_text()
    assert " ".join(shown.split()) in " ".join(title.split())
    summary = page.locator(".sx-summary").inner_text()
    words = [w for w in ("merged", "fused", "lowered", "removed", "added") if w in summary]
    assert all(summary.count(w) == 1 for w in words)


def test_passes_switch_and_counts_open_without_plotly(ui_url, page, tmp_path):
    """Issue 12, item 10 (passes): every pass picked redraws both graphs (timed from the click, so
    the page's clock works), and the Counts tab draws its bars without Plotly. How fast is measured
    by benchmarks/bench_ui.py (ratios and medians in one run), never asserted here: the machines
    are shared (a median under 800 ms failed at 2.5 s under load)."""
    _open(page, ui_url)
    page.evaluate("() => { window.__sxClicks = []; document.addEventListener('pointerdown', "
                  "() => window.__sxClicks.push(performance.now()), true); }")
    times = []
    for k in range(2):
        for name in ("LegalizeOps", "FoldConstant", "FuseTIR", "FuseOps"):
            since = _drawn_at(page)
            pick_option(page, "After pass", name)
            wait_graph_drawn(page, name, since)
            if k:
                times.append(page.evaluate("() => { const r = " + ROOT_JS + "; const c = window.__sxClicks;"
                                           " return Number(r.dataset.drawnAt) - c[c.length - 1]; }"))
            _settle(page)
    assert len(times) == 4 and all(t > 0 for t in times), times
    _view(page, "Counts & time")
    page.locator(".sx-bars").first.wait_for()
    assert page.locator(".js-plotly-plot").count() == 0


def test_a_1000_node_graph_whole_with_zoom_fit_and_minimap(ui_url, page, tmp_path):
    """Issue 12, item 7: over 160 nodes the graph was paged by a "First node" box."""
    from tests.big_onnx import save_residual_chain

    path = save_residual_chain(tmp_path / "chain1000.onnx", 250)
    _open(page, ui_url)
    page.get_by_text("ONNX file", exact=True).click()
    _settle(page)
    since = _drawn_at(page)
    box = page.get_by_label("...or a path on this machine", exact=True)
    box.fill(path)
    box.press("Enter")
    wait_graph_drawn(page, "FuseOps", since, min_nodes=1000)
    _settle(page)
    assert page.get_by_label("First node", exact=False).count() == 0
    after = page.locator('.sx-panel[data-side="after"]')
    assert int(after.get_attribute("data-nodes")) >= 1000
    assert after.locator("g.n").count() >= 1000  # every node drawn at once
    assert after.locator("rect.c").count() >= 250  # a fused group per block
    mini = after.locator("canvas.sx-mini").bounding_box()
    assert mini["width"] > 5 and mini["height"] > 20
    panel = after.bounding_box()
    world = after.locator("g.sx-world")
    opened = world.get_attribute("transform")  # opens readable, from the top
    after.locator("button.sx-whole").click()
    whole = world.get_attribute("transform")
    assert whole != opened
    assert world.bounding_box()["height"] <= panel["height"]  # the whole graph inside its panel (a strip)
    assert int(after.get_attribute("data-shown")) == int(after.get_attribute("data-nodes"))  # all in view
    after.locator("button.sx-fit").click()  # Fit: the panel's width, labels readable, the height scrolls
    fitted = world.get_attribute("transform")
    scale = float(fitted.split("scale(")[1].rstrip(")"))
    assert scale > 2 * float(whole.split("scale(")[1].rstrip(")")), (fitted, whole)
    box = world.bounding_box()
    assert box["width"] <= panel["width"] + 1 and box["height"] > panel["height"]
    # issue 29: a zoom or pan step redrew all 1000 nodes (300 ms); only those near the view are drawn
    assert 0 < int(after.get_attribute("data-shown")) < int(after.get_attribute("data-nodes")) / 3
    svg = after.locator("svg.sx-canvas")
    plus, started = after.locator("button.sx-btn", has_text="+"), time.monotonic()
    plus.click()
    # a zoom step moves the drawn picture (a CSS transform: no layout of 1000 labels, one frame) ...
    # (style and view read in one call: the view is drawn anew SETTLE_MS = 180 ms after the step, and on a
    # busy machine two reads straddled it; where the reads came after that, the view must show the step)
    style, view = after.evaluate("(p) => [p.querySelector('svg.sx-canvas').getAttribute('style') || '', "
                                 "p.querySelector('g.sx-world').getAttribute('transform')]")
    if time.monotonic() - started < 0.15:
        assert "scale(1.4" in style and view == fitted, (style, view, fitted)
    else:
        assert view == fitted and "scale(1.4" in style or view != fitted and "scale(1.4" not in style, (style, view)
    # ... and the view is drawn anew at the new scale once the gesture rests
    page.wait_for_function("() => { const p = " + ROOT_JS + ".querySelector('.sx-panel[data-side=\"after\"]');"
                           " return !p.querySelector('svg.sx-canvas').style.transform; }")
    assert world.get_attribute("transform") != fitted
    after.locator("button.sx-fit").click()
    assert world.get_attribute("transform") == fitted
    page.locator(".sx-search").fill("block200.scale")
    page.locator(".sx-search").press("Enter")
    page.wait_for_function("() => " + ROOT_JS + ".dataset.selected === 'before:block200.scale'")
    sel = page.locator('.sx-panel[data-side="before"] g.n.sel').bounding_box()
    before = page.locator('.sx-panel[data-side="before"]').bounding_box()
    assert before["x"] <= sel["x"] <= before["x"] + before["width"]  # centred in its panel
    assert before["y"] <= sel["y"] <= before["y"] + before["height"]
    page.screenshot(path=str(screenshot_dir(tmp_path) / "passes-graph-1000.png"), full_page=False)


# Nodes of a panel a user can click: drawn, their centre inside the panel and on screen, and the
# node itself the topmost element there (not under the minimap, the tools or the details box).
_CLICKABLE_JS = """(side) => { const r = %s; const p = r.querySelector(`.sx-panel[data-side="${side}"]`);
  const stage = p.querySelector('.sx-stage').getBoundingClientRect();
  const out = [];
  for (const g of p.querySelectorAll('g.n')) {
    if (g.style.display === 'none') continue;
    const b = g.getBoundingClientRect(), x = b.left + b.width / 2, y = b.top + b.height / 2;
    if (x < stage.left || x > stage.right || y < stage.top || y > Math.min(stage.bottom, innerHeight)) continue;
    const hit = r.getRootNode().elementFromPoint(x, y);
    const lines = Array.from(g.querySelectorAll('text')).map((t) => t.textContent);
    if (hit && g.contains(hit)) out.push({lines, x, y});
  }
  return out; }""" % ROOT_JS


def clickable_op(page, side: str, which: int = 0) -> dict:
    """A node that stands for an operator (title, call, type), with its centre on the screen: the
    ``which``-th of them (wrapping round). The browser tests and ``benchmarks.bench_ui`` click it."""
    nodes = [n for n in page.evaluate(_CLICKABLE_JS, side) if len(n["lines"]) == 3]
    assert nodes, f"no operator node of the {side} panel can be clicked"
    return nodes[which % len(nodes)]


@pytest.mark.parametrize("width,height", [(1100, 900), (1600, 1000)])
def test_a_mouse_click_on_a_node_shows_its_details_and_a_drag_pans(ui_url, page, width, height, tmp_path):
    """Issue 52: clicking a node did nothing (the stage captures the pointer, so pointerup's target
    was the stage, never the node); the tests opened details only through search + Enter. Here a
    real mouse presses at the node's centre; a drag that starts on a node pans and selects nothing."""
    page.set_viewport_size({"width": width, "height": height})
    _open(page, ui_url)
    before = page.locator('.sx-panel[data-side="before"]')
    world = before.locator("g.sx-world")
    selected = "() => " + ROOT_JS + ".dataset.selected || null"
    node = clickable_op(page, "before")
    view = world.get_attribute("transform")
    page.mouse.move(node["x"], node["y"])
    page.mouse.down()
    page.mouse.move(node["x"] + 60, node["y"] + 40, steps=6)
    page.mouse.up()
    page.wait_for_function("(v) => " + ROOT_JS + ".querySelector('.sx-panel[data-side=\"before\"] g.sx-world')"
                           ".getAttribute('transform') !== v", arg=view)  # the view moved, once at rest
    assert page.evaluate(selected) is None and before.locator(".sx-info").is_hidden()  # a drag selects nothing
    node = clickable_op(page, "before")  # where it is now
    title, call = node["lines"][0], node["lines"][1]
    page.mouse.click(node["x"], node["y"])
    page.wait_for_function("(want) => " + ROOT_JS + ".dataset.selected === want", arg=f"before:{title}",
                           timeout=10_000)
    info = before.locator(".sx-info")
    assert info.is_visible()
    assert info.locator(".sx-info-head b").inner_text() == title
    op_row = info.locator(".sx-row").filter(has=page.locator(".sx-k", has_text=re.compile(r"^op$"))).first
    op = op_row.locator(".sx-v").inner_text()
    assert op == call, (op, call)  # the details of the node clicked: its operator
    assert before.locator("g.n.sel").count() == 1
    page.screenshot(path=str(screenshot_dir(tmp_path) / f"passes-node-click-{width}.png"), full_page=False)


def test_the_pages_address_opens_it(ui_url, page):
    """Issue 52: /passes, typed or bookmarked, showed "Page not found" (Streamlit serves its default
    page at "/" alone); the root still opens the page, at its own address."""
    page.goto(f"{ui_url}/passes")
    wait_graph_drawn(page, "FuseOps")
    _settle(page)
    assert page.get_by_role("heading", name="Graph & passes").count() >= 1
    assert page.get_by_text("Page not found").count() == 0
    page.goto(ui_url)
    wait_graph_drawn(page, "FuseOps")
    _settle(page)
    assert page.url.rstrip("/").endswith("/passes") and page.get_by_text("Page not found").count() == 0


def _scale(panel) -> float:
    return float(panel.locator("g.sx-world").get_attribute("transform").split("scale(")[1].rstrip(")"))


@pytest.mark.parametrize("width,height", [(1100, 900), (1600, 1000)])
def test_the_pass_list_shows_name_time_and_change_or_folds_into_the_picker(ui_url, page, width, height):
    """Issue 52: the pass list was 332 px wide at 1600 px and 183 at 1100: names cut, the times
    reachable only by scrolling sideways, "changed" a bare glyph. Where it fits, it shows the
    three whole and a click on a row's box picks the pass; where it does not, it folds away and
    the "After pass" picker stays."""
    page.set_viewport_size({"width": width, "height": height})
    _open(page, ui_url)
    grid = page.locator('.st-key-sx_pass_list [data-testid="stDataFrame"]')
    found = readability_findings(page)
    assert not found, describe_findings(found)
    if width < 1400:
        assert not grid.is_visible()  # folded into the picker
        since = _drawn_at(page)
        page.get_by_role("combobox", name="After pass", exact=True).click()
        page.keyboard.type("LegalizeOps")
        page.get_by_role("option").filter(has_text="LegalizeOps").first.click()
        wait_graph_drawn(page, "LegalizeOps", since)
        return
    assert grid.is_visible()
    grid.locator("th").first.wait_for(state="attached")  # the grid (a canvas) can show before its header cells exist
    assert grid.locator("th").all_inner_texts()[:3] == ["pass", "ms", "changed"]
    words = set(grid.locator('td[aria-colindex="3"]').all_inner_texts())
    assert words and words <= {"yes", "no"}  # a word, not a glyph
    cells = grid.locator('td[aria-colindex="1"]')  # the rows drawn (the grid draws those in view)
    names = [" ".join(t.split()) for t in cells.all_inner_texts()]
    shown = page.get_by_role("combobox", name="After pass", exact=True).input_value()
    row = next(k for k in range(len(names) // 2, len(names)) if names[k] not in shown)
    index = int(cells.nth(row).get_attribute("id").split("-")[-1])  # glide-cell-COL-ROW
    frame = grid.locator('[data-testid="stDataFrameResizable"]').bounding_box()
    since = _drawn_at(page)
    page.mouse.click(frame["x"] + 18, frame["y"] + 35 + 35 * index + 17)  # the row's box, by the mouse
    wait_graph_drawn(page, names[row], since)
    assert names[row] in page.get_by_role("combobox", name="After pass", exact=True).input_value()


@pytest.mark.parametrize("width,height", [(1100, 900), (1600, 1000)])
def test_fit_keeps_labels_readable_and_the_details_clear_of_the_panel(ui_url, page, width, height, tmp_path):
    """Issue 52: after Fit at 1100 px ResNet-18's labels were 4 px tall; the details covered the
    panel and cut its buttons. Fit now keeps labels at 9 px or more (the height scrolls), and
    the details sit under the title, above the tools and minimap, beside the node they explain."""
    page.set_viewport_size({"width": width, "height": height})
    _open(page, ui_url)
    after = page.locator('.sx-panel[data-side="after"]')
    after.locator("button.sx-fit").click()
    assert _scale(after) >= 0.9
    small = [f for f in readability_findings(page) if f["kind"] == "small"]
    assert not small, describe_findings(small)
    node = clickable_op(page, "after")
    page.mouse.click(node["x"], node["y"])
    info = after.locator(".sx-info")
    info.wait_for()
    found = [f for f in readability_findings(page) if f["kind"] in ("overlap", "clipped")]
    assert not found, describe_findings(found)
    box = info.bounding_box()
    for button in info.locator("button.sx-open").all():  # its own buttons whole (it scrolls inside)
        b = button.bounding_box()
        assert box["x"] <= b["x"] and b["x"] + b["width"] <= box["x"] + box["width"] + 1
    for tool in after.locator(".sx-tools button").all():  # the panel's buttons stay clickable
        b = tool.bounding_box()
        assert b["y"] >= box["y"] + box["height"] or b["x"] >= box["x"] + box["width"] or \
            b["x"] + b["width"] <= box["x"]
    after.locator("button.sx-fit").click()  # a fit with the details open keeps them clear of the node
    page.wait_for_timeout(300)
    found = [f for f in readability_findings(page) if f["kind"] in ("overlap", "small")]
    assert not found, describe_findings(found)
    page.screenshot(path=str(screenshot_dir(tmp_path) / f"passes-fit-details-{width}.png"), full_page=False)


@pytest.mark.parametrize("width,height", [(1100, 900), (1600, 1000)])
def test_a_node_found_below_the_fold_is_scrolled_into_view(ui_url, page, width, height):
    """Issue 52: a node selected could sit below the window's bottom (the graph is taller than
    what is left of a 900-px window under the pickers); the page now scrolls to it."""
    page.set_viewport_size({"width": width, "height": height})
    _open(page, ui_url)
    box = page.locator(".sx-search")
    box.click()
    page.keyboard.type("fc")  # ResNet-18's classifier, at the graph's bottom
    page.locator(".sx-btn", has_text="↓").click()  # next match, by the mouse
    page.wait_for_function("() => !!" + ROOT_JS + ".dataset.selected")
    page.wait_for_timeout(300)
    side = page.evaluate("() => " + ROOT_JS + ".dataset.selected").split(":")[0]
    sel = page.locator(f'.sx-panel[data-side="{side}"] g.n.sel').first.bounding_box()
    assert 0 <= sel["y"] and sel["y"] + sel["height"] <= height, sel  # whole in the window
