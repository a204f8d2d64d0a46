"""Which web pages may talk to the UI: a check on every request's ``Host`` and ``Origin``.

Listening on 127.0.0.1 keeps other machines out, not other web sites: a page the user visits can
open a websocket to ``ws://127.0.0.1:8501/_stcore/stream`` (its ``Origin`` names that page), or
point a name of its own at 127.0.0.1 (DNS rebinding: ``Host`` names that site). Either way it
would drive an IDE that builds and runs code. So every HTTP request and every websocket
handshake is refused (403, before any of Streamlit's handlers) unless

- its ``Host`` is an allowed address with the port served: ``127.0.0.1``, ``localhost``, ``[::1]``,
  the IP address the connection arrived on (an address, never a name, so no rebinding), or the
  host of an origin given with ``schedx ui --allow-origin URL``;
- its ``Origin``, when there is one, is ``http(s)://`` one of those with that port (``null``, a
  sandboxed or ``file://`` page, is refused). Requests without ``Origin`` (a command-line client,
  a same-origin navigation) are judged by ``Host`` alone.

Streamlit's own settings do not close both holes: ``server.allowedHosts`` checks ``Host`` only on
the websocket (not ``/_stcore/health`` or uploads) and ignores the port, and its websocket origin
check accepts any ``Origin`` whose host equals ``Host``, which is exactly what a rebinding page
sends. ``refusal`` is the whole decision, a pure function; ``OriginGuard`` is a plain ASGI
wrapper that asks it and answers 403 (a websocket refused before it is accepted gets 403 too).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(frozen=True)
class Origin:
    """A web origin a request may come from: scheme, host (lower case, IPv6 without brackets), port."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_origin(text: str) -> Origin:
    """``http(s)://host[:port]`` as an ``Origin`` (the port filled in from the scheme); ValueError
    saying what is wrong otherwise (a path, a user name, another scheme)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError as err:
        raise ValueError(f"{text!r} is not a URL: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{text!r} is not an http:// or https:// origin such as http://myhost:8501")
    if parts.username is not None or parts.password is not None or parts.path not in ("", "/") \
            or parts.query or parts.fragment:
        raise ValueError(f"{text!r} is not an origin: give scheme, host and port only, "
                         f"e.g. {parts.scheme}://{parts.netloc.rpartition('@')[2]}")
    return Origin(parts.scheme, parts.hostname, port if port is not None else DEFAULT_PORTS[parts.scheme])


def allowed_origins(port: int, *, local_ip: str | None = None, extra: Iterable[Origin] = ()) -> tuple[Origin, ...]:
    """The origins the UI serving ``port`` answers: the loopback names, ``local_ip`` (the address a
    connection arrived on) when it is an IP address, and ``extra``."""
    hosts = list(LOOPBACK_NAMES)
    ip = _ip(local_ip)
    if ip is not None and ip not in hosts:
        hosts.append(ip)
    return tuple(Origin(scheme, host, port) for host in hosts for scheme in ("http", "https")) + tuple(extra)


def refusal(host: str | None, origin: str | None, *, port: int, local_ip: str | None = None,
            extra: Sequence[Origin] = ()) -> str | None:
    """Why a request with these ``Host`` and ``Origin`` headers is refused by the UI serving
    ``port``; None when it is allowed (see the module docstring for the rule)."""
    allowed = allowed_origins(port, local_ip=local_ip, extra=extra)
    if host is None:
        return "no Host header"
    try:
        parts = urlsplit("//" + host)
        name, given_port = parts.hostname, parts.port
    except ValueError:
        return f"Host {host[:80]!r} is not host[:port]"
    if not name or parts.username is not None or parts.password is not None or parts.path or parts.query \
            or parts.fragment or "%" in name:
        return f"Host {host[:80]!r} is not host[:port]"
    if not any(a.host == name and (given_port == a.port if given_port is not None else
                                   DEFAULT_PORTS[a.scheme] == a.port) for a in allowed):
        return f"Host {host[:80]!r} is not this UI's address (schedx ui --allow-origin URL adds one)"
    if origin is None:
        return None
    try:
        seen = parse_origin(origin)
    except ValueError:
        return f"Origin {origin[:80]!r} is not allowed"
    if seen not in allowed:
        return f"Origin {origin[:80]!r} is not allowed (schedx ui --allow-origin URL adds one)"
    return None


def _ip(text: str | None) -> str | None:
    """``text`` written as a browser writes that address (an IPv4 client of a dual-stack socket
    arrives on ``::ffff:a.b.c.d``, which the browser calls ``a.b.c.d``); None if not an address."""
    try:
        ip = ipaddress.ip_address(text or "")
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


class OriginGuard:
    """ASGI middleware: every HTTP request and websocket handshake that ``refusal`` refuses gets
    403 before ``app`` sees it; everything else (and lifespan events) passes through unchanged."""

    def __init__(self, app, *, extra: Sequence[Origin] = ()) -> None:
        self.app = app
        self.extra = tuple(extra)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket"):
            why = self.check(scope)
            if why is not None:
                await _refuse(scope, receive, send, why)
                return
        await self.app(scope, receive, send)

    def check(self, scope) -> str | None:
        """Why this connection is refused, or None."""
        headers: dict[bytes, list[str]] = {}
        for name, value in scope.get("headers", ()):
            headers.setdefault(bytes(name).lower(), []).append(bytes(value).decode("latin-1"))
        hosts, origins = headers.get(b"host", []), headers.get(b"origin", [])
        if len(hosts) > 1 or len(origins) > 1:
            return "more than one Host or Origin header"
        server = scope.get("server") or (None, None)
        if not isinstance(server[1], int):
            return "the port this connection arrived on is unknown"
        return refusal(hosts[0] if hosts else None, origins[0] if origins else None, port=server[1],
                       local_ip=server[0], extra=self.extra)


async def _refuse(scope, receive, send, why: str) -> None:
    if scope["type"] == "websocket":
        await receive()  # websocket.connect; closing before accepting makes the server answer 403
        await send({"type": "websocket.close", "code": 1008})
        return
    body = f"403 Forbidden: {why}\n".encode()
    await send({"type": "http.response.start", "status": 403,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


__all__ = ["LOOPBACK_NAMES", "Origin", "OriginGuard", "allowed_origins", "parse_origin", "refusal"]
