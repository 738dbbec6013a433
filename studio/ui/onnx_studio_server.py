"""The studio's web entry point: ``app.py`` served as an ``st.App`` behind
``studio.ui.webguard.BrowserGuard`` (security headers, Host allow-list).

``onnx-studio serve`` runs ``streamlit run`` on this file; Streamlit finds the ``app``
below and serves it with its own ASGI stack, our middleware first, plus one route of ours:
the Graph page's viewer documents (``studio.ui.viewer_docs``). The module name is
unique because Streamlit imports it by its stem from this folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from studio.ui import viewer_docs  # noqa: E402
from studio.ui.webguard import BrowserGuard  # noqa: E402

app = st.App(str(Path(__file__).with_name("app.py")), middleware=[Middleware(BrowserGuard)],
             routes=[viewer_docs.route()])      # the Graph page's viewer documents, by URL
