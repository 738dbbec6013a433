"""The Graph page's viewer documents served by URL (studio.ui.viewer_docs): only what this process published,
by the sha256 of its text, a bounded number at once; the route answers them with the studio's framing rule
(framed by the studio itself only). The browser side (the page's frame loads the URL) is in
tests/e2e/test_graph_viewer_by_url.py."""

from __future__ import annotations

import asyncio
import hashlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from studio.ui import viewer_docs


@pytest.fixture(autouse=True)
def _empty_store(monkeypatch):
    monkeypatch.setattr(viewer_docs, "_docs", type(viewer_docs._docs)())
    monkeypatch.setattr(viewer_docs, "_digest_of", {})
    # route() marks the process as serving by URL; restored after each test, or the AppTest pages run later in
    # this worker would hand their frames a URL instead of the document (tests/ui/test_graph_page reads it)
    monkeypatch.setattr(viewer_docs, "_mounted", False)


def test_a_published_document_is_served_by_the_sha256_of_its_text():
    doc = "<!doctype html><p>viewer \u00e9</p>"
    url, digest = viewer_docs.publish(doc)
    assert digest == hashlib.sha256(doc.encode("utf-8")).hexdigest()      # oracle: hashlib on the text
    assert url == f"/studio/viewer/{digest}.html"
    assert viewer_docs.document(digest) == doc.encode("utf-8")
    assert viewer_docs.publish(doc) == (url, digest)                          # the same text, the same URL
    assert viewer_docs.publish(str(doc + " ")[:-1]) == (url, digest)           # an equal copy too


@pytest.mark.parametrize("digest", ["0" * 64, "../../etc/passwd", "A" * 64, "0" * 63, "", "0" * 64 + "/x"])
def test_anything_not_published_is_not_served(digest):
    viewer_docs.publish("<p>one</p>")
    assert viewer_docs.document(digest) is None


def test_the_store_is_bounded_oldest_first(monkeypatch):
    monkeypatch.setattr(viewer_docs, "MAX_DOCS", 3)
    digests = [viewer_docs.publish(f"<p>{i}</p>")[1] for i in range(5)]
    assert [viewer_docs.document(d) is not None for d in digests] == [False, False, True, True, True]
    viewer_docs.publish("<p>2</p>")                   # used again: the newest now
    viewer_docs.publish("<p>5</p>")
    assert viewer_docs.document(digests[2]) is not None and viewer_docs.document(digests[3]) is None
    monkeypatch.setattr(viewer_docs, "MAX_BYTES", 40)
    big = viewer_docs.publish("x" * 35)[1]     # 35 + the newest other 8 bytes > 40
    assert viewer_docs.document(big) is not None and len(viewer_docs._docs) == 1    # the bytes bound, newest kept


def test_the_route_answers_published_documents_only():
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    from studio.ui.webguard import BrowserGuard

    app = Starlette(routes=[viewer_docs.route()], middleware=[Middleware(BrowserGuard)])
    url, _ = viewer_docs.publish("<!doctype html><p id='gv-data'>x</p>")

    def get(path: str, host: str = "127.0.0.1:8501") -> tuple[int, dict[str, str], bytes]:
        sent: list[dict] = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "headers": [(b"host", host.encode())], "scheme": "http", "server": ("127.0.0.1", 8501),
                 "client": ("127.0.0.1", 5555), "root_path": "", "http_version": "1.1"}
        # In a thread of its own: a worker whose earlier test left an event loop running in this thread
        # (Playwright's sync API in the suite's browser tests) refuses asyncio.run here
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, app(scope, receive, send)).result()
        start = next(m for m in sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body

    status, headers, body = get(url)
    assert status == 200 and b"gv-data" in body
    assert headers["content-type"].startswith("text/html")
    assert headers["x-frame-options"] == "SAMEORIGIN" and "frame-ancestors 'self'" in headers["content-security-policy"]
    assert get("/studio/viewer/" + "0" * 64 + ".html")[0] == 404
    assert get(url, host="evil.example.com")[0] == 421           # the Host allow-list holds here too
    assert viewer_docs.served()
