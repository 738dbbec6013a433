"""Export: deployment artifacts for ONNX Runtime, OpenVINO, TensorRT and Triton,
each reloaded and verified, in one bundle (folder + zip) with a manifest and a
report. Failures are shown first. All logic is in ``studio/export`` behind
``api.export``; the equivalent CLI command is shown."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from studio import api
from studio.core.errors import StudioError
from studio.core.fmt import speedup_text
from studio.core.paths import confine
from studio.core.requests import ExportRequest
from studio.ui import state, widgets

_RESULT = "onnx_studio_export_result"
_LABELS = {**{row["name"]: row["export_label"] or row["label"] for row in api.engines()}, "triton": "Triton"}
MAX_DOWNLOAD_BYTES = 300 * 2**20
MAX_ARTIFACT_DOWNLOAD_BYTES = 100 * 2**20


def _dynamic_inputs(handle) -> list[tuple[str, list]]:
    init = {t.name for t in handle.proto.graph.initializer}
    out = []
    for vi in handle.proto.graph.input:
        if vi.name in init:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in vi.type.tensor_type.shape.dim]
        if any(not isinstance(d, int) for d in dims):
            out.append((vi.name, dims))
    return out


def _shapes(handle) -> dict:
    """MIN:OPT:MAX per dynamic input (empty: derived from the model)."""
    dynamic = _dynamic_inputs(handle)
    if not dynamic:
        return {}
    set_dims = ", ".join(f"{k}={v}" for k, v in state.dims().items())
    st.caption("Dynamic inputs: give MIN:OPT:MAX shapes (e.g. 1x3x224x224:4x3x224x224:8x3x224x224) or one static "
               "shape; empty derives a TensorRT profile from the dims and verifies at "
               + (f"the model's dims ({widgets.md_escape(set_dims, 120)}, set on Overview)." if set_dims
                  else "batch 1."))
    shapes = {}
    for i, (name, dims) in enumerate(dynamic[:16]):
        text = st.text_input(f"{name[:60]} {dims}"[:120], key=f"exp_shape_{i}", placeholder="MIN:OPT:MAX")
        if text.strip():
            try:
                api.parse_shape_spec(f"{name}={text.strip()}")          # its check, shown here
                shapes[name] = text.strip()
            except StudioError as exc:
                widgets.show_error(exc)
    return shapes


def _calibration() -> str | None:
    if state.shared_mode():
        st.caption("INT8 calibration folders are not available on a shared server; random calibration is used.")
        return None
    text = st.text_input("Calibration folder (images or .npz), inside the workspace root", key="exp_calibration")
    if not text.strip():
        return None
    try:
        return str(confine(text.strip(), state.path_root(), label="calibration folder"))
    except StudioError as exc:
        widgets.show_error(exc)
        return None


def _libraries() -> tuple[list[str], list[str]]:
    """Custom-op libraries (ONNX Runtime and OpenVINO), paths inside the workspace root; none on a shared server."""
    if state.shared_mode():
        return [], []
    with st.expander("Custom-op libraries (models with custom ops)"):
        st.caption("Built by the Plugins page or `onnx-studio plugin --build` (ort-cpp, openvino-cpp): loaded when "
                   "the artifacts are optimized, converted and verified, and shipped in the bundle.")
        out = []
        for key, label in (("exp_ort_custom_ops", "ONNX Runtime custom-op library (.so), inside the workspace root"),
                           ("exp_ov_extension", "OpenVINO extension (.so), inside the workspace root")):
            text = st.text_input(label, key=key)
            paths = []
            for item in (t.strip() for t in text.split(",") if t.strip()):
                try:
                    paths.append(str(confine(item, state.path_root(), label="library")))
                except StudioError as exc:
                    widgets.show_error(exc)
            out.append(paths)
    return out[0], out[1]


def _run(handle, version, request: ExportRequest, targets: list[str]) -> None:
    ws = state.workspace()
    status = {t: st.empty() for t in targets}
    for t in targets:
        status[t].caption(f"{_LABELS[t]}: waiting")
    prep = st.empty()

    def progress(target: str, stage: str) -> None:
        holder = status.get(target, prep)
        holder.caption(f"{_LABELS.get(target, target)}: {widgets.md_escape(stage, 160)}")

    def work(tick):
        # A job row around the export; the bundle is kept in the project as the job's artifact.
        with state.job("export", {"targets": targets, "preset": request.preset, "precision": request.precision,
                                  "request": request.to_dict()}) as job:
            res = api.export(handle, request, job.dir, pool_key=state.session_id(), on_tick=tick,
                             on_progress=progress)
            kept = res.zip_path if res.zip_path is not None else res.bundle
            if kept is not None and Path(kept).exists():
                job.record_artifact(kept, "export bundle", model_id=ws.id, version_id=version.id)
            return res

    result = widgets.run_stoppable("Exporting", work)
    for holder in (*status.values(), prep):
        holder.empty()
    if result is None:
        return
    state.keep_result(_RESULT, {"result": result, "version": version.id,
                                "command": request.command(handle.path.name)})


def _downloads(result) -> None:
    st.markdown("#### Downloads")
    zip_path = result.zip_path
    if zip_path is not None and zip_path.exists():
        size = zip_path.stat().st_size
        if size <= MAX_DOWNLOAD_BYTES:
            st.download_button(f"Download the bundle ({widgets.fmt_bytes(size)} zip)", data=zip_path.read_bytes(),
                               file_name=zip_path.name, mime="application/zip", key="exp_download_zip", type="primary")
        else:
            st.caption(f"The bundle is {widgets.fmt_bytes(size)}: too large to download here; use the CLI command.")
    report = result.bundle / "report.html"
    if report.exists():
        st.download_button("Download the report (HTML)", data=lambda: report.read_bytes(), file_name="report.html",
                           mime="text/html", key="exp_download_report")
    with st.expander("Download single artifacts"):
        for i, t in enumerate(result.targets):
            for j, a in enumerate(t.artifacts):
                path = result.bundle / a.path
                if not path.is_file() or path.stat().st_size > MAX_ARTIFACT_DOWNLOAD_BYTES:
                    st.caption(f"{widgets.md_escape(a.path, 120)}: in the bundle zip")
                    continue
                st.download_button(a.path, data=lambda p=path: p.read_bytes(), file_name=Path(a.path).name,
                                   key=f"exp_download_{i}_{j}")


def _bench_chart(result) -> None:
    rows = api.export_bench_rows(result)
    if not rows:
        return
    st.markdown("#### Timing (indicative)")
    df = pd.DataFrame(rows)
    labels = [f"{r['target']}: {r['artifact']}" for r in rows]
    fig = go.Figure(go.Bar(x=labels, y=[r["session creation ms"] or 0 for r in rows], name="session creation ms"))
    fig.update_layout(height=300, margin={"t": 20, "b": 20}, yaxis_title="session creation, ms")
    st.plotly_chart(fig, width="stretch", key="exp_bench_chart")
    widgets.dataframe(df, hide_index=True, width="stretch", key="exp_bench_table")
    speed = result.manifest.get("benchmarks", {}).get("onnxruntime", {}).get("session_speedup")
    if speed:
        st.caption(f"ONNX Runtime session creation: {speedup_text(speed)} the original with ORT defaults.")


def _report(saved: dict) -> None:
    result = saved["result"]
    for line in result.failures:                      # failures first
        st.error(widgets.md_escape(line, 500), icon="❌")
    if result.ok:
        st.success("Every artifact that can run here was reloaded by its engine and verified.")
    st.markdown("#### Targets")
    widgets.dataframe(pd.DataFrame(api.export_target_rows(result)), hide_index=True, width="stretch",
                 key="exp_targets_table")
    st.markdown("#### Artifacts")
    widgets.dataframe(pd.DataFrame(api.export_artifact_rows(result)), hide_index=True, width="stretch",
                 key="exp_artifacts_table")
    notes = [(t.target, n) for t in result.targets for n in t.notes]
    if notes:
        with st.expander(f"Notes ({len(notes)})"):
            for target, note in notes:
                st.markdown(f"- **{target}**: {widgets.md_escape(note, 400)}")
    _bench_chart(result)
    _downloads(result)
    st.caption(f"Bundle folder: {widgets.md_escape(result.bundle.name, 120)} (in this session's workspace)")
    widgets.cli_hint(saved["command"])


def render() -> None:
    opened = widgets.page_model("Export")
    if opened is None:
        return
    handle, version = opened
    c1, c2, c3 = st.columns([3, 2, 2])
    converted = [row["name"] for row in api.engines() if row["kind"] == "converted" and row["export_label"]]
    targets = c1.multiselect("Targets", list(api.EXPORT_TARGETS) + converted,
                             default=list(api.EXPORT_TARGETS), format_func=_LABELS.__getitem__,
                             key="exp_targets")
    presets = ["none", *[p["name"] for p in api.list_passes()["presets"]]]
    preset = c2.selectbox("Optimization preset first", presets, key="exp_preset",
                          help="run a preset (verified pass by pass) before exporting; TensorRT always gets the "
                               "tensorrt preset")
    precision = c3.radio("Precision", ["fp32", "fp16", "int8"], horizontal=True, key="exp_precision",
                         help="fp16: OpenVINO FP16-compressed weights, TensorRT --fp16; int8: QDQ quantization")
    c4, c5 = st.columns(2)
    ort_level = c4.selectbox("ONNX Runtime optimization level", list(api.ORT_LEVELS),
                             index=api.ORT_LEVELS.index("extended"),
                             key="exp_ort_level",
                             help="basic/extended: portable ONNX; all: adds NCHWc layout ops for this CPU "
                                  "(hardware-specific)")
    max_batch = int(c5.number_input("Max batch (Triton, TensorRT profile)", min_value=1, max_value=4096, value=8,
                                    key="exp_max_batch"))
    default_ir = ["fp16"] if precision == "fp16" else ["fp32"]
    ov_irs = st.multiselect("OpenVINO IRs", list(api.OV_PRECISIONS), default=default_ir, key=f"exp_ov_irs_{precision}",
                            help="fp32 and/or fp16 (FP16-compressed weights); each IR is verified, the first is "
                                 "model.xml (served by Triton)")
    ov_precisions = ov_irs if ov_irs and ov_irs != default_ir else None
    calibration = _calibration() if precision == "int8" else None
    method = st.selectbox("INT8 calibration method", list(api.CALIBRATION_METHODS), key="exp_calibration_method",
                          help="minmax: the full activation range; entropy and percentile clip outliers") \
        if precision == "int8" else "minmax"
    shapes = _shapes(handle)
    ort_custom_ops, ov_extensions = _libraries()
    chosen_preset = None if preset == "none" else preset
    chosen = list(targets or api.EXPORT_TARGETS)
    request = ExportRequest(targets=["all"] if set(chosen) == set(api.EXPORT_TARGETS) else chosen, preset=chosen_preset, precision=precision,
                            ov_precisions=ov_precisions, calibration=calibration, calibration_method=method,
                            shapes=[f"{n}={text}" for n, text in shapes.items()], dims=state.dims(),
                            ort_level=ort_level, max_batch=max_batch, ort_custom_ops=ort_custom_ops,
                            ov_extensions=ov_extensions)
    if st.button("Export", type="primary", key="exp_run", disabled=not targets):
        _run(handle, version, request, list(targets))
    saved = state.bound_result(_RESULT)             # this project's model and version only
    if saved:
        _report(saved)
    else:
        widgets.cli_hint(request.command(handle.path.name))


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
