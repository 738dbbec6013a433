"""R43: the browser-facing server. Every response (pages, static files, health, 404s,
the websocket upgrade) says it must not be framed; a foreign Host header (DNS rebinding)
is refused; a non-loopback bind is shared unless trusted; the path root is the workspace's
own import/ folder, never the folder of all sessions. The Chromium checks (framing, hostile
upload names) are in tests/e2e/test_serve_hardening_browser.py, next to the browser fixtures."""

from __future__ import annotations

import base64
import http.client
import os
import re
import socket

import pytest

from studio.cli.serve_cmd import network_mode
from studio.core.hosts import allowed_hosts
from tests.conftest import parse_model, save
from tests.servers import StudioServer


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    s = StudioServer(tmp_path_factory.mktemp("r43") / "ws", "--allowed-host", "studio.example.org")
    yield s
    s.stop()


def _get(serve: StudioServer, path: str, host: str | None = "default") -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=30)
    if host == "default":
        conn.request("GET", path)
    else:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
    r = conn.getresponse()
    r.body = r.read()
    conn.close()
    return r


def _assert_unframeable(headers) -> None:
    assert headers.get("x-frame-options") == "DENY"
    assert "frame-ancestors 'none'" in (headers.get("content-security-policy") or "")


def test_r43_every_response_forbids_framing(serve):
    index = _get(serve, "/")
    assert index.status == 200
    static = re.search(rb'src="\.?(/static/[^"]+\.js)"', index.body).group(1).decode()
    for path in ("/", "/_stcore/health", static, "/no-such-page/at/all", "/_stcore/no-such-endpoint"):
        r = _get(serve, path)
        assert r.status < 500, path
        _assert_unframeable(r.headers)


@pytest.mark.parametrize("host", ["evil.example.com", "evil.example.com:{port}", "127.0.0.1.nip.io:{port}",
                                  "localhost.evil.com", "evil<script>.com", None])
def test_r43_foreign_host_is_refused(serve, host):
    r = _get(serve, "/_stcore/health", None if host is None else host.format(port=serve.port))
    if host is None:                      # HTTP/1.1 without Host: the HTTP layer already answers 400
        assert r.status == 400
        return
    assert r.status == 421
    text = r.body.decode()
    assert "\n" not in text.strip() and "--allowed-host" in text and "<" not in text
    _assert_unframeable(r.headers)


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "[::1]:{port}",
                                  "studio.example.org", "studio.example.org:443"])
def test_r43_own_names_and_allowed_hosts_are_served(serve, host):
    assert _get(serve, "/_stcore/health", host.format(port=serve.port)).status == 200


def _upgrade(serve: StudioServer, host: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: streamlit\r\n"
               f"Origin: http://{host}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", serve.port), timeout=30) as s:
        s.sendall(request.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n\r\n")[0].lower()


def test_r43_websocket_upgrade_checks_host_and_carries_the_headers(serve):
    good = _upgrade(serve, f"127.0.0.1:{serve.port}")
    assert good.startswith(b"http/1.1 101") and b"x-frame-options: deny" in good
    bad = _upgrade(serve, f"rebound.example.com:{serve.port}")
    assert not bad.startswith(b"http/1.1 101")


def test_r43_non_loopback_bind_is_shared_unless_trusted():
    for host in ("0.0.0.0", "::", "192.168.1.20"):
        shared, warning = network_mode(host, shared=False, trust_network=False)
        assert shared and warning and host in warning and "shared mode" in warning
        shared, warning = network_mode(host, shared=False, trust_network=True)
        assert not shared and warning
        assert network_mode(host, shared=True, trust_network=True)[0]
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert network_mode(host, shared=False, trust_network=False) == (False, None)


def test_r43_allowed_hosts_of_a_bind():
    assert {"localhost", "127.0.0.1", "::1"} <= allowed_hosts("127.0.0.1")
    assert "10.1.2.3" in allowed_hosts("10.1.2.3") and "evil.com" not in allowed_hosts("10.1.2.3")
    assert "proxy.example" in allowed_hosts("127.0.0.1", ["Proxy.Example:8443"])


def test_r43_default_path_root_is_the_import_folder(app, _isolated_workspace):
    ws = _isolated_workspace
    model = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1] x) => (float[1] y) { y = Relu(x) }')
    save(model, ws / "sessions" / "session-other" / "v0-original" / "theirs.onnx")
    save(model, ws / "import" / "mine.onnx")
    at = app().run()
    at.text_input(key="model_path").input("sessions/session-other/v0-original/theirs.onnx").run()
    at.button(key="open_path").click().run()
    assert not at.exception and at.error and not at.metric
    at.text_input(key="model_path").input("mine.onnx").run()
    at.button(key="open_path").click().run()
    assert not at.exception and at.metric


def test_component_pages_may_be_framed_by_the_studio_only():
    """Custom components (the code editor) are iframes of this server: 'self', never another site."""
    from studio.ui.webguard import _with_security_headers

    page = dict(_with_security_headers([], "/"))
    comp = dict(_with_security_headers([(b"x-frame-options", b"ALLOWALL")], "/component/code_editor/index.html"))
    assert page[b"x-frame-options"] == b"DENY" and page[b"content-security-policy"] == b"frame-ancestors 'none'"
    assert comp[b"x-frame-options"] == b"SAMEORIGIN" and comp[b"content-security-policy"] == b"frame-ancestors 'self'"
