"""Viewer documents served by URL, so a large graph reaches the browser once, over plain HTTP.

The Graph page's viewer is one self-contained HTML document (45 MB for a 100k-node model). Handed to the
page's frame component as data, it rode every rerun's message (a click in the viewer is a rerun): hashed,
serialized into the websocket message, decoded and kept again by the page's scripts (the Streamlit page at
100k nodes: 17 s from the click to the viewer, 4.8 s on every return to the page, 1.7 GB of renderer memory).
``onnx-studio serve`` mounts :func:`route`; the page publishes each document here and the frame loads it by
its content address. Under AppTest or a plain ``streamlit run`` nothing is mounted and the page sends the
document inline as before (:func:`served` says which).

Only documents this process published are served, by the sha256 of their text (unguessable, immutable); a
bounded number of recent ones are kept. The studio's middleware adds its security headers (the path is framed
by the studio itself only) and its Host allow-list.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict

PREFIX = "/studio/viewer/"
MAX_DOCS = 8                          # a few models' viewers (pages, sessions) at once
MAX_BYTES = 512 * 1024 * 1024         # and never more than this much text held
_DIGEST = re.compile(r"[0-9a-f]{64}")

_lock = threading.Lock()
# digest -> (the text, its UTF-8 bytes); the text is kept so that its id() below stays its own
_docs: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
_digest_of: dict[int, str] = {}       # id(text) -> digest: a rerun hands the same string, hashed once
_mounted = False


def served() -> bool:
    """Whether this process serves viewer documents by URL (``onnx-studio serve`` mounted the route)."""
    return _mounted


def publish(doc: str) -> tuple[str, str]:
    """Keep ``doc`` for the browser; (its URL path, its digest). The same text gives the same URL."""
    with _lock:
        digest = _digest_of.get(id(doc))
        if digest is None or _docs.get(digest, ("",))[0] is not doc:
            digest = hashlib.sha256(doc.encode("utf-8", "surrogatepass")).hexdigest()
        if digest in _docs:
            _docs.move_to_end(digest)
        else:
            _docs[digest] = (doc, doc.encode("utf-8", "surrogatepass"))
        _digest_of[id(_docs[digest][0])] = digest
        total = sum(len(b) for _, b in _docs.values())
        while len(_docs) > 1 and (len(_docs) > MAX_DOCS or total > MAX_BYTES):
            _, (text, body) = _docs.popitem(last=False)
            _digest_of.pop(id(text), None)
            total -= len(body)
        return f"{PREFIX}{digest}.html", digest


def document(digest: str) -> bytes | None:
    """The published document with this digest, or None (unknown, dropped, or not a digest)."""
    if not _DIGEST.fullmatch(digest):
        return None
    with _lock:
        hit = _docs.get(digest)
        return hit[1] if hit is not None else None


def route():
    """The Starlette route ``GET /studio/viewer/<sha256>.html`` (mounted by ``onnx-studio serve``)."""
    global _mounted
    from starlette.responses import Response
    from starlette.routing import Route

    async def viewer(request) -> Response:
        body = document(str(request.path_params.get("digest", "")))
        if body is None:
            return Response("This viewer is no longer held by the studio: reopen the Graph page.\n", status_code=404,
                            media_type="text/plain")
        return Response(body, media_type="text/html; charset=utf-8",
                        headers={"cache-control": "private, max-age=86400, immutable"})

    _mounted = True
    return Route(PREFIX + "{digest}.html", viewer, methods=["GET"])
