"""Browser-facing guard for the studio's web server: a pure ASGI middleware.

Streamlit has no option for response headers or a Host allow-list, so ``onnx-studio
serve`` runs the app as an ``st.App`` with this middleware in front of Streamlit's own
stack. Being ASGI, it sees every request: pages, static files, uploads, health checks
and the websocket upgrade.

- ``X-Frame-Options: DENY`` and CSP ``frame-ancestors 'none'`` on every response (custom-component
  pages, which the studio frames itself: ``SAMEORIGIN`` / ``'self'``), so no
  other site can frame the studio (clickjacking).
- Upload requests whose file name is too long for the multipart parser (Streamlit answers
  a bare "400" that the browser shows as "AxiosError") get a shortened name instead: the
  studio reduces every uploaded name to a safe base name anyway.
- The ``Host`` header must name this server (loopback names, the bind address, names given
  with ``--allowed-host``): a page on another site whose DNS name is rebound to 127.0.0.1
  sends its own name as Host and gets 421, so it cannot read or drive the studio (the names:
  :mod:`studio.core.hosts`, shared with ``onnx-studio serve``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from studio.core.hosts import allowed_hosts_from_env, host_name

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)

# Streamlit draws custom components (the code editor) in iframes served by this same server: those
# pages may be framed by the studio itself, never by another site.
COMPONENT_PATHS = ("/component/", "/_stcore/bidi-components/", "/studio/viewer/")   # the last: the Graph page's viewer
COMPONENT_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-frame-options", b"SAMEORIGIN"),
    (b"content-security-policy", b"frame-ancestors 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)

UPLOAD_PATH = "/_stcore/upload_file/"
MAX_UPLOAD_NAME_BYTES = 200        # python-multipart refuses part headers over ~4 KiB
_HEADER_SCAN_BYTES = 64 * 1024
_NAME_PARAM = re.compile(rb'((?<![A-Za-z])(?:file)?name\*?=)("(?:[^"\\\r\n]|\\.)*"|[^;\r\n]*)', re.IGNORECASE)
_PRINTABLE = re.compile(r"[^A-Za-z0-9.:\-\[\]]")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers") or ():
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def _with_security_headers(headers: Iterable[tuple[bytes, bytes]] | None,
                           path: str = "") -> list[tuple[bytes, bytes]]:
    chosen = COMPONENT_HEADERS if any(path.startswith(p) or f"{p}" in path for p in COMPONENT_PATHS) \
        else SECURITY_HEADERS
    ours = {k for k, _ in chosen}
    kept = [(k, v) for k, v in (headers or ()) if k.lower() not in ours]
    return kept + list(chosen)


def short_upload_name(raw: bytes) -> bytes:
    """A multipart ``filename`` value cut to a short ASCII name that keeps the extension
    and a digest of the original (so two long names stay distinct)."""
    quoted = raw.startswith(b'"')
    text = raw.strip(b'"').decode("utf-8", "replace")
    stem, dot, ext = text.rpartition(".")
    ext = re.sub(r"[^A-Za-z0-9]", "", ext)[:12] if dot else ""
    keep = re.sub(r"[^A-Za-z0-9._-]+", "_", stem or text)[:60].strip("._-") or "upload"
    name = f"{keep}-{hashlib.sha256(raw).hexdigest()[:10]}" + (f".{ext}" if ext else "")
    return b'"' + name.encode() + b'"' if quoted else name.encode()


def shorten_part_names(head: bytes) -> bytes:
    """Shorten every over-long ``name=`` / ``filename=`` / ``filename*=`` parameter in ``head``
    (Streamlit's uploader sends the file name as the form field name too)."""
    def fix(m: re.Match) -> bytes:
        value = m.group(2)
        return m.group(1) + (short_upload_name(value) if len(value) > MAX_UPLOAD_NAME_BYTES else value)
    return _NAME_PARAM.sub(fix, head)


async def _read_part_headers(receive: Receive) -> tuple[list[Message], bytes, bool]:
    """Read body messages until the first part's headers are complete (bounded)."""
    messages: list[Message] = []
    body = b""
    while True:
        msg = await receive()
        messages.append(msg)
        if msg["type"] != "http.request":
            return messages, body, False
        body += msg.get("body", b"")
        start = body.find(b"\r\n") + 2
        if body.find(b"\r\n\r\n", start) >= 0:
            return messages, body, True
        if not msg.get("more_body") or len(body) > _HEADER_SCAN_BYTES:
            return messages, body, False


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
                message = {**message, "headers": _with_security_headers(message.get("headers"),
                                                                        str(scope.get("path", "")))}
            await send(message)

        if (scope["type"] == "http" and scope.get("method") == "PUT"
                and str(scope.get("path", "")).startswith(UPLOAD_PATH)):
            scope, receive = await self._short_names(scope, receive)
        await self.app(scope, receive, send_with_headers)

    async def _short_names(self, scope: Scope, receive: Receive) -> tuple[Scope, Receive]:
        """An upload whose part headers carry an over-long file name, rewritten with a short one."""
        messages, body, complete = await _read_part_headers(receive)
        if complete:
            end = body.find(b"\r\n\r\n", body.find(b"\r\n") + 2)
            fixed = shorten_part_names(body[:end]) + body[end:]
            if fixed != body:
                more = messages[-1].get("more_body", False)
                messages = [{"type": "http.request", "body": fixed, "more_body": more}]
                delta = len(body) - len(fixed)
                headers = []
                for k, v in scope.get("headers") or ():
                    if k.lower() == b"content-length" and v.isdigit():
                        v = str(int(v) - delta).encode()
                    headers.append((k, v))
                scope = {**scope, "headers": headers}
        pending = list(messages)

        async def replay() -> Message:
            if pending:
                return pending.pop(0)
            return await receive()
        return scope, replay

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
