"""Per-session state over persistent projects (studio.projects via studio.api).

The session's project, model, version and selected node live in the URL
(``?project=…&model=…&version=…&node=…``), so a reload (F5) or a bookmark restores
the view; versions, artifacts, jobs and page settings live in the project on disk,
so nothing is lost when the browser session ends. On a shared server (``--shared``)
a session sees only the projects it created or was given the link to (the id is
unguessable). Cached results are keyed by project and content hash.
"""

from __future__ import annotations

import json
import os
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from studio import api
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.core.requests import InspectRequest
from studio.core.workspace import Version, default_root
from studio.core.paths import confine, is_within

_SESSION = "onnx_studio_session"
_LIFETIME = "onnx_studio_lifetime"
_PROJECT = "onnx_studio_project"
_MODEL = "onnx_studio_model"
_CURRENT = "onnx_studio_version"
_KNOWN = "onnx_studio_known_projects"
_SYNCED = "onnx_studio_url_synced"
_PRELOADED = "onnx_studio_preloaded"
_RESTORED = "onnx_studio_restored_for"
_SAVED = "onnx_studio_saved_settings"
_CHOSEN = "onnx_studio_version_chosen"    # a page action's choice in this rerun's callbacks (see pick_version)

# Widget values kept per model in the project (restored after a page change or a reload).
PERSISTED_WIDGETS = (
    "compat_engines", "compat_eps", "compat_trt",
    "graph_level", "graph_mode", "graph_overlay", "graph_hops",
    "node_ops",
    "opt_preset", "opt_passes", "opt_on_failure", "opt_verify", "opt_target",
    "precision_variants", "precision_target", "precision_method", "precision_budget",
    "profile_engines", "profile_per_op", "profile_memory", "profile_rounds", "profile_warmup", "profile_mode",
    "verify_mode", "verify_engine", "verify_engine_b", "verify_layerwise", "verify_threshold",
    "exp_targets", "exp_precision", "exp_preset", "exp_ort_level", "exp_max_batch",
    "diff_mode",
)
SETTINGS_PREFIX = "ui:"
# Widgets whose value belongs to one model (dims, KV budget, export shapes, edits): dropped when another
# model opens, so the next model's boxes start from its own stored values or hints, never the last model's.
MODEL_WIDGET_PREFIXES = ("dim_", "opt_dim_", "kv_", "exp_shape_", "profile_gen_", "graph_edit_", "nodes_edit_",
                         "graph_viewer_edit_", "verify_a", "verify_b",
                         "graph_model_", "compat_dim_", "precision_task_", "verify_task_", "data_task_",
                         "precision_metric", "verify_metric", "data_metric", "precision_value_", "verify_value_",
                         "data_value_", "profile_versions")


class _Lifetime:
    """Lives in session_state; when Streamlit drops the session, its finalizer stops
    the session's sandbox workers. The project stays on disk."""


def session_id() -> str:
    if _SESSION not in st.session_state:
        st.session_state[_SESSION] = uuid.uuid4().hex
        lifetime = _Lifetime()
        weakref.finalize(lifetime, api.release_session, st.session_state[_SESSION])
        st.session_state[_LIFETIME] = lifetime
    return st.session_state[_SESSION]


def shared_mode() -> bool:
    """On a shared server, opening files by path and running custom-op code are off."""
    return api.shared_mode()


def path_root() -> Path:
    """Folder whose files may be opened by path: ``--path-root``, else the workspace's own
    ``import/`` folder -- never the workspace root, which holds every session's folder."""
    given = os.environ.get("ONNX_STUDIO_PATH_ROOT")
    if given:
        return Path(given).resolve()
    root = default_root() / "import"
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


# -- projects this session may see -------------------------------------------------------
def known_projects() -> set[str]:
    return st.session_state.setdefault(_KNOWN, set())


def visible_projects() -> list:
    """Local: every project of the user. Shared: those this session created or was linked to."""
    infos = api.list_projects()
    if shared_mode():
        known = known_projects()
        infos = [i for i in infos if i.id in known]
    return infos


