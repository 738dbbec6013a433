"""Projects: list, open, rename, duplicate, delete (with confirmation), download and
import projects; the open project's models and jobs (an interrupted job says so)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pandas as pd
import streamlit as st

from studio import api
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.paths import safe_name
from studio.ui import state, widgets

_CONFIRM = "projects_confirm_delete"
_ZIP = "projects_zip"


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else ""


MAX_DOWNLOAD_BYTES = 1 << 30


def _zip_bytes(project_id: str) -> bytes:
    """The project's zip, packed inside the projects root (removed after reading)."""
    with tempfile.TemporaryDirectory(prefix=".zip-", dir=api.projects_root()) as tmp:
        out = api.export_project(project_id, Path(tmp) / "project.zip")
        if out.stat().st_size > MAX_DOWNLOAD_BYTES:
            raise StudioError(f"the project packs to {widgets.fmt_bytes(out.stat().st_size)}: too large to download "
                              "here; use `onnx-studio projects export`", code=ErrorCode.TOO_LARGE)
        return out.read_bytes()


def _damaged_row(info) -> None:
    """A project whose catalog cannot be read: shown with the reason, never hidden; it can be deleted."""
    pid = info.id
    with st.container(border=True):
        st.error(f"Damaged project {pid}: {widgets.md_escape(info.damaged, 300)}. Restore its folder from a backup, "
                 "or delete it.")
        if st.button("Delete…", key=f"proj_del_{pid}"):
            st.session_state[_CONFIRM] = pid
        if st.session_state.get(_CONFIRM) == pid:
            st.warning(f"Delete the damaged project {pid} and all its files? This cannot be undone.")
            yes, no = st.columns([1, 6])
            if yes.button("Yes, delete", key=f"proj_del_yes_{pid}", type="primary"):
                st.session_state.pop(_CONFIRM, None)
                if widgets.guarded(lambda: api.delete_project(pid) or True):
                    st.rerun()
            if no.button("Cancel", key=f"proj_del_no_{pid}"):
                st.session_state.pop(_CONFIRM, None)
                st.rerun()


def _row(info, current: str | None) -> None:
    pid = info.id
    if info.damaged:
        _damaged_row(info)
        return
    if getattr(info, "unreadable", None):     # permissions, a failing disk, a busy lock: nothing to delete for
        with st.container(border=True):
            st.warning(f"Project {pid} cannot be read here: {widgets.md_escape(info.unreadable, 300)}")
        return
    with st.container(border=True):
        head, size = st.columns([5, 2])
        mark = " (open)" if pid == current else ""
        head.markdown(f"**{widgets.md_escape(info.name, 80)}**{mark}")
        size.caption(f"{info.models} models · {info.versions} versions · {info.jobs} jobs · "
                     f"{widgets.fmt_bytes(info.size_bytes)} · changed {_when(info.updated)}")
        cols = st.columns([1, 1, 1, 1, 3])
        if cols[0].button("Open", key=f"proj_open_{pid}", disabled=pid == current):
            if widgets.guarded(lambda: state.open_project(pid) or True):
                st.switch_page("views/overview.py")
        if cols[1].button("Duplicate", key=f"proj_dup_{pid}"):
            copy = widgets.guarded(lambda: api.duplicate_project(pid))
            if copy is not None:
                state.known_projects().add(copy.id)
                st.rerun()
        if cols[2].button("Delete…", key=f"proj_del_{pid}"):
            st.session_state[_CONFIRM] = pid
        if cols[3].button("Zip", key=f"proj_zip_{pid}", help="Prepare the project as a .zip to download"):
            data = widgets.guarded(lambda: _zip_bytes(pid), spinner="Packing the project…")
            if data is not None:
                st.session_state[_ZIP] = (pid, data)
        zipped = st.session_state.get(_ZIP)
        if zipped and zipped[0] == pid:
            cols[4].download_button("Download .zip", zipped[1], file_name=f"{safe_name(info.name, default='project')}.zip",
                                    mime="application/zip", key=f"proj_dl_{pid}")
        with st.expander("Rename"):
            name = st.text_input("New name", value=info.name, key=f"proj_name_{pid}")
            if st.button("Rename", key=f"proj_rename_{pid}") and name.strip() and name != info.name:
                if widgets.guarded(lambda: api.rename_project(pid, name)) is not None:
                    st.rerun()
        if st.session_state.get(_CONFIRM) == pid:
            st.warning(f"Delete project '{widgets.md_escape(info.name, 80)}' with its {info.versions} versions and "
                       "all artifacts? This cannot be undone.")
            yes, no = st.columns([1, 6])
            if yes.button("Yes, delete", key=f"proj_del_yes_{pid}", type="primary"):
                st.session_state.pop(_CONFIRM, None)
                if widgets.guarded(lambda: api.delete_project(pid) or True):
                    if pid == current:
                        state.close_project()
                    st.rerun()
            if no.button("Cancel", key=f"proj_del_no_{pid}"):
                st.session_state.pop(_CONFIRM, None)
                st.rerun()


