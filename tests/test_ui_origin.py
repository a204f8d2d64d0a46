"""The UI answers only its own pages: ``Host``/``Origin`` checked on every request and websocket
(``app/ui_guard.py``), and ``schedx ui``'s address options refused in one line."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cli import cli
from app.ui_guard import Origin, OriginGuard, parse_origin, refusal
from tests.ui_handshake import HEALTH, STREAM, origin_holes, status

PORT = 8501
EXTRA = (parse_origin("https://ide.example.com"),)


@pytest.mark.parametrize("host, origin", [
    ("127.0.0.1:8501", None), ("localhost:8501", None), ("[::1]:8501", None), ("LOCALHOST:8501", None),
    ("127.0.0.1:8501", "http://127.0.0.1:8501"), ("127.0.0.1:8501", "http://localhost:8501"),
    ("localhost:8501", "http://[::1]:8501"), ("127.0.0.1:8501", "https://127.0.0.1:8501"),
])
def test_loopback_with_the_served_port_is_allowed(host, origin):
    assert refusal(host, origin, port=PORT) is None


@pytest.mark.parametrize("host, origin", [
    ("evil.example.com:8501", "http://evil.example.com:8501"),  # DNS rebinding: same-origin to the browser
    ("evil.example.com:8501", None),
    ("127.0.0.1:8501", "http://evil.example.com"),  # cross-site websocket
    ("127.0.0.1:8501", "http://localhost:3000"),  # another local server's page
    ("127.0.0.1:8501", "null"),  # sandboxed frame, file:// page
    ("127.0.0.1:8501", "ftp://127.0.0.1:8501"),
    ("127.0.0.1:3000", None), ("127.0.0.1", None), ("127.0.0.2:8501", None), ("localhost.:8501", None),
    ("user@127.0.0.1:8501", None), ("127.0.0.1:8501/x", None), ("127.0.0.1:99999", None), ("[::1%lo]:8501", None),
    ("", None), (None, None), ("127.0.0.1:8501", ""),
])
def test_foreign_host_or_origin_is_refused(host, origin):
    assert refusal(host, origin, port=PORT)


def test_allow_origin_adds_one_origin_and_its_host():
    assert refusal("ide.example.com", "https://ide.example.com", port=PORT, extra=EXTRA) is None
    assert refusal("ide.example.com:443", None, port=PORT, extra=EXTRA) is None
    assert refusal("ide.example.com", "http://ide.example.com", port=PORT, extra=EXTRA)  # another scheme
    assert refusal("ide.example.com:8501", None, port=PORT, extra=EXTRA)  # another port
    assert refusal("127.0.0.1:8501", None, port=PORT, extra=EXTRA) is None  # loopback stays


def test_the_address_a_connection_arrived_on_is_allowed_as_an_address_only():
    assert refusal("192.168.1.5:8501", "http://192.168.1.5:8501", port=PORT, local_ip="192.168.1.5") is None
    assert refusal("192.168.1.5:8501", None, port=PORT, local_ip="::ffff:192.168.1.5") is None
    assert refusal("192.168.1.6:8501", None, port=PORT, local_ip="192.168.1.5")
    assert refusal("myhost:8501", None, port=PORT, local_ip="myhost")  # a name could be rebound


@pytest.mark.parametrize("text, expected", [
    ("http://myhost:8600", Origin("http", "myhost", 8600)), ("https://MyHost/", Origin("https", "myhost", 443)),
    ("http://[fe80::1]:80", Origin("http", "fe80::1", 80)),
])
def test_parse_origin(text, expected):
    assert parse_origin(text) == expected


@pytest.mark.parametrize("text", ["myhost:8501", "http://myhost/app", "http://u@myhost", "ws://myhost", "http://",
                                  "http://myhost:99999", "null", ""])
def test_parse_origin_refuses_what_is_not_an_origin(text):
    with pytest.raises(ValueError):
        parse_origin(text)


@settings(max_examples=400, deadline=None)
@given(host=st.one_of(st.none(), st.text(max_size=40)), origin=st.one_of(st.none(), st.text(max_size=40)),
       local_ip=st.one_of(st.none(), st.text(max_size=20)))
def test_any_header_text_is_judged_never_raised(host, origin, local_ip):
    """Whatever a client writes in Host and Origin, the guard answers (refused unless allowed)."""
    why = refusal(host, origin, port=PORT, local_ip=local_ip, extra=EXTRA)
    assert why is None or isinstance(why, str)
    try:
        parse_origin(origin or "")
    except ValueError:
        pass


def _run_asgi(scope: dict) -> list[dict]:
    import asyncio

    sent, reached = [], []

    async def app(scope, receive, send):
        reached.append(scope["type"])

    async def receive():
        return {"type": "websocket.connect"}

    async def send(message):
        sent.append(message)

    asyncio.run(OriginGuard(app)(scope, receive, send))
    return sent if not reached else [{"type": "reached app"}]


@pytest.mark.parametrize("kind", ["http", "websocket"])
def test_the_guard_answers_403_before_the_app(kind):
    scope = {"type": kind, "server": ("127.0.0.1", PORT), "headers": [(b"host", b"evil.example.com:8501")]}
    sent = _run_asgi(scope)
    if kind == "http":
        assert sent[0]["status"] == 403 and b"evil.example.com" in sent[1]["body"]
    else:
        assert sent == [{"type": "websocket.close", "code": 1008}]
    ok = {**scope, "headers": [(b"host", b"127.0.0.1:8501"), (b"origin", b"http://127.0.0.1:8501")]}
    assert _run_asgi(ok) == [{"type": "reached app"}]
    twice = {**scope, "headers": [(b"host", b"127.0.0.1:8501"), (b"host", b"evil.example.com")]}
    assert _run_asgi(twice)[0]["type"] != "reached app"
    assert _run_asgi({"type": "lifespan"}) == [{"type": "reached app"}]


def test_the_server_bootstrap_wraps_streamlits_app(monkeypatch):
    from streamlit.web.server.starlette import starlette_server

    from app.warm_start import _split_args, guard_server

    extra, rest = _split_args(["--allow-origin", "https://ide.example.com:443", "run", "app/main.py", "--x", "y"])
    assert extra == list(EXTRA) and rest == ["run", "app/main.py", "--x", "y"]
    monkeypatch.setattr(starlette_server, "create_starlette_app", lambda runtime: ("streamlit's app", runtime))
    guard_server(extra)
    app = starlette_server.create_starlette_app("runtime")
    assert isinstance(app, OriginGuard) and app.app == ("streamlit's app", "runtime") and app.extra == EXTRA


# -- schedx ui's own options -------------------------------------------------------------------

def _ui(args: list[str], monkeypatch) -> tuple[int, str, list]:
    started = []
    monkeypatch.setattr("app.cli.subprocess.call", lambda cmd, **kw: started.append(cmd) or 0)
    result = CliRunner().invoke(cli, ["ui", *args], obj={})
    return result.exit_code, result.output, started


@pytest.mark.parametrize("args, words", [
    (["--port", "99999"], ["99999", "1..65535"]), (["--port", "-1"], ["-1", "1..65535"]),
    (["--port", "0"], ["0", "1..65535"]), (["--host", "999.1.1.1"], ["999.1.1.1", "--host"]),
    (["--host", ""], ["--host"]), (["--host", "8.8.8.8"], ["8.8.8.8", "not an address of this machine"]),
    (["--allow-origin", "evil.example.com"], ["evil.example.com", "http"]),
    (["--allow-origin", "http://ide.example.com/app"], ["/app", "scheme, host and port"]),
])
def test_bad_ui_options_are_one_line(args, words, monkeypatch):
    code, output, started = _ui(args, monkeypatch)
    assert code == 1 and not started, output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1, output
    assert output.startswith("Error: ") and all(w in output for w in words), output


def test_a_port_in_use_is_named(monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code, output, started = _ui(["--port", str(port)], monkeypatch)
    assert code == 1 and not started, output
    assert f"port {port}" in output and "in use" in output and "--port" in output, output
    assert len(output.strip().splitlines()) == 1, output


def test_allow_origin_reaches_the_server(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, output, started = _ui(["--port", str(port), "--allow-origin", "https://IDE.example.com",
                                 "--allow-origin", "http://[::1]:9000"], monkeypatch)
    assert code == 0, output
    cmd = started[0]
    assert cmd[cmd.index("--allow-origin") + 1] == "https://ide.example.com:443"
    assert "http://[::1]:9000" in cmd


# -- the real server ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ui_url():
    from tests.browser import schedx_ui

    with schedx_ui() as url:
        yield url


def test_a_foreign_page_gets_403_and_the_ui_its_own_pages(ui_url):
    assert origin_holes(ui_url) == []


def test_a_foreign_origin_cannot_upload(ui_url):
    assert status(ui_url, "/_stcore/upload_file/x/y", origin="http://evil.example.com") == 403
    assert status(ui_url, STREAM, origin="null", websocket=True) == 403
    assert status(ui_url, HEALTH, host="evil.example.com") == 403  # no port at all