def _allow(project_id: str) -> None:
    known_projects().add(project_id)


def project():
    """The session's current project (None before one is opened or created)."""
    pid = st.session_state.get(_PROJECT)
    if not pid:
        return None
    try:
        return api.open_project(pid, by_name=False)
    except StudioError:
        st.session_state.pop(_PROJECT, None)
        return None


def open_project(project_id: str, model_id: str | None = None, version_id: str | None = None) -> None:
    """Make a project current (by id: on a shared server the id is the permission)."""
    p = api.open_project(project_id, by_name=False)
    _allow(p.id)
    st.session_state[_PROJECT] = p.id
    models = p.models()
    ids = [m.id for m in models]
    st.session_state[_MODEL] = model_id if model_id in ids else (ids[-1] if ids else None)
    st.session_state[_CURRENT] = version_id
    st.session_state.pop("selected_node", None)
    _switched()


def close_project() -> None:
    for key in (_PROJECT, _MODEL, _CURRENT, "selected_node"):
        st.session_state.pop(key, None)


def ensure_project():
    """The current project, creating one when the session has none yet."""
    p = project()
    if p is None:
        p = api.create_project("Untitled project")
        open_project(p.id)
    return p


# -- URL <-> state ---------------------------------------------------------------------------
def _from_url() -> None:
    """Adopt the URL's project/model/version/node on a session's first run (reload, bookmark, shared link)."""
    qp = st.query_params
    pid = qp.get("project")
    if not pid:
        return
    try:
        open_project(pid, qp.get("model"), qp.get("version"))
    except StudioError:
        st.session_state["onnx_studio_url_error"] = "The project in the link does not exist (or was deleted)."
        return
    if qp.get("node"):
        st.session_state["selected_node"] = qp.get("node")


def sync_url() -> None:
    """Write the current project/model/version/node into the URL (after every run)."""
    want = {}
    p = st.session_state.get(_PROJECT)
    if p:
        want["project"] = p
        if st.session_state.get(_MODEL):
            want["model"] = st.session_state[_MODEL]
            v = current_version()
            if v is not None:
                want["version"] = v.id
        if st.session_state.get("selected_node"):
            want["node"] = str(st.session_state["selected_node"])[:300]
    if dict(st.query_params) != want:
        st.query_params.from_dict(want)


def _preload() -> None:
    """``onnx-studio serve MODEL``: the model opens in a project (locally, the one named after it)."""
    path = os.environ.get("ONNX_STUDIO_MODEL")
    if not path:
        return
    try:
        handle = api.load(path)
        if shared_mode():                 # each session its own project: sessions never see each other's
            p = api.create_project(handle.name)
            model, version = api.model_for(p, handle)
        else:                             # the newest project holding this content, else a new one
            p, model, version = api.project_for_model(handle)
        open_project(p.id, model.id, version.id)
    except StudioError as exc:
        st.session_state["onnx_studio_preload_error"] = str(exc)


def init() -> None:
    """Start of every run: the session, then (first run only) the URL or the preloaded model."""
    session_id()
    st.session_state.pop(_CHOSEN, None)           # the callbacks of this rerun have run
    if not st.session_state.get(_SYNCED):
        st.session_state[_SYNCED] = True
        _from_url()
        if not st.session_state.get(_PROJECT) and not st.session_state.get(_PRELOADED):
            st.session_state[_PRELOADED] = True
            _preload()
    restore_settings()


# -- model and version -----------------------------------------------------------------------
class _NoModel:
    """What ``workspace()`` gives before a model is open: no versions, and a clear error for the rest."""

    id = None
    versions: tuple[Version, ...] = ()

    def __getattr__(self, name: str):
        raise StudioError("no model is open: upload one on the Overview page first", code=ErrorCode.NO_MODEL)


