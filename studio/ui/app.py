"""Streamlit entry point: a router over the pages. Run with `onnx-studio serve`.

Each page is a file in ``pages/`` that defines ``render()`` and calls it when
run as a page script; the logic behind it lives outside ``studio.ui``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `streamlit run studio/ui/app.py` puts this folder, not the repo, on sys.path.
_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import streamlit as st  # noqa: E402

from studio.ui import state, widgets  # noqa: E402

st.set_page_config(page_title="onnx-studio", page_icon="🧩", layout="wide")

PAGES = {
    "Model": [
        st.Page("pages/overview.py", title="Overview", url_path="overview", default=True),
        st.Page("pages/nodes.py", title="Nodes", url_path="nodes"),
        st.Page("pages/graph.py", title="Graph", url_path="graph"),
    ],
    "Deploy": [
        st.Page("pages/compatibility.py", title="Compatibility", url_path="compatibility"),
    ],
    "Optimize": [
        st.Page("pages/optimize.py", title="Optimize", url_path="optimize"),
    ],
    "Ship": [
        st.Page("pages/export.py", title="Export", url_path="export"),
    ],
}

state.workspace()
navigation = st.navigation(PAGES)
navigation.run()
# After the page: a version the page just added (upload, optimize, fix) is listed.
widgets.version_picker()
