"""Per-session state: each browser session has its own workspace, versions and
selection; nothing model-derived is shared between sessions. Cached results
are keyed by the session's workspace and the model's content hash.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
import weakref
from pathlib import Path

import streamlit as st

from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.core.workspace import Version, Workspace, default_root

_WS = "onnx_studio_workspace"
_CURRENT = "onnx_studio_version"
_SESSION = "onnx_studio_session"
_LIFETIME = "onnx_studio_lifetime"
STALE_SESSION_S = 24 * 3600


class _Lifetime:
    """Lives in session_state; when Streamlit drops the session, its finalizer stops
    the session's sandbox workers and removes its workspace folder."""


def _end_session(pool_key: str, root: str) -> None:
    from studio import api

    api.release_session(pool_key)
    shutil.rmtree(root, ignore_errors=True)


def _sweep_stale_sessions(parent: Path) -> None:
    """Remove session folders left by a studio that was killed (older than a day)."""
    try:
        for d in parent.iterdir():
            if d.is_dir() and d.name.startswith("session-") and time.time() - d.stat().st_mtime > STALE_SESSION_S:
                shutil.rmtree(d, ignore_errors=True)
    except OSError:
        pass


def session_id() -> str:
    if _SESSION not in st.session_state:
        st.session_state[_SESSION] = uuid.uuid4().hex
    return st.session_state[_SESSION]


def shared_mode() -> bool:
    """On a shared server, opening files by path and running custom-op code are off."""
    return os.environ.get("ONNX_STUDIO_SHARED") == "1"


def path_root() -> Path:
    """Folder whose files may be opened by path: ``--path-root``, else the workspace's own
    ``import/`` folder -- never the workspace root, which holds every session's folder."""
    given = os.environ.get("ONNX_STUDIO_PATH_ROOT")
    if given:
        return Path(given).resolve()
    root = default_root() / "import"
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def workspace() -> Workspace:
    """This session's workspace (created on first use, with the preloaded model if any)."""
    ws = st.session_state.get(_WS)
    if ws is None:
        parent = default_root() / "sessions"
        parent.mkdir(parents=True, exist_ok=True)
        _sweep_stale_sessions(parent)
        ws = Workspace.create(parent, prefix="session")
        st.session_state[_WS] = ws
        lifetime = _Lifetime()
        weakref.finalize(lifetime, _end_session, session_id(), str(ws.root))
        st.session_state[_LIFETIME] = lifetime
        preload = os.environ.get("ONNX_STUDIO_MODEL")
        if preload:
            try:
                v = ws.add_file(Path(preload), label="original")
                st.session_state[_CURRENT] = v.id
            except StudioError as exc:
                st.session_state["onnx_studio_preload_error"] = str(exc)
    return ws


def current_version() -> Version | None:
    ws = workspace()
    vid = st.session_state.get(_CURRENT)
    if vid is None and ws.versions:
        vid = ws.versions[-1].id
    if vid is None:
        return None
    try:
        return ws.version(vid)
    except StudioError:
        return None


def set_current(vid: str) -> None:
    st.session_state[_CURRENT] = vid
    st.session_state.pop("selected_node", None)


def current_handle() -> ModelHandle | None:
    v = current_version()
    return None if v is None else workspace().handle(v.id)


@st.cache_data(max_entries=32, ttl=3600, show_spinner=False)
def _summary(session: str, sha256: str, path: str, dims: tuple[tuple[str, int], ...], _handle: ModelHandle):
    from studio import api

    return api.inspect(_handle, dict(dims), pool_key=session)


def summary(handle: ModelHandle, dims: dict[str, int] | None = None):
    """The model's summary, cached per session and content (bounded cache)."""
    return _summary(session_id(), handle.sha256, str(handle.path), tuple(sorted((dims or {}).items())), handle)


def dims() -> dict[str, int]:
    """User-set values for symbolic dims (shared by every page of this session)."""
    return st.session_state.setdefault("onnx_studio_dims", {})


@st.cache_resource(max_entries=8, ttl=3600, show_spinner=False)
def _graph_index(session: str, sha256: str, path: str, dims: tuple[tuple[str, int], ...], with_summary: bool,
                 _handle: ModelHandle, _summary):
    from studio import api

    return api.graph_index(_handle, _summary)


def graph_index(handle: ModelHandle, summary, dims: dict[str, int] | None = None):
    """The graph and hierarchy of a model, built once per session and content (with or
    without the summary's shapes and FLOPs). A resource cache, no copy per rerun: the
    index is immutable and holds proto references."""
    return _graph_index(session_id(), handle.sha256, str(handle.path), tuple(sorted((dims or {}).items())),
                        summary is not None, handle, summary)


# -- results other pages hand to the Graph page's overlays -------------------------
_OVERLAY_DATA = "onnx_studio_overlay_data"


def publish_overlay_data(sha256: str, key: str, value: object) -> None:
    """Give the Graph page data for one model version (by content): ``compatibility``,
    ``node_times`` or ``node_errors`` (studio.graphview.overlays documents each)."""
    by_model = st.session_state.setdefault(_OVERLAY_DATA, {})
    data = dict(by_model.get(sha256, {}))
    data[key] = value
    by_model[sha256] = data       # a new dict: the Graph page's view memo sees the change


def overlay_data(sha256: str) -> dict | None:
    return st.session_state.get(_OVERLAY_DATA, {}).get(sha256)
