"""Verify: compare two versions, or one version on two engines, on the same inputs;
optionally find the first diverging layer (chunked, bounded memory)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from studio import api
from studio.core.requests import CompareRequest
from studio.ui import state, widgets
from studio.ui.inputs_picker import inputs_picker
from studio.ui.task_picker import target_picker, task_picker

ENGINES = {row["name"]: row["label"] for row in api.engines()}      # the engine table's rows
CLI_ENGINE = {row["name"]: row["cli"] for row in api.engines()}
OV_PRECISIONS = ["f32", "bf16", "f16", "default"]
_RESULT = "verify_result"


def _fmt(x, spec=".3g"):
    return "" if x is None else format(x, spec)


def _outputs_table(result) -> pd.DataFrame:
    rows = []
    for d in result.comparison.outputs.values():
        rows.append({"output": d.name, "shape": str(list(d.ref_shape or ())) if d.ref_shape == d.got_shape
                     else f"{list(d.ref_shape or ())} vs {list(d.got_shape or ())}",
                     "max abs": _fmt(d.max_abs), "max rel": _fmt(d.max_rel), "rel L2": _fmt(d.rel_l2),
                     "cosine": _fmt(d.cosine, ".6f"), "top-1": _fmt(d.top1_agreement, ".2f"),
                     "top-5": _fmt(d.top5_overlap, ".2f"), "task": d.task,
                     "verdict": "ok" if d.match else "differs",
                     "compared as": d.mode + (" (reference at noise level)" if d.noise_floor else ""),
                     "note": d.note})
    return pd.DataFrame(rows)


def _show(result, key: str) -> None:
    if result.ok:
        st.success(widgets.md_escape("PASS: " + result.summary(), 500))
    else:
        st.error(widgets.md_escape("FAIL: " + result.summary(), 500))
    st.caption(widgets.md_escape(f"reference: {result.reference.describe()} · candidate: "
                                 f"{result.candidate.describe()}", 400))
    st.caption(widgets.md_escape(f"inputs: {result.feeds.get('source', '')} · tolerance: {result.tolerance_note}",
                                 400))
    widgets.dataframe(_outputs_table(result), hide_index=True, width="stretch")
    for note in result.notes_beside_summary():
        st.warning(widgets.md_escape(note, 400))
    task = (result.extra or {}).get("task")
    if task:
        st.markdown("#### Task metrics on the dataset (candidate against the reference's golden outputs)")
        widgets.dataframe(pd.DataFrame(widgets.task_metric_rows(task["outputs"])), hide_index=True, width="stretch",
                     key=f"{key}_task")
        if task.get("target"):
            (st.success if task["target_met"] else st.error)(
                widgets.md_escape(f"Target {task['target']}: {'met' if task['target_met'] else 'missed'}", 200))
    lw = result.layerwise
    if lw is None:
        return
    st.markdown("#### First diverging layer")
    st.markdown(widgets.md_escape(lw.summary(), 400))
    st.caption(f"{lw.compared} tensors compared in {lw.chunks} chunk(s) of at most "
               f"{widgets.fmt_bytes(lw.chunk_bytes)}; {lw.unmatched} without a counterpart (fused or renamed); "
               f"{widgets.md_escape(lw.tolerance, 80)}; worker peak {widgets.fmt_bytes(lw.peak_worker_rss_bytes)}")
    if lw.layers:
        st.plotly_chart(api.layer_error_figure(lw), width="stretch", key=f"{key}_chart")
        worst = sorted((x for x in lw.layers if x.rel_l2 is not None), key=lambda x: -x.error)[:20]
        widgets.dataframe(pd.DataFrame([{"layer": x.node, "op": x.op_type, "tensor": x.tensor,
                                    "rel L2": _fmt(x.rel_l2), "cosine": _fmt(x.cosine, ".5f"),
                                    "matched by": x.matched_by, "candidate node": x.candidate_node or ""}
                                   for x in worst]), hide_index=True, width="stretch")


def render() -> None:
    st.title("Verify")
    ws = state.workspace()
    current = state.current_version()
    if current is None:
        st.info("Open a model on the Overview page first.")
        return
    versions = {v.id: v for v in ws.versions}
    labels = {v.id: f"{v.id} · {v.label}" for v in ws.versions}
    mode = st.radio("Compare", ["Two engines", "Two versions"], horizontal=True, key="verify_mode")
    left, right = st.columns(2)
    if mode == "Two versions":
        ids = list(versions)
        a = left.selectbox("Reference version", ids, index=0, format_func=labels.__getitem__, key="verify_a")
        b = right.selectbox("Candidate version", ids, index=ids.index(current.id), format_func=labels.__getitem__,
                            key="verify_b")
        engine = left.selectbox("Engine", list(ENGINES), format_func=ENGINES.__getitem__, key="verify_engine")
        engine_b = engine
    else:
        a = b = current.id
        engine = left.selectbox("Engine A", list(ENGINES), index=0, format_func=ENGINES.__getitem__,
                                key="verify_engine")
        engine_b = right.selectbox("Engine B", list(ENGINES), index=1, format_func=ENGINES.__getitem__,
                                   key="verify_engine_b")
    ov_a = left.selectbox("OpenVINO precision (A)", OV_PRECISIONS, key="verify_ov_a",
                          help="f32 is pinned by default; 'default' lets OpenVINO choose (bf16 on CPUs that have it)") \
        if engine == "openvino" else "f32"
    ov_b = right.selectbox("OpenVINO precision (B)", OV_PRECISIONS, key="verify_ov_b") \
        if engine_b == "openvino" else "f32"
    choice = inputs_picker("verify_inputs")
    layerwise = st.checkbox("Find the first diverging layer (layer-wise comparison)", key="verify_layerwise")
    threshold = None
    if layerwise:
        threshold = st.number_input("Layer threshold (relative L2 error; 0 = automatic)", min_value=0.0,
                                    value=0.0, format="%.4f", key="verify_threshold") or None
    ha, hb = ws.handle(a), ws.handle(b)
    tasks = task_picker(ha, "verify")
    target = target_picker(ha, tasks, "verify", label="Task-metric target (with a dataset)") \
        if choice.dataset is not None else ""
    if not choice.ready:
        st.caption("Upload the input file to compare on it.")
    settings = {"a": a, "b": b, "sha_a": ha.sha256, "sha_b": hb.sha256, "engine": engine, "engine_b": engine_b,
                "ov": [ov_a, ov_b], "inputs": choice.settings(), "layerwise": layerwise, "threshold": threshold,
                "tasks": str(tasks), "target": target}
    request = CompareRequest(engine=CLI_ENGINE[engine], engine_b=CLI_ENGINE[engine_b], ov_precision=ov_a,
                             ov_precision_b=ov_b, dims=state.dims(), count=choice.count, layerwise=layerwise,
                             layer_threshold=threshold, tasks=tasks or {}, goal=target or None,
                             dataset=getattr(choice.dataset, "name", None))
    if st.button("Compare", type="primary", key="verify_run", disabled=not choice.ready):
        def work(on_tick):                  # the request its hint prints; the uploads are this session's files
            return api.compare(ha, hb, request, files={"inputs": choice.inputs, "images": choice.images},
                               labels=(labels[a], labels[b]), pool_key=state.session_id(), on_tick=on_tick,
                               dataset=choice.dataset)
        result = widgets.run_stoppable("Comparing", work)
        if result is not None:
            state.keep_result(_RESULT, result, settings)
            if result.layerwise is not None:      # per-node error: the Graph page's "numeric error" overlay
                state.publish_overlay_data(ha.sha256, "node_errors", result.layerwise.node_errors())
    result = state.bound_result(_RESULT, settings)     # computed on what is on screen, else not shown
    if result is not None:
        _show(result, "verify")
    elif state.result_is_stale(_RESULT, settings):
        st.info("No comparison for this model, version and these settings yet: press Compare.")
    names = widgets.hint_file_names([(ha.path.name, a), (hb.path.name, b)]) if a != b else [ha.path.name] * 2
    widgets.cli_hint(request.command(*names, files=False, extra=choice.cli_options))

if __name__ == "__main__":  # run by st.navigation as a page script
    render()