def workspace():
    """The current model of the current project (its version tree, with the Workspace methods);
    an empty stand-in (no versions) before a model is open."""
    p = project()
    mid = st.session_state.get(_MODEL)
    if p is None or not mid:
        return _NoModel()
    try:
        return p.model(mid)
    except StudioError:
        st.session_state.pop(_MODEL, None)
        return _NoModel()


def models() -> list:
    p = project()
    return [] if p is None else p.models()


def set_model(model_id: str, version_id: str | None = None) -> None:
    """Open another model of the project (or another version of this one): from here on its own dims;
    its widgets start from its own values on the next run (a page that switches mid-run reruns)."""
    same = model_id == st.session_state.get(_MODEL)
    st.session_state[_CHOSEN] = version_id or model_id
    save_settings()
    st.session_state[_MODEL] = model_id
    st.session_state[_CURRENT] = version_id
    st.session_state.pop("selected_node", None)
    if not same:
        _switched()


def pick_model(model_id: str) -> None:
    """The sidebar model picker's change; like ``pick_version``, a page action's choice in the same rerun wins."""
    if st.session_state.get(_CHOSEN) is None:
        set_model(model_id)


def _switched() -> None:
    """Another model (or project) is current: its own dims from here on; its widget values are put back
    at the start of the next run (``restore_settings`` sees another scope and drops the last model's,
    before any widget is drawn: a widget drawn in this run cannot lose its state mid-run)."""
    st.session_state.pop(_RESTORED, None)
    p, mid = project(), st.session_state.get(_MODEL)
    st.session_state["onnx_studio_dims"] = _model_dims(api.get_settings(p, mid) if p is not None and mid else {})


def _forget_model_widgets() -> None:
    for key in list(st.session_state):
        if key in PERSISTED_WIDGETS or (isinstance(key, str) and key.startswith(MODEL_WIDGET_PREFIXES)):
            st.session_state.pop(key, None)


_NOTICE = "onnx_studio_notice"


def _add(source, label: str) -> Version:
    """A new model in the current project; a project made for it is named after the model. A file whose
    content the project already holds (the same upload twice) opens that model and version instead of
    a silent duplicate, and says so ("same as m1 v0", R63)."""
    fresh = project() is None
    p = ensure_project()
    model, version = api.add_model(p, source, label=label)
    found = p.find_content(version.sha256)
    if found is not None and found[0].id != model.id:
        p.delete_model(model.id)               # the copy just made: the content stays, stored once
        model, version = found
        st.session_state[_NOTICE] = (f"This file is the same as {model.id} · {model.name[:60]} {version.id} "
                                     f"(sha256 {version.sha256[:12]}): opened it instead of adding a duplicate.")
    elif fresh:
        api.rename_project(p, model.name)
    set_model(model.id, version.id)
    return version


def pop_notice() -> str | None:
    """A one-time note for the page (e.g. "same as m1 v0" after an upload the project already held)."""
    return st.session_state.pop(_NOTICE, None)


def add_upload(files) -> Version:
    """Uploaded files as a new model of the current project (created if needed)."""
    return _add(list(files), "original")


def add_model_file(path: str | Path, label: str = "original") -> Version:
    return _add(path, label)


def open_path(typed: str) -> Version:
    """A model by path (local mode): inside the path root, and never a file of a project (the
    projects root holds every project; by path one could reach another's models)."""
    path = confine(typed, path_root(), label="model path")
    if is_within(path, api.projects_root()):
        raise StudioError("that path is inside the projects folder; open projects on the Projects page",
                          code=ErrorCode.PATH_IN_PROJECTS)
    return add_model_file(path)


def current_version() -> Version | None:
    ws = workspace()
    if ws.id is None:
        return None
    vid = st.session_state.get(_CURRENT)
    if vid:
        try:
            return ws.version(vid)
        except StudioError:
            pass
    versions = ws.versions
    return versions[-1] if versions else None


def set_current(vid: str) -> None:
    """Select a version by a page's action (an edit applied, "See it in the diff", undo, keep)."""
    st.session_state[_CURRENT] = vid
    st.session_state[_CHOSEN] = vid
    st.session_state.pop("selected_node", None)


