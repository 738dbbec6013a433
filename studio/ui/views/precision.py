"""Precision: build fp16 / bf16 / INT8 variants, see each one's accuracy and latency
against fp32, and keep the ones you want as workspace versions."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from studio import api
from studio.core.requests import PrecisionRequest
from studio.ui import state, widgets
from studio.ui.inputs_picker import inputs_picker
from studio.ui.task_picker import target_picker, task_picker

_REPORT = "precision_report"


def _fmt(x, spec):
    return "" if x is None else format(x, spec)


def _table(report) -> pd.DataFrame:
    return pd.DataFrame([{
        "variant": v.name, "": "★ recommended" if v.recommended else "", "engine": v.engine,
        "ms (p10)": _fmt(v.latency_p10_ms, ".2f"), "median ms": _fmt(v.median_ms, ".2f"),
        "× fp32": _fmt(v.ratio, ".2f"),
        "95 % CI": f"{v.ratio_ci[0]:.2f}–{v.ratio_ci[1]:.2f}" if v.ratio_ci else "-", "cosine": _fmt(v.cosine, ".5f"),
        "top-1": _fmt(v.top1, ".2f"), "top-5": _fmt(v.top5, ".2f"),
        "target": "met" if v.meets_target else ("missed" if v.cosine is not None or v.task or v.status == "ok"
                                                else ""),
        "task metric": "" if not v.task else ("n/a" if v.task.get("target_value") is None
                                              else f"{v.task['target_value']:.4g}"),
        "next-token agreement": _fmt((v.generation or {}).get("next_token_agreement"), ".4f"),
        "KL (nats)": _fmt((v.generation or {}).get("mean_kl"), ".3g"),
        "status": v.status, "notes": " · ".join(v.notes) or (v.error or "")} for v in report.variants])


_WEIGHT_ONLY = ("int4", "int8-weights", "int4-ov", "int8-weights-ov")


def _weight_options(chosen: list[str]) -> dict:
    """Block size, symmetry, accuracy level and NNCF ratio for the weight-only variants (when one is chosen)."""
    if not any(n in _WEIGHT_ONLY for n in chosen):
        return {}
    with st.expander("Weight-only int4 / int8 options", expanded=False):
        a, b, c, d = st.columns(4)
        block = a.selectbox("Block (group) size", ["auto", "16", "32", "64", "128", "256"], key="precision_block",
                            help="auto: the largest of 128/64/32/16 dividing every MatMul's K")
        symmetric = b.checkbox("Symmetric", value=True, key="precision_symmetric")
        level = c.selectbox("Accuracy level (ORT)", [0, 1, 2, 3, 4], key="precision_level",
                            help="MatMulNBits compute type: 0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8")
        ratio = d.slider("int4 ratio (NNCF)", 0.1, 1.0, 1.0, 0.05, key="precision_ratio")
    return {"block_size": block, "symmetric": symmetric, "accuracy_level": int(level), "ratio": float(ratio)}


def _matmul_errors(report) -> None:
    """Which quantized MatMul hurts: each weight-only variant's per-MatMul output error, worst first."""
    for v in report.variants:
        if v.matmul_errors:
            with st.expander(f"{v.name}: error of each quantized MatMul vs fp32 (worst first)"):
                widgets.dataframe(pd.DataFrame([{"MatMul": e["node"], "relative L2": f"{e['rel_l2']:.4g}",
                                            "added over earlier MatMuls": f"{e['added']:.4g}",
                                            "cosine": _fmt(e.get("cosine"), ".5f")} for e in v.matmul_errors]),
                             hide_index=True, width="stretch")


def _save_buttons(report, parent_id: str, source_sha256: str) -> None:
    # ONNX variants only: an OpenVINO IR (NNCF), a .mnn or a .tflite is an engine artifact, not a version
    saveable = [v for v in report.variants if v.path is not None and v.status == "ok"
                and str(v.path).endswith(".onnx")]
    if not saveable:
        return
    st.markdown("#### Keep a variant as a workspace version")
    cols = st.columns(min(4, len(saveable)))
    for i, v in enumerate(saveable):
        if cols[i % len(cols)].button(f"Save {v.name}", key=f"precision_save_{v.name}"):
            provenance = report.provenance(v.name, source_sha256)     # the same as the CLI's --project run
            # the content the report was computed on must be this version's: the project refuses otherwise
            saved = widgets.guarded(lambda v=v: api.add_version(
                state.workspace(), v.path, label=f"{v.name}", parent=parent_id, provenance=provenance,
                source_sha256=source_sha256, refuse_same=True))
            if saved is not None:
                st.success(widgets.md_escape(f"saved as {saved.id} · {saved.label}", 200))


