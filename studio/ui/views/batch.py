"""Batch: run stages over many models (sample models, this session's models, a folder when
the server is not shared) on the local pool or the configured Dask cluster, with progress
and ETA, the result table and the HTML/CSV/JSON report. Results land in one folder of the
session's workspace, so a rerun skips finished model x stage pairs (unless forced).

The cluster address is configuration only (ONNX_STUDIO_CLUSTER or ``serve --cluster``):
the page shows it, never asks for it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from sample_models.catalog import CATALOG
from studio import api
from studio.batch import facade as batch_api
from studio.core.paths import confine
from studio.core.requests import BatchRequest
from studio.ui import state, widgets

_RESULT = "batch_result"
STAGE_CHOICES = ("inspect", "check", "optimize", "precision", "profile", "export")
ENGINE_CHOICES = ("onnxruntime", "openvino")


def _sources() -> tuple[list[Path], list[str]]:
    """Sample models, the project's models (each at a version picked here) and, off shared servers, a folder;
    with the names the command hint gives them, the ones the user knows (as every page's hint): a model's
    file name (``<stem>-<model>-<version>.onnx`` where versions share one), the folder as typed, never the
    project store's path."""
    paths: list[Path] = []
    names = [m.name for m in CATALOG]
    samples = st.multiselect("Sample models", names, key="batch_samples")
    paths += [m.path for m in CATALOG if m.name in samples]
    shown = [p.name for p in paths]
    project = state.project()
    options: dict[str, tuple] = {}
    for m in state.models() if project is not None else []:
        model = widgets.guarded(lambda mid=m.id: api.project_model(project, mid))
        for v in (model.versions if model is not None else ()):
            options[f"{m.id}:{v.id}"] = (model, v, f"{m.name} · {v.id} · {v.label} · {v.sha256[:8]}")
    chosen = st.multiselect("This project's models", list(options), format_func=lambda k: options[k][2],
                            key="batch_versions")
    stored: list[tuple[str, str]] = []
    for key in chosen:
        model, v, _label = options[key]
        h = widgets.guarded(lambda model=model, v=v: model.handle(v.id))
        if h is not None:
            paths.append(h.path)
            stored.append((h.path.name, key))
    shown += widgets.hint_file_names(stored)
    if state.shared_mode():
        st.caption("Folders are not available on a shared server: pick sample models or upload models.")
    else:
        typed = st.text_input("Folder of .onnx models (under the server's path root)", key="batch_folder").strip()
        if typed:
            folder = widgets.guarded(lambda: confine(typed, state.path_root(), label="folder"))
            if folder is not None:
                paths.append(folder)
                shown.append(typed)
    return paths, shown


def _executor() -> tuple[str | None, str | None]:
    """(cluster address or None, target or None); the address comes from configuration only."""
    cluster = widgets.guarded(batch_api.configured_cluster)
    if not cluster:
        st.caption("Executor: the local pool of sandbox workers (no cluster is configured: set "
                   "ONNX_STUDIO_CLUSTER or start the server with --cluster).")
        return None, None
    where = st.radio("Executor", ["local pool", "cluster"], horizontal=True, key="batch_executor")
    if where != "cluster":
        return None, None
    st.caption(widgets.md_escape(f"cluster {cluster} (from the server's configuration)", 200))
    targets = widgets.guarded(lambda: batch_api.cluster_targets(cluster)) or []
    target = st.selectbox("Target for optimize / precision / profile", ["any worker", *targets], key="batch_target")
    return cluster, None if target == "any worker" else target


def _run(paths: list[Path], request: BatchRequest, cluster: str | None, target: str | None, settings: dict) -> None:
    bar = st.progress(0.0, text="starting…")

    def on_progress(done: int, total: int, eta: float | None, outcome) -> None:  # noqa: ANN001
        eta_text = f" · ETA {eta:.0f} s" if eta is not None and done < total else ""
        last = f" · {outcome.model} {outcome.stage}: {outcome.status}" if outcome is not None else ""
        bar.progress(done / max(total, 1), text=widgets.md_escape(f"{done}/{total}{eta_text}{last}", 160))

    project = state.ensure_project()
    out = project.root / "artifacts" / "batch"      # one folder per project: a rerun resumes it
    def run():
        with api.job(project, "batch", {"stages": list(request.stages), "models": len(paths),
                                        "request": request.to_dict()}) as j:
            result = batch_api.batch(paths, out, request, cluster=cluster, target=target, on_progress=on_progress,
                                     pool_key=state.session_id())
            for kind in ("html", "csv", "json"):
                if result.files.get(kind):
                    j.record_artifact(result.files[kind], f"batch report ({kind})")
            return result

    result = widgets.guarded(run)
    bar.empty()
    if result is not None:
        state.keep_result(_RESULT, result, settings, project_only=True)


def _table(result) -> pd.DataFrame:  # noqa: ANN001 - studio.batch.results.BatchResult
    rows = []
    for r in result.rows:
        row = {"model": r.model.name, "status": r.status()}
        for s in result.stages:
            o = r.outcomes.get(s)
            row[s] = o.status if o else (r.model.error or "-")[:80]
            row[f"{s} verdict"] = o.verdict if o else ""
        rows.append(row)
    return pd.DataFrame(rows)


def _results(result) -> None:  # noqa: ANN001
    widgets.metric_row([("models", str(len(result.rows))), ("tasks run", str(result.ran)),
                        ("already finished", str(result.skipped)), ("seconds", f"{result.seconds:.1f}"),
                        ("executor", result.executor)])
    widgets.dataframe(_table(result), hide_index=True, width="stretch", key="batch_table")
    c1, c2, c3 = st.columns(3)
    for col, kind, mime in ((c1, "html", "text/html"), (c2, "csv", "text/csv"), (c3, "json", "application/json")):
        path = result.files.get(kind)
        if path is not None and Path(path).is_file():
            col.download_button(f"Download report ({kind.upper()})", Path(path).read_bytes(),
                                file_name=f"batch.{kind}", mime=mime, key=f"batch_download_{kind}")


def render() -> None:
    st.title("Batch")
    paths, shown = _sources()
    stages = st.multiselect("Stages", list(STAGE_CHOICES), default=["inspect", "check"], key="batch_stages")
    engines = st.multiselect("Engines for check and profile", list(ENGINE_CHOICES), default=["onnxruntime"],
                             key="batch_engines")
    cluster, target = _executor()
    force = st.checkbox("Run finished model x stage pairs again", key="batch_force")
    settings = {"paths": [str(p) for p in paths or ()], "stages": list(stages), "engines": list(engines),
                "cluster": bool(cluster), "target": target, "force": bool(force)}
    request = BatchRequest(stages=list(stages) or ["inspect"], engines=list(engines) or ["onnxruntime"],
                           force=force)
    if st.button("Run batch", type="primary", key="batch_run", disabled=not paths or not stages):
        _run(paths, request, cluster, target, settings)
    widgets.cli_hint(request.command(shown if paths and len(paths) <= 3 else ["MODELS..."],
                                     target=target, raw="--cluster $ONNX_STUDIO_CLUSTER" if cluster else ""))
    result = state.bound_result(_RESULT, settings, project_only=True)    # this project and these settings only
    if result is not None:
        _results(result)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