def pick_version(vid: str) -> None:
    """The sidebar picker's change. A page action that selected a version in the same rerun wins: the
    browser sends every widget's value with a click, and a picker value it had not redrawn yet (the
    parent, just after an edit made a version) would otherwise undo the action's choice (CI, 2026-12-04:
    "See it in the diff" opened the parent). A pick of its own is a rerun of its own and always applies."""
    if st.session_state.get(_CHOSEN) is None:
        set_current(vid)


def current_handle() -> ModelHandle | None:
    v = current_version()
    return None if v is None else workspace().handle(v.id)


def project_key() -> str:
    return st.session_state.get(_PROJECT) or f"session-{session_id()}"


# -- per-model settings that survive page changes and reloads ---------------------------------
def _model_scope() -> tuple[str, str] | None:
    pid, mid = st.session_state.get(_PROJECT), st.session_state.get(_MODEL)
    return (pid, mid) if pid and mid else None


def restore_settings() -> None:
    """Put the model's saved widget values back into session_state before pages draw widgets."""
    scope = _model_scope()
    if scope is None:
        return
    p = project()
    if p is None:
        return
    settings = api.get_settings(p, scope[1])
    saved = {k.removeprefix(SETTINGS_PREFIX): v for k, v in settings.items() if k.startswith(SETTINGS_PREFIX)}
    if st.session_state.get(_RESTORED) != scope:      # another model: its values, not the last model's
        _forget_model_widgets()
        st.session_state[_RESTORED] = scope
        st.session_state["onnx_studio_dims"] = _model_dims(settings)
    st.session_state[_SAVED] = saved
    for key, value in saved.items():
        if key in PERSISTED_WIDGETS and key not in st.session_state:
            st.session_state[key] = value


def save_settings() -> None:
    """End of every run: store the widget values (and dims) that changed, for the current model."""
    scope = _model_scope()
    if scope is None or st.session_state.get(_RESTORED) != scope:
        return
    p = project()
    if p is None:
        return
    saved = st.session_state.get(_SAVED) or {}
    for key in PERSISTED_WIDGETS:
        if key in st.session_state:
            value = st.session_state[key]
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                continue
            if saved.get(key) != value:
                api.set_setting(p, SETTINGS_PREFIX + key, value, model_id=scope[1])
                saved[key] = value
    dims_now = {k: int(v) for k, v in st.session_state.get("onnx_studio_dims", {}).items()}
    if dims_now != (api.get_settings(p, scope[1]).get("dims") or {}):
        api.set_setting(p, "dims", dims_now or None, model_id=scope[1])


def job(kind: str, args: dict | None = None):
    """A job row in the current project around a page's run (``with state.job("optimize") as j``)."""
    v = current_version()
    return api.job(ensure_project(), kind, args or {}, model_id=st.session_state.get(_MODEL),
                   version_id=v.id if v else None)


# -- cached results --------------------------------------------------------------------------
@st.cache_data(max_entries=32, ttl=3600, show_spinner=False)
def _summary(project: str, sha256: str, dims: tuple[tuple[str, int], ...], _pool: str, _handle: ModelHandle):
    return api.inspect(_handle, InspectRequest(dims=dims), pool_key=_pool)     # the request the Overview's hint prints


def summary(handle: ModelHandle, dims: dict[str, int] | None = None):
    """The model's summary, cached per project and content (bounded cache)."""
    return _summary(project_key(), handle.sha256, tuple(sorted((dims or {}).items())), session_id(), handle)


def dims() -> dict[str, int]:
    """Values for the symbolic dims of the current model, the one set every page and command uses: the
    project's stored dims for this model id, else what the model says (``api.dim_hints``); never another
    model's (they are replaced whenever another model opens, ``restore_settings``)."""
    return st.session_state.setdefault("onnx_studio_dims", {})


