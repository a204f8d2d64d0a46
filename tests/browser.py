"""Helpers for real-browser tests: a schedx UI server on a free port, Debian's chromium."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
_SERVER_LOGS: dict[str, Path] = {}  # the URL of each running test server -> its stderr file


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: `make test` installs it with apt-get")
        pytest.skip("chromium not installed (apt-get install chromium)")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def schedx_ui(env: dict | None = None):
    """Start ``schedx ui`` on a free loopback port; yield its URL; stop it."""
    import uuid

    from tests.processes import kill_marked

    port = free_port()
    marker = uuid.uuid4().hex  # the server and every job it starts carry it: all stopped at the end
    url = f"http://127.0.0.1:{port}"
    # its stderr goes to a file, never an unread pipe (a full pipe would block the server)
    log = tempfile.NamedTemporaryFile(prefix="schedx-ui-", suffix=".log", delete=False)
    _SERVER_LOGS[url] = Path(log.name)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "ui", "--port", str(port)], cwd=ROOT,
                                env={**os.environ, **(env or {}), "SCHEDX_TEST_UI": marker},
                                stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    except BaseException:
        _forget_log(url, log)
        raise
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"schedx ui exited: {server_log(url)}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError(f"schedx ui did not answer within 90 s: {server_log(url)}")
        yield url
    finally:  # the wrapper and the streamlit server it started share a process group
        import signal

        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        kill_marked("SCHEDX_TEST_UI", marker)  # background searches it started run in sessions of their own
        _forget_log(url, log)


def _forget_log(url: str, log) -> None:
    log.close()
    _SERVER_LOGS.pop(url, None)
    Path(log.name).unlink(missing_ok=True)


def server_log(url: str, chars: int = 3000) -> str:
    """The end of what the ``schedx ui`` serving ``url`` (or a page under it) wrote to stderr."""
    path = next((p for base, p in _SERVER_LOGS.items() if url == base or url.startswith(base + "/")), None)
    if path is None or not path.exists():
        return "(no server log)"
    return path.read_text(errors="replace")[-chars:] or "(empty)"


def wait_until(condition, timeout: float, what: str):
    """``condition()``'s first true value, polled every half second for ``timeout`` seconds; an
    AssertionError naming ``what`` after that."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def open_page(page, url: str, ready_text: str, *, timeout_ms: int = 150_000) -> None:
    """Go to ``url`` and wait until ``ready_text`` shows; reload once if it does not (a first load
    that never rendered within 180 s was seen once in CI, a page that loads in seconds in every
    other run); then fail with the page's text and the server's log, not a bare timeout."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    ready = page.get_by_text(ready_text).first
    try:
        page.goto(url, timeout=timeout_ms)
        ready.wait_for(timeout=timeout_ms)
        return
    except PlaywrightTimeout:
        pass
    try:
        page.reload(timeout=timeout_ms)
        ready.wait_for(timeout=timeout_ms)
    except PlaywrightTimeout:
        try:
            shown = page.locator("body").inner_text(timeout=5_000)[-2000:]
        except PlaywrightTimeout:
            shown = "(the page's text could not be read)"
        pytest.fail(f"{url}: {ready_text!r} did not show within {timeout_ms / 1000:.0f} s, nor after a reload.\n"
                    f"The page showed:\n{shown}\nThe server's log:\n{server_log(url)}")


@contextmanager
def chromium_page(width: int = 1600, height: int = 1000, *, timeout_ms: int = 120_000):
    """A page of a fresh chromium (Playwright), ``width`` x ``height``; closed after."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(timeout_ms)
            yield page
        finally:
            browser.close()


