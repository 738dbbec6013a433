"""Streamlit entry point: a router over the pages. Run with `onnx-studio serve`.

Each page is a file in ``views/`` (not ``pages/``: Streamlit would also serve that folder as
old-style pages, with file names in the sidebar) that defines ``render()`` and calls it when
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

from studio import api  # noqa: E402
from studio.ui import state, widgets  # noqa: E402
from studio.ui.views import overview

st.set_page_config(page_title="onnx-studio", page_icon="🧩", layout="wide")

def _landing() -> None:
    """The app's root URL shows the Overview. Streamlit serves its default page only at the root, so a
    default Overview would answer its own link, /overview, with "Page not found"; this hidden page is the
    default instead and every page in the menu keeps its own URL (bookmarks, shared links, reloads)."""
    overview.render()


PAGES = {
    "Project": [
        st.Page("views/projects.py", title="Projects", url_path="projects"),
        st.Page("views/data.py", title="Data", url_path="data"),
    ],
    "Model": [
        st.Page(_landing, title="Overview", url_path="home", default=True, visibility="hidden"),
        st.Page("views/overview.py", title="Overview", url_path="overview"),
        st.Page("views/nodes.py", title="Nodes", url_path="nodes"),
        st.Page("views/graph.py", title="Graph", url_path="graph"),
    ],
    "Deploy": [
        st.Page("views/compatibility.py", title="Compatibility", url_path="compatibility"),
        st.Page("views/verify.py", title="Verify", url_path="verify"),
        st.Page("views/plugins.py", title="Plugins", url_path="plugins"),
    ],
    "Optimize": [
        st.Page("views/optimize.py", title="Optimize", url_path="optimize"),
        st.Page("views/precision.py", title="Precision", url_path="precision"),
    ],
    "Performance": [
        st.Page("views/profile.py", title="Profile", url_path="profile"),
    ],
    "Ship": [
        st.Page("views/export.py", title="Export", url_path="export"),
        st.Page("views/batch.py", title="Batch", url_path="batch"),
    ],
}

# One script run is one run for input protection: the files it reads cannot be overwritten by
# any output until it ends (past that, they may be dropped from the registry, oldest first).
with api.input_run():
    state.init()
    navigation = st.navigation(PAGES, expanded=True)   # every page listed (collapsed, the menu hides all past ten)
    navigation.run()
    # After the page: a model or version the page just added (upload, optimize, fix) is listed,
    # page settings are kept in the project, and the URL names what is shown (reload, bookmarks).
    widgets.project_sidebar()
    state.save_settings()
    state.sync_url()