def _model_dims(settings: dict) -> dict[str, int]:
    """The dims a model opens with: its stored ones, then its own hints for the dims it leaves unset."""
    out = {k: int(v) for k, v in (settings.get("dims") or {}).items()}
    handle = None
    try:
        handle = current_handle()
    except StudioError:
        pass
    if handle is not None:
        try:
            for h in api.dim_hints(handle):
                out.setdefault(h.key, int(h.value))
        except (StudioError, ValueError, TypeError):
            pass                     # no hint is a fine answer: the box stays empty (counted as 1)
    return out


@st.cache_resource(max_entries=8, ttl=3600, show_spinner=False)
def _graph_index(project: str, sha256: str, dims: tuple[tuple[str, int], ...], with_summary: bool,
                 _handle: ModelHandle, _summary):
    return api.graph_index(_handle, _summary)


def graph_index(handle: ModelHandle, summary, dims: dict[str, int] | None = None):
    """The graph and hierarchy of a model, built once per project and content (with or
    without the summary's shapes and FLOPs). A resource cache, no copy per rerun: the
    index is immutable and holds proto references."""
    return _graph_index(project_key(), handle.sha256, tuple(sorted((dims or {}).items())),
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


# -- results bound to what produced them (R59) ----------------------------------------------------
_RESULTS = "onnx_studio_results"


@dataclass(frozen=True)
class ResultKey:
    """What a page's result was computed on: project, model, version, that version's content, and the
    settings of the run (dims always, plus the page's: dataset, engine, target...). A result is shown
    only while the key of what is on screen is equal, so nothing of one model reaches another's page."""

    project: str | None
    model: str | None
    version: str | None
    sha256: str | None
    settings: str = "{}"

    def same_model(self, other: ResultKey) -> bool:
        return (self.project, self.model, self.version, self.sha256) == (
            other.project, other.model, other.version, other.sha256)


def _canonical(settings: dict | None) -> str:
    return json.dumps(settings or {}, sort_keys=True, default=str)


def result_key(settings: dict | None = None, *, version: Version | None = None,
               project_only: bool = False) -> ResultKey:
    """The key of what is on screen now (``version``: another version of the current model than the
    selected one, e.g. the version an edit just made; ``project_only``: a result of the whole project,
    such as a batch, bound to the project and its settings only)."""
    if project_only:
        return ResultKey(st.session_state.get(_PROJECT), None, None, None, _canonical(settings))
    v = version if version is not None else current_version()
    return ResultKey(st.session_state.get(_PROJECT), st.session_state.get(_MODEL), v.id if v else None,
                     v.sha256 if v else None, _canonical({"dims": dict(sorted(dims().items())), **(settings or {})}))


def keep_result(name: str, value: object, settings: dict | None = None, *, version: Version | None = None,
                project_only: bool = False) -> ResultKey:
    """Keep a page's result under ``name`` with the key of what produced it; returns that key."""
    key = result_key(settings, version=version, project_only=project_only)
    st.session_state.setdefault(_RESULTS, {})[name] = (key, value)
    return key


def held_result(name: str) -> tuple[ResultKey, object] | None:
    """The result kept under ``name`` with its key, whatever is on screen (for a save: its source)."""
    return st.session_state.get(_RESULTS, {}).get(name)


def bound_result(name: str, settings: dict | None = None, *, version: Version | None = None,
                 project_only: bool = False):
    """The result kept under ``name`` when it was computed on what is on screen (same project, model,
    version, content and settings), else None: the page then offers to run."""
    held = held_result(name)
    if held is None or held[0] != result_key(settings, version=version, project_only=project_only):
        return None
    return held[1]


def result_is_stale(name: str, settings: dict | None = None, *, version: Version | None = None,
                    project_only: bool = False) -> bool:
    """A result is kept under ``name`` but for another model, version or settings (said as such, not shown)."""
    held = held_result(name)
    return held is not None and held[0] != result_key(settings, version=version, project_only=project_only)


def drop_result(name: str) -> None:
    st.session_state.get(_RESULTS, {}).pop(name, None)