def pick_option(page, label: str, option_text: str, *, type_text: bool = True) -> None:
    """Pick ``option_text`` in the selectbox labelled ``label`` as a user does in a long list: type
    to filter it, then click the option (Streamlit's list renders only the options near the one
    selected: with 26 passes, LegalizeOps was not among them). Browser tests and benchmarks both.
    The box is moved to the middle of the window first (at its bottom the list opened with no
    room), and opened again when its list closed before the option showed (a click while the
    page was still drawing)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    box = page.get_by_role("combobox", name=label, exact=True)
    option = page.get_by_role("option").filter(has_text=option_text).first
    for attempt in range(3):
        box.evaluate("e => e.scrollIntoView({block: 'center'})")
        box.click()
        if type_text or attempt:  # a list that would not hold still (CI, stop 65) is filtered down
            page.keyboard.type(option_text)
        try:
            option.wait_for(timeout=20_000)
            option.click(timeout=20_000)  # a list drawn again under the pointer detaches the option
            return
        except PlaywrightTimeout:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
            page.wait_for_timeout(1_000)


def settle(page, *, pause_ms: int = 250, timeout_ms: int | None = None) -> None:
    """Wait until Streamlit has finished the rerun the last interaction started (``pause_ms`` for
    it to start; ``timeout_ms``, else the page's default timeout, for it to end)."""
    page.wait_for_timeout(pause_ms)
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')"
                           " && !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout_ms)


def wait_for_page_text(page, *texts: str, timeout_ms: int = 60_000) -> None:
    """Wait until the page's HTML holds every one of ``texts`` (a rerun replaces its elements one by
    one, top to bottom, so a header from the new run can show above code from the old one); fail
    naming the texts that never came."""
    try:
        page.wait_for_function("ts => ts.every(t => document.documentElement.outerHTML.includes(t))",
                               arg=list(texts), timeout=timeout_ms)
    except Exception as err:  # playwright's TimeoutError: say what is missing, not only that time ran out
        html = page.content()
        missing = [t for t in texts if t not in html]
        raise AssertionError(f"not on the page after {timeout_ms} ms: {missing}") from err


def pick_and_settle(page, label: str, option_text: str) -> None:
    """Choose an option in the Streamlit selectbox labelled ``label`` (its list not filtered)."""
    settle(page)
    pick_option(page, label, option_text, type_text=False)
    settle(page)


def apply_schedule_step(page, primitive: str, loop: str, factors: str | None = None) -> None:
    """On the Schedule page: pick ``primitive`` and its ``loop`` in the next-step form, type its
    ``factors`` where given, and apply the step."""
    page.get_by_role("combobox", name="Primitive", exact=True).click()
    page.keyboard.type(primitive)  # the list renders only the options near the one selected
    page.get_by_role("option", name=primitive, exact=True).click()
    settle(page)
    pick_and_settle(page, "loop", loop)
    if factors is not None:
        box = page.get_by_label("factors", exact=True)
        box.fill(factors)
        box.press("Enter")
        settle(page)
    page.get_by_role("button", name="Apply", exact=True).click()
    settle(page)


def screenshot_dir(tmp_path: Path) -> Path:
    """Where browser tests put screenshots: SCHEDX_SCREENSHOT_DIR (``make screenshots`` uses
    assets/screenshots for the README), else the test's temporary folder."""
    d = Path(os.environ.get("SCHEDX_SCREENSHOT_DIR") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


_READABILITY_JS = (Path(__file__).resolve().parent / "readability.js").read_text(encoding="utf-8")


def readability_findings(page, *, min_px: float = 9) -> list[dict]:
    """What a reader cannot read on the page as shown now (tests/readability.js): text clipped by
    its box (table cells, metrics, button labels, code lines outside a sideways scroller), tables
    and data grids wider than their frame, grid columns narrower than a value (read from the
    grid's column config and cells: it draws on a canvas), labels under ``min_px`` (SVG labels at
    their drawn scale), a popup over the control it belongs to. Each finding is a dict: ``kind``,
    ``where`` (test ids and classes of its element), ``text``, ``detail``."""
    return page.evaluate(_READABILITY_JS, {"minPx": min_px})


def describe_findings(findings: list[dict]) -> str:
    """Findings, one line each, for a test's output and its failure message."""
    return "\n".join(f"  {f['kind']:8} {f['where']}: {f['text']!r} ({f['detail']})" for f in findings) or "  none"
