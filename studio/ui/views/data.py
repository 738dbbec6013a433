"""Data: a project's datasets (images, audio, text, tensors, loader scripts), their
preprocessing and split, a preview of the samples as the model gets them, and task
metrics of the current model on an engine against the golden outputs."""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import streamlit as st

from studio import api
from studio.core.requests import DatasetAddRequest, DatasetEvalRequest
from studio.ui import recipe_editor, state, widgets
from studio.ui.task_picker import target_picker, task_picker

PRESETS = ["from the model", *api.recipe_choices()["preset"]]
ENGINES = {row["label"]: row["name"] for row in api.engines() if row["kind"] != "table"}   # runs here
_CONFIRM = "data_confirm_delete"
KINDS = ["auto", "image", "audio", "text", "tensor", "script"]
KIND_LABELS = {"auto": "auto (never runs code)", "image": "image", "audio": "audio", "text": "text",
               "tensor": "tensor", "script": "script (executes the .py)"}


LOOSE = ["jpg", "jpeg", "png", "bmp", "ppm", "webp", "wav", "npy"]      # files a dataset takes as they are


@dataclass(frozen=True)
class _Upload:
    name: str
    data: bytes


def _one_upload(files) -> _Upload | None:  # noqa: ANN001 - Streamlit UploadedFile objects
    """The pick as one upload for the data import: a zip/npz/jsonl/py as it is; loose images, WAV or .npy
    files packed into one flat zip (the import reads a zip of samples; no label folders: unlabelled)."""
    if not files:
        return None
    if len(files) == 1 and Path(files[0].name).suffix.lower().lstrip(".") not in LOOSE:
        return _Upload(files[0].name, files[0].getvalue())
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        seen: set[str] = set()
        for f in files:
            given = Path(Path(f.name.replace("\\", "/")).name or "sample")
            name, k = given.name, 1
            while name in seen:                 # two picks of the same name: both kept (0-2.png)
                k += 1
                name = f"{given.stem}-{k}{given.suffix}"
            seen.add(name)
            z.writestr(name, f.getvalue())
    stem = Path(files[0].name).stem if len(files) == 1 else "images"
    return _Upload(f"{stem}.zip", buf.getvalue())


def _scripts_in(up: _Upload) -> list[str]:
    """The .py file(s) a script dataset would execute: the upload itself, or the .py members of its zip."""
    if up.name.lower().endswith(".py"):
        return [up.name]
    if up.name.lower().endswith(".zip"):
        try:
            with zipfile.ZipFile(io.BytesIO(up.data)) as z:
                return [n for n in z.namelist() if n.lower().endswith(".py")] or [f"no .py file in {up.name}"]
        except zipfile.BadZipFile:
            return [up.name]
    return [up.name]


def _add(project, handle) -> None:
    with st.expander("Add a dataset", expanded=not api.project_datasets(project)):
        c1, c2, c3 = st.columns([2, 1, 1])
        name = c1.text_input("Name", key="data_name", placeholder="e.g. val-images")
        preset = c2.selectbox("Preprocessing", PRESETS, key="data_preset",
                              help="Image datasets: how pictures become the model's input (every field can be "
                                   "edited once the dataset is added)")
        split = c3.slider("Calibration part", 0.0, 1.0, 0.5, 0.05, key="data_split",
                          help="The rest is the evaluation part (fixed seed)")
        ups = st.file_uploader("Images (.jpg/.png/...), WAV or .npy files as they are, a zip of them (sub-folders = "
                               "labels), or one .npz / .jsonl / load_data() .py file",
                               type=["zip", "npz", "jsonl", "py", *LOOSE], accept_multiple_files=True,
                               key="data_upload")
        up = _one_upload(ups or [])
        kind = st.selectbox("Kind", KINDS, key="data_kind", format_func=KIND_LABELS.get,
                            help="auto never runs code: a .py file in a zip is listed as ignored. A data-loader "
                                 "script runs only when you choose the script kind here.")
        if kind == "script":
            named = ", ".join(_scripts_in(up)[:3]) if up is not None else ""
            st.warning(f"**{widgets.md_escape(named or 'the uploaded .py file', 120)}** will be "
                       "executed as the studio's user, with its rights (its reads are not fenced): choose this "
                       "only for code you trust.")
        elif up is not None and up.name.lower().endswith(".py"):
            st.info("A .py file is a data-loader script: it runs only if you choose the kind "
                    "'script (executes the .py)'.")
        request = DatasetAddRequest(name=name, kind=kind, model=handle.path.name if handle is not None else None,
                                    preset=None if preset == PRESETS[0] else preset, split=float(split))
        cols = st.columns([1, 1, 3])       # the facade runs the request the hint prints (the model opened here)
        if cols[0].button("Add upload", disabled=up is None, key="data_add_upload"):
            ds = widgets.guarded(lambda: api.add_dataset_upload(project, up.name, up.data, request, model=handle),
                                 spinner="Importing the samples…")
            if ds is not None:
                st.session_state["data_selected"] = ds.id
                st.rerun()
        if cols[1].button("Add sample photos", key="data_add_photos",
                          help="12 free photos (4 subjects) that ship with the studio"):
            photos = replace(request, name=name or "sample-photos", kind="auto")
            ds = widgets.guarded(lambda: api.add_dataset(project, api.sample_photos_folder(), photos, model=handle),
                                 spinner="Importing the photos…")
            if ds is not None:
                st.session_state["data_selected"] = ds.id
                st.rerun()
        widgets.cli_hint(request.command(up.name if up is not None else "DIR", project=project.id))


