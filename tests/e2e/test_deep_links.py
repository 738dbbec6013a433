"""Every page opens from its own URL (a bookmark, a shared link, a reload on that page)."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import ROOT
from tests.e2e.conftest import wait_for_app

pytestmark = pytest.mark.browser


def _pages() -> list[tuple[str, str]]:
    """(url_path, title) of every st.Page in the router, read from app.py itself."""
    tree = ast.parse((ROOT / "studio" / "ui" / "app.py").read_text())
    pages = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Page":
            kw = {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
            pages.append((kw["url_path"], kw["title"]))
    return pages


def test_router_lists_pages():
    assert len(_pages()) >= 10


def test_every_page_opens_from_its_url(studio_server, page):
    server = studio_server()
    for url_path, title in _pages():
        page.goto(f"{server.url}/{url_path}")
        wait_for_app(page)
        page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)
        body = page.locator("body").inner_text()   # the not-found dialog is outside the app's main block
        assert "Page not found" not in body, url_path
        assert "You have requested page" not in body, url_path
        assert page.url.split("?")[0].rstrip("/").endswith(url_path), page.url
    assert server.alive()
