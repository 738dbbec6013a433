"""Browser-facing guard for the studio's web server: a pure ASGI middleware.

Streamlit has no option for response headers or a Host allow-list, so ``onnx-studio
serve`` runs the app as an ``st.App`` with this middleware in front of Streamlit's own
stack. Being ASGI, it sees every request: pages, static files, uploads, health checks
and the websocket upgrade.

- ``X-Frame-Options: DENY`` and CSP ``frame-ancestors 'none'`` on every response, so no
  other site can frame the studio (clickjacking).
- The ``Host`` header must name this server (loopback names, the bind address, names given
  with ``--allowed-host``): a page on another site whose DNS name is rebound to 127.0.0.1
  sends its own name as Host and gets 421, so it cannot read or drive the studio.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

ALLOWED_HOSTS_ENV = "ONNX_STUDIO_ALLOWED_HOSTS"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("0.0.0.0", "::", "")

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)

_PRINTABLE = re.compile(r"[^A-Za-z0-9.:\-\[\]]")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """True for names and addresses that only this machine can reach."""
    h = host.strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The host part of a Host header value, lower case, without port or trailing dot."""
    h = header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        h = h[1:end] if end > 0 else h[1:]
    elif h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def _own_names() -> set[str]:
    """Names and addresses of this machine, allowed when binding every interface."""
    names: set[str] = set()
    try:
        hostname = socket.gethostname()
        names.update({hostname, socket.getfqdn()})
        names.update(socket.gethostbyname_ex(hostname)[2])
    except OSError:
        pass
    return {n.lower() for n in names if n}


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """Host names the server answers to: loopback, the bind address, ``extra`` (and the
    machine's own names when bound to every interface)."""
    names = set(LOOPBACK_NAMES)
    b = bind.strip().strip("[]").lower()
    if b in WILDCARD_BINDS:
        names |= _own_names()
    else:
        names.add(b)
    names |= {host_name(e) for e in extra if e.strip()}
    return frozenset(names)


def allowed_hosts_from_env(default_bind: str = "127.0.0.1") -> frozenset[str]:
    raw = os.environ.get(ALLOWED_HOSTS_ENV)
    if raw is None:
        return allowed_hosts(default_bind)
    return frozenset(h for h in raw.split(",") if h) | frozenset(LOOPBACK_NAMES)


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers") or ():
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def _with_security_headers(headers: Iterable[tuple[bytes, bytes]] | None) -> list[tuple[bytes, bytes]]:
    ours = {k for k, _ in SECURITY_HEADERS}
    kept = [(k, v) for k, v in (headers or ()) if k.lower() not in ours]
    return kept + list(SECURITY_HEADERS)


class BrowserGuard:
    """ASGI middleware: security headers on every response, Host allow-list on every request."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]],
                 hosts: Iterable[str] | None = None) -> None:
        self.app = app
        self.hosts = frozenset(hosts) if hosts is not None else allowed_hosts_from_env()

    def host_ok(self, scope: Scope) -> tuple[bool, str]:
        raw = _header(scope, b"host")
        if raw is None:
            return False, ""
        return host_name(raw) in self.hosts, raw

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        ok, raw = self.host_ok(scope)
        if not ok:
            await self._refuse(scope, send, raw)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] in ("http.response.start", "websocket.accept"):
                message = {**message, "headers": _with_security_headers(message.get("headers"))}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _refuse(self, scope: Scope, send: Send, raw: str) -> None:
        shown = _PRINTABLE.sub("?", raw)[:80] or "(none)"
        text = (f"onnx-studio: host '{shown}' is not served here (DNS rebinding guard). Open the studio "
                f"by the address it was started on, or start it with --allowed-host NAME.\n")
        if scope["type"] == "websocket":
            # Closing before accept makes the server answer the upgrade with 403.
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 421,
                    "headers": _with_security_headers([(b"content-type", b"text/plain; charset=utf-8"),
                                                       (b"content-length", str(len(text.encode())).encode())])})
        await send({"type": "http.response.body", "body": text.encode()})