def render() -> None:
    opened = widgets.page_model("Precision")
    if opened is None:
        return
    handle, current = opened
    auto = list(api.default_precision_variants(handle.proto))
    chosen = st.multiselect("Variants", list(api.PRECISION_VARIANTS), default=auto, key="precision_variants",
                            format_func=lambda n: f"{n} — {api.PRECISION_VARIANTS[n].label}")
    st.caption("INT8 calibration data")
    choice = inputs_picker("precision_calib", images_label="Calibration images", count_label="Random calibration sets",
                           default_count=8, npz_flag="--calibration", images_flag="--calibration")
    method = st.selectbox("INT8 calibration method", ["minmax", "entropy", "percentile"], key="precision_method",
                          help="minmax: the full activation range; entropy and percentile clip outliers")
    tasks = task_picker(handle, "precision")
    task_target = ""
    if choice.dataset is not None:
        task_target = target_picker(handle, tasks, "precision",
                                    label="Task-metric target (judged on the dataset's evaluation part)")
    left, right = st.columns(2)
    if choice.dataset is not None:
        target = 0.99
    else:
        target = left.slider("Accuracy target (worst-output cosine vs fp32)", 0.90, 1.0, 0.99, 0.001,
                             format="%.3f", key="precision_target")
        st.caption("Without a dataset the result is a random-input estimate, not a recommendation: add one on "
                   "the Data page and pick it above.")
    weight_options = _weight_options(chosen)
    budget = right.number_input("Latency measurement budget (s)", 5, 600, 60, key="precision_budget")
    if not choice.ready:
        st.caption("Upload the calibration data to build INT8 variants with it.")
    calibration = None if choice.dataset is not None else (choice.inputs or choice.images)
    request = PrecisionRequest(variants=None if chosen == auto else chosen, calibration=calibration,
                               calibration_method=method,
                               samples=choice.count if calibration is None or choice.images else 8,
                               target_cosine=float(target), goal=task_target or None,
                               dataset=choice.dataset.name if choice.dataset is not None else None, tasks=tasks,
                               dims=state.dims(), latency_budget_s=float(budget), **weight_options)
    settings = {"variants": list(chosen), "calibration": choice.settings(), "method": method, "target": float(target),
                "task_target": task_target, "tasks": str(tasks), "budget": float(budget),
                "weight_options": weight_options}
    if st.button("Build and measure", type="primary", key="precision_run", disabled=not chosen or not choice.ready):
        bar = st.progress(0.0, text="starting")

        def on_progress(i: int, n: int, label: str) -> None:
            bar.progress(min(1.0, i / max(n, 1)), text=label[:120])

        def work(on_tick):
            with state.job("precision", {"variants": chosen, "method": method, "target": float(target)}) as job:
                report = api.precision(handle, request, dataset=choice.dataset, out_dir=job.dir,
                                       pool_key=state.session_id(), on_progress=on_progress, on_tick=on_tick)
                job.message = report.summary()[:300]
                return report
        report = widgets.run_stoppable("Building and measuring variants", work)
        bar.empty()
        if report is not None:
            state.keep_result(_REPORT, (handle.sha256, report), settings)
    stored = state.bound_result(_REPORT, settings)
    if stored is None and state.result_is_stale(_REPORT, settings):
        st.info("No result for this model, version and these settings yet: press Build and measure.")
    if stored is not None:
        source_sha256, report = stored
        (st.success if report.recommended and report.recommended != "fp32" else st.info)(
            widgets.md_escape(report.summary(), 400))
        st.caption(widgets.md_escape(f"calibration: {report.calibration} · judged on: "
                                     f"{report.evaluation.get('source', '')} · baseline: "
                                     f"{report.evaluation.get('baseline', '')}", 400))
        widgets.dataframe(_table(report), hide_index=True, width="stretch")
        _matmul_errors(report)
        st.plotly_chart(api.tradeoff_figure(report), width="stretch", key="precision_tradeoff")
        for note in report.notes:
            st.warning(widgets.md_escape(note, 400))
        _save_buttons(report, current.id, source_sha256)
    given = choice.cli_options if choice.inputs or choice.images else ()
    # the request prints its own command; the picker names the uploaded files, a dataset needs its project
    widgets.cli_hint(request.command(handle.path.name, files=False, extra=[
        ("--project", state.project().id if request.dataset else None), ("--out", "variants/"), *given]))


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