def _current_details(project) -> None:
    st.markdown(f"#### Open project: {widgets.md_escape(project.name, 80)}")
    st.caption(f"id {project.id} · bookmark this page's address to come back to it"
               + (" · on this shared server the link is what gives access" if state.shared_mode() else ""))
    models = api.project_models(project)
    if models:
        rows = []
        for m in models:
            for v in api.list_versions(api.project_model(project, m.id)):
                rows.append({"model": m.name, "model id": m.id, "version": v.id, "label": v.label,
                             "parent": v.parent or "", "sha256": v.sha256[:12], "created": _when(v.created)})
        widgets.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="proj_versions")
    jobs = api.project_jobs(project)
    if jobs:
        st.markdown("**Jobs**")
        widgets.dataframe(pd.DataFrame([{"job": j.id, "kind": j.kind, "state": j.state, "started": _when(j.started),
                                    "ended": _when(j.ended), "message": (j.message or "")[:200]} for j in jobs]),
                     hide_index=True, width="stretch", key="proj_jobs")
        if any(j.state == "interrupted" for j in jobs):
            st.warning("Some jobs were interrupted (the studio stopped while they ran); their results were not "
                       "saved. Run them again.")
    artifacts = api.project_artifacts(project)
    if artifacts:
        st.markdown("**Artifacts**")
        widgets.dataframe(pd.DataFrame([{"kind": a.kind, "name": a.name, "job": a.job_id or "", "model": a.model_id or "",
                                    "created": _when(a.created)} for a in artifacts]),
                     hide_index=True, width="stretch", key="proj_artifacts")


def render() -> None:
    st.title("Projects")
    current = state.project()
    if current is not None:
        _current_details(current)
    new, imp = st.columns(2)
    with new:
        name = st.text_input("New project", placeholder="name", key="proj_new_name")
        if st.button("Create", key="proj_create") and name.strip():
            p = widgets.guarded(lambda: api.create_project(name))
            if p is not None:
                state.open_project(p.id)
                st.rerun()
    with imp:
        archive = st.file_uploader("Import a project (.zip from Download)", type=["zip"], key="proj_import")
        if archive is not None and st.session_state.get("proj_imported") != archive.file_id:
            st.session_state["proj_imported"] = archive.file_id
            p = widgets.guarded(lambda: api.import_project(archive.getvalue()), spinner="Checking and importing…")
            if p is not None:
                state.open_project(p.id)
                st.rerun()
    infos = widgets.guarded(state.visible_projects) or []
    st.markdown(f"#### {len(infos)} project{'s' if len(infos) != 1 else ''}"
                + (" (this session's)" if state.shared_mode() else ""))
    for info in infos:
        _row(info, current.id if current else None)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
