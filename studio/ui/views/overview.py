"""Overview: open a model (upload, sample, path) and see its summary."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import streamlit as st

from sample_models.catalog import CATALOG
from studio.core.types import shape_text
from studio.core.uploads import UploadedFile
from studio import api
from studio.ui import state, widgets


def _keep_open() -> None:
    """Choosing a sample or typing a path reruns the page: keep the panel open for the next click."""
    st.session_state["open_model_expanded"] = True


def _open_model() -> None:
    upload_tab, sample_tab, path_tab = st.tabs(["Upload", "Sample model", "Path"])
    with upload_tab:
        files = st.file_uploader("ONNX model, with its external-data files or as a .zip bundle",
                                 accept_multiple_files=True, key="uploader")
        if files:
            key = tuple((f.name, f.size, f.file_id) for f in files)
            if st.session_state.get("last_upload") != key:
                st.session_state["last_upload"] = key
                widgets.guarded(lambda: state.add_upload([UploadedFile(f.name, f.getvalue()) for f in files]),
                                spinner="Importing and validating…")
    with sample_tab:
        names = [m.name for m in CATALOG]
        purposes = {m.name: m.purpose for m in CATALOG}
        name = st.selectbox("Sample", names, format_func=lambda n: f"{n} — {purposes[n]}", key="sample_pick",
                            on_change=_keep_open)
        if st.button("Open sample", key="open_sample"):
            sample = next(m for m in CATALOG if m.name == name)
            widgets.guarded(lambda: state.add_model_file(sample.path, label=f"sample {name}"))
    with path_tab:
        if state.shared_mode():
            st.info("Opening files by path is disabled on this shared server; upload the model instead.")
        else:
            st.caption("A file inside the studio's path root: `onnx-studio serve --path-root DIR`, by default the "
                       "workspace's `import/` folder.")
            typed = st.text_input("Model path", key="model_path", on_change=_keep_open)
            if st.button("Open path", key="open_path") and typed:
                widgets.guarded(lambda: state.open_path(typed))


def _dims_inputs(handle) -> None:
    """Values for the model's symbolic input dims (used for FLOPs and memory)."""
    init = {t.name for t in handle.proto.graph.initializer}
    symbolic = sorted({d.dim_param for vi in handle.proto.graph.input if vi.name not in init
                       for d in vi.type.tensor_type.shape.dim if d.dim_param})
    if not symbolic:
        return
    hints = {h.key: h for h in api.dim_hints(handle)}
    with st.expander("Dynamic dims (values used for shapes, FLOPs and memory)"):
        dims = state.dims()
        for name, h in hints.items():
            dims.setdefault(name, h.value)      # the model's own size, not a silent default
        cols = st.columns(min(4, len(symbolic)))
        for i, name in enumerate(symbolic[:16]):
            h = hints.get(name)
            dims[name] = int(cols[i % len(cols)].number_input(
                name[:40], min_value=1, value=int(dims.get(name, 1)), key=f"dim_{i}_{name[:40]}",
                help=f"from the model: {h.source}" if h else "the model does not say; 1 until you set it"))
        if hints:
            st.caption("Suggested by the model: " + ", ".join(
                widgets.md_escape(f"{h.key}={h.value} ({h.source})", 80) for h in hints.values()))


