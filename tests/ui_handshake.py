"""Raw requests to a running UI with the ``Host`` and ``Origin`` a hostile page would send.

A browser (or ``http.client``) fills in ``Host`` from the URL; a DNS-rebinding page sends its own
name there, so these write the request by hand on a plain socket and return the status code.
"""

from __future__ import annotations

import base64
import os
import socket
from urllib.parse import urlsplit

STREAM = "/_stcore/stream"
HEALTH = "/_stcore/health"


def status(url: str, path: str, *, host: str | None = None, origin: str | None = None, websocket: bool = False,
           timeout: float = 30.0) -> int:
    """The status code the server at ``url`` answers ``GET path`` with (a websocket upgrade when
    ``websocket``), sending ``host`` as ``Host`` (default: the URL's) and ``origin`` as ``Origin``."""
    parts = urlsplit(url)
    lines = [f"GET {path} HTTP/1.1", f"Host: {host if host is not None else parts.netloc}"]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    if websocket:
        lines += ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
                  f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}",
                  "Sec-WebSocket-Protocol: streamlit"]
    else:
        lines.append("Connection: close")
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head = b""
        while b"\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    first = head.split(b"\r\n", 1)[0].decode("latin-1")
    if not first.startswith("HTTP/"):
        raise ConnectionError(f"no HTTP status line from {url}{path}: {first[:80]!r}")
    return int(first.split()[1])


def origin_holes(url: str) -> list[str]:
    """What a foreign page can still reach on the UI at ``url`` (empty when it holds), and what a
    local browser cannot: each a line naming the request and the status it got."""
    port = urlsplit(url).port
    evil, evil_host = "http://evil.example.com", f"evil.example.com:{port}"
    checks = [  # (what, path, host, origin, websocket, expected)
        ("websocket, DNS rebinding", STREAM, evil_host, f"http://{evil_host}", True, 403),
        ("websocket, foreign Origin and Host", STREAM, "evil.example.com", evil, True, 403),
        ("websocket, foreign Origin", STREAM, None, evil, True, 403),
        ("websocket, foreign Host", STREAM, evil_host, None, True, 403),
        ("websocket, another local port's Origin", STREAM, None, f"http://127.0.0.1:{port + 1}", True, 403),
        ("health, foreign Host", HEALTH, evil_host, None, False, 403),
        ("health, foreign Origin", HEALTH, None, evil, False, 403),
        ("websocket, own Origin", STREAM, None, url, True, 101),
        ("websocket, localhost", STREAM, f"localhost:{port}", f"http://localhost:{port}", True, 101),
        ("health, 127.0.0.1", HEALTH, None, None, False, 200),
        ("health, [::1]", HEALTH, f"[::1]:{port}", None, False, 200),
    ]
    holes = []
    for what, path, host, origin, websocket, expected in checks:
        got = status(url, path, host=host, origin=origin, websocket=websocket)
        if got != expected:
            holes.append(f"{what}: {got}, expected {expected}")
    return holes