def _table(project) -> list:
    rows, found = [], []
    for row in api.project_datasets(project):
        ds = widgets.guarded(lambda r=row: api.dataset(project, r.id))
        if ds is None:
            continue
        found.append(ds)
        rows.append({"name": ds.name, "kind": ds.kind, "samples": len(ds), "skipped": len(ds.skipped),
                     "calibration": len(ds.calibration), "evaluation": len(ds.evaluation),
                     "preprocessing": ds.recipe.preset if ds.recipe else "-"})
    if rows:
        widgets.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    return found


def _detail(project, ds, handle) -> None:
    st.subheader(widgets.md_escape(ds.name, 80))
    st.caption(widgets.md_escape(ds.summary(), 300))
    if ds.skipped:
        with st.expander(f"{len(ds.skipped)} file(s) skipped"):
            widgets.dataframe(pd.DataFrame([{"file": n, "why": w} for n, w in ds.skipped]), hide_index=True)
    edited = recipe_editor.edit(ds, handle, project.id) if ds.kind == "image" else None
    if handle is not None:
        recipe_editor.preview(ds, handle, edited)
        _evaluate(project, ds, handle)
    if st.button("Delete this dataset…", key="data_delete"):
        st.session_state[_CONFIRM] = ds.id
    if st.session_state.get(_CONFIRM) == ds.id:
        st.warning("Delete the dataset, its samples and golden outputs?")
        yes, no = st.columns(2)
        if yes.button("Yes, delete", key="data_delete_yes"):
            if widgets.guarded(lambda: api.remove_dataset(project, ds.id) or True):
                st.session_state.pop(_CONFIRM, None)
                st.session_state.pop("data_selected", None)
                st.rerun()
        if no.button("Cancel", key="data_delete_no"):
            st.session_state.pop(_CONFIRM, None)
            st.rerun()


def _evaluate(project, ds, handle) -> None:
    st.markdown("**Task metrics against the golden outputs**")
    tasks = task_picker(handle, "data")
    c1, c3 = st.columns([3, 1])
    engine = c1.selectbox("Engine", list(ENGINES), key="data_engine")
    target = target_picker(handle, tasks, "data", label="Target")
    settings = {"dataset": ds.id, "engine": engine, "target": target, "tasks": str(tasks)}
    request = DatasetEvalRequest(model=handle.path.name, engine=ENGINES[engine], goal=target, tasks=tasks or {})
    if c3.button("Evaluate", key="data_eval", disabled=not ds.evaluation):     # the request its hint prints
        report = widgets.guarded(lambda: api.evaluate_on_dataset(ds, request, model=handle, tasks=tasks),
                                 spinner="Running the evaluation part…")
        if report is not None:
            state.keep_result("data_report", report.to_dict(), settings)
    report = state.bound_result("data_report", settings)     # this model, version, dataset and settings only
    if report and report.get("dataset") == ds.name:
        widgets.dataframe(pd.DataFrame(widgets.task_metric_rows(report["outputs"])), hide_index=True, width="stretch")
        if report.get("target"):
            (st.success if report["target_met"] else st.error)(
                f"Target {widgets.md_escape(report['target'], 80)}: {'met' if report['target_met'] else 'missed'}")
        for note in report.get("notes", []):
            st.caption(widgets.md_escape(note, 200))
    widgets.cli_hint(request.command(ds.name, project=project.id))


def render() -> None:
    st.title("Data")
    project = state.ensure_project()
    handle = state.current_handle() if state.current_version() is not None else None
    if handle is None:
        st.caption("Open a model on the Overview page to see samples as it gets them and to evaluate it.")
    _add(project, handle)
    found = _table(project)
    if not found:
        st.info("No dataset yet: add a zip of images, a tensor file or a load_data() script, or the sample photos.")
        return
    names = {d.id: d.name for d in found}
    chosen = st.selectbox("Dataset", list(names), format_func=lambda i: names[i], key="data_selected")
    ds = next(d for d in found if d.id == chosen)
    _detail(project, ds, handle)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