def render() -> None:
    st.title("Overview")
    err = st.session_state.pop("onnx_studio_preload_error", None) or st.session_state.pop("onnx_studio_url_error", None)
    if err:
        widgets.show_error(Exception(err))
    handle = state.current_handle()
    with st.expander("Open a model", expanded=handle is None or st.session_state.pop("open_model_expanded", False)):
        _open_model()
    handle = state.current_handle()
    if handle is None:
        st.info("Upload an ONNX model, open a sample, or give a path to begin.")
        return
    _dims_inputs(handle)
    summary = widgets.guarded(lambda: state.summary(handle, state.dims()), spinner="Inspecting the model…")
    if summary is None:
        return
    s = summary
    st.subheader(f"{widgets.md_escape(s.name, 120)}")
    st.caption(f"sha256 {s.sha256[:16]} · producer {widgets.md_escape(s.producer or '?', 60)} "
               f"{widgets.md_escape(s.producer_version, 30)} · IR {s.ir_version} · opsets "
               + ", ".join(f"{widgets.md_escape(o.domain or 'ai.onnx', 40)} {o.version}"
                           + ("" if o.used else " (unused)") for o in s.opsets))
    nc = s.node_counts
    widgets.metric_row([
        ("Nodes", f"{nc.total:,}"),
        ("Params", widgets.fmt_count(s.params.elements)),
        ("Weights", widgets.fmt_bytes(s.params.bytes)),
        ("FLOPs", widgets.fmt_count(s.flops.flops)),
        ("Peak activations", widgets.fmt_bytes(s.memory.peak_activation_bytes)),
    ])
    st.caption(f"{nc.main} nodes in the main graph, {nc.subgraph_nodes} in {nc.subgraphs} subgraphs, "
               f"{nc.function_nodes} in {nc.functions} local functions. File {widgets.fmt_bytes(s.total_bytes)}.")
    if s.flops.branches:
        shown = "; ".join(f"{widgets.md_escape(b.node, 60)}: then {widgets.fmt_count(b.then_flops)} / else "
                          f"{widgets.fmt_count(b.else_flops)}" for b in s.flops.branches[:3])
        more = f" (+{len(s.flops.branches) - 3} more)" if len(s.flops.branches) > 3 else ""
        st.caption(f"FLOPs of If nodes count the larger branch (only one runs): {shown}{more}.")
    if not s.check_ok:
        st.warning("onnx.checker: " + widgets.md_escape(s.check_message or "", 400))
    if s.shape_inference_error:
        st.warning("Shape inference incomplete: " + widgets.md_escape(s.shape_inference_error, 400))
    counted_as_one = (*s.flops.assumed_dims, *s.flops.unresolved_dims)
    if counted_as_one:
        st.caption("FLOPs and memory count these dims as 1 (set them above to resolve): "
                   + ", ".join(widgets.md_escape(d, 60) for d in counted_as_one[:12]))
    if s.shape_note:
        st.caption(widgets.md_escape(s.shape_note, 200))
    if s.custom_ops:
        st.warning("Custom ops: " + ", ".join(widgets.md_escape(f"{c.domain}::{c.op_type} ×{c.count}", 80)
                                               for c in s.custom_ops))

    left, right = st.columns(2)
    hist = pd.DataFrame([{"op": (f"{o.domain}::" if o.domain else "") + o.op_type, "count": o.count}
                         for o in s.op_histogram[:30]])
    if not hist.empty:
        left.plotly_chart(px.bar(hist, x="count", y="op", orientation="h", title="Op histogram")
                          .update_layout(yaxis={"autorange": "reversed"}, height=420), width="stretch")
    flops = pd.DataFrame([{"op": op, "GFLOPs": f / 1e9} for op, f in s.flops.by_op if f > 0][:20])
    if not flops.empty:
        right.plotly_chart(px.bar(flops, x="GFLOPs", y="op", orientation="h", title="FLOPs by op type")
                           .update_layout(yaxis={"autorange": "reversed"}, height=420), width="stretch")

    st.markdown("#### Inputs and outputs")
    io_rows = [{"kind": kind, "name": t.name, "dtype": t.dtype, "shape": shape_text(t.shape, 40)}
               for kind, items in (("input", s.inputs), ("output", s.outputs)) for t in items]
    st.dataframe(pd.DataFrame(io_rows), hide_index=True, width="stretch")
    st.markdown("#### Parameters by dtype")
    st.dataframe(pd.DataFrame([{"dtype": d.dtype, "tensors": d.tensors, "elements": d.elements,
                                "bytes": widgets.fmt_bytes(d.bytes)} for d in s.params.by_dtype]),
                 hide_index=True, width="stretch")
    st.caption(f"{s.params.initializers} initializers, {s.params.constant_nodes} Constant nodes, "
               f"{s.params.generated} generated (ConstantOfShape).")
    if s.metadata:
        with st.expander("Metadata"):
            st.dataframe(pd.DataFrame([{"key": k, "value": v} for k, v in s.metadata]), hide_index=True)
    dim_flags = " ".join(f"--dim {k}={v}" for k, v in state.dims().items())
    widgets.cli_hint(f"onnx-studio inspect {handle.path.name} {dim_flags}".strip())


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
