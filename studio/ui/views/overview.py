"""Overview: open a model (upload, sample, path) and see its summary."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from sample_models.catalog import ALL_SAMPLES
from studio.core.errors import StudioError
from studio.core.requests import InspectRequest
from studio.core.types import shape_text
from studio.core.uploads import UploadedFile
from studio import api
from studio.ui import decoder_card, memory_panel, overview_charts, state, widgets


_PANEL_CHOOSING = "open_model_choosing"
_PANEL_ONCE = "open_model_expanded"


def _keep_open() -> None:
    """Choosing a sample or typing a path reruns the page: the panel stays open until a model opens.
    Every rerun in between draws it with the same ``expanded``: a value that changed from one run to the
    next would collapse the panel under the user's next click ("Open sample")."""
    st.session_state[_PANEL_CHOOSING] = True


def _opened() -> None:
    """A model opened from the panel: it closes (its choosing state ends) on the next run."""
    st.session_state.pop(_PANEL_CHOOSING, None)


_UPLOADS = "uploads_handled"
_UPLOAD_ERROR = "upload_error"


def _handle_upload(files, n: int) -> None:
    """Import one pick of files as a new model; a rejection is kept for the next run, shown above the panel."""
    names = ", ".join(f.name for f in files)
    try:
        with st.spinner("Importing and validating…"):
            state.add_upload([UploadedFile(f.name, f.getvalue()) for f in files])
        st.session_state.pop(_UPLOAD_ERROR, None)
    except Exception as exc:   # noqa: BLE001 -- shown as one line; Streamlit's control flow is BaseException
        reason = str(exc).splitlines()[0] if isinstance(exc, StudioError) and str(exc) else \
            f"unexpected error ({type(exc).__name__})"
        st.session_state[_UPLOAD_ERROR] = f"{names} was not opened: {reason}"
    _opened()
    st.session_state[_PANEL_ONCE] = True    # open for the next run: the next pick (a retry, or a second model)
    st.session_state[_UPLOADS] = n + 1
    st.rerun()


def _upload_error() -> None:
    rejected = st.session_state.get(_UPLOAD_ERROR)
    if rejected:
        st.error(widgets.md_escape(rejected, 600), icon="🚫")
    notice = state.pop_notice()
    if notice:
        st.info(widgets.md_escape(notice, 400))


def _open_model() -> None:
    upload_tab, sample_tab, path_tab = st.tabs(["Upload", "Sample model", "Path"])
    with upload_tab:
        # A fresh uploader (new key) after every handled upload: the widget would otherwise keep the files
        # already handled, and the next pick (a second model, or a retry after a rejected file) would come
        # together with them ("2 .onnx files uploaded together").
        n = st.session_state.get(_UPLOADS, 0)
        files = st.file_uploader("ONNX model, with its external-data files or as a .zip bundle",
                                 accept_multiple_files=True, key=f"uploader_{n}")
        if files:
            _handle_upload(files, n)
    with sample_tab:
        names = [m.name for m in ALL_SAMPLES]
        purposes = {m.name: m.purpose for m in ALL_SAMPLES}
        name = st.selectbox("Sample", names, format_func=lambda n: f"{n} — {purposes[n]}", key="sample_pick",
                            on_change=_keep_open)
        if st.button("Open sample", key="open_sample"):
            sample = next(m for m in ALL_SAMPLES if m.name == name)
            if widgets.guarded(lambda: state.add_model_file(sample.path, label=f"sample {name}")) is not None:
                _opened()
                st.rerun()         # the new model's own dims and widget values, drawn from the start
    with path_tab:
        if state.shared_mode():
            st.info("Opening files by path is disabled on this shared server; upload the model instead.")
        else:
            st.caption("A file inside the studio's path root: `onnx-studio serve --path-root DIR`, by default the "
                       "workspace's `import/` folder.")
            typed = st.text_input("Model path", key="model_path", on_change=_keep_open)
            if st.button("Open path", key="open_path") and typed:
                if widgets.guarded(lambda: state.open_path(typed)) is not None:
                    _opened()
                    st.rerun()


def _dims_inputs(handle) -> None:
    """Values for the model's free input dims (named, or INPUT[AXIS] for an unnamed one), used for
    shapes, FLOPs and memory, and by every other page. A box starts at what the model says
    (metadata imgsz, a static other side, a Resize target, the dim's name) or stays empty:
    an unset dim counts as 1 and every figure says so."""
    symbolic = list(api.input_dim_keys(handle))
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
            value = cols[i % len(cols)].number_input(
                name[:40], min_value=1, value=int(dims[name]) if name in dims else None, key=f"dim_{i}_{name[:40]}",
                placeholder="unset (counted as 1)",
                help=f"from the model: {h.source}" if h else "the model does not say; counted as 1 until you set it")
            if value is None:
                dims.pop(name, None)
            else:
                dims[name] = int(value)
        if hints:
            st.caption("Suggested by the model: " + ", ".join(
                widgets.md_escape(f"{h.key}={h.value} ({h.source})", 80) for h in hints.values()))


def render() -> None:
    st.title("Overview")
    err = st.session_state.pop("onnx_studio_preload_error", None) or st.session_state.pop("onnx_studio_url_error", None)
    if err:
        widgets.show_error(StudioError(err))      # a known problem (a link, the preloaded model), said as such
    _upload_error()             # above the panel: visible even when the panel is collapsed
    handle = state.current_handle()
    expanded = handle is None or bool(st.session_state.get(_PANEL_CHOOSING)) or \
        bool(st.session_state.pop(_PANEL_ONCE, False))
    with st.expander("Open a model", expanded=expanded):
        _open_model()
    handle = state.current_handle()
    if handle is None:
        st.info("Upload an ONNX model or open a sample to begin." if state.shared_mode() else
                "Upload an ONNX model, open a sample, or give a path to begin.")
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
    counted_as_one = (*s.flops.assumed_dims, *s.flops.unresolved_dims)
    widgets.metric_row([
        ("Nodes", f"{nc.total:,}"),
        ("Params", widgets.fmt_count(s.params.elements)),
        ("Weights", widgets.fmt_bytes(s.params.bytes)),
        ("FLOPs", ("≥ " if s.flops.lower_bound else "") + widgets.fmt_count(s.flops.flops)),
        ("Peak activations", ("≥ " if counted_as_one or s.memory.unknown_tensors else "")
         + widgets.fmt_bytes(s.memory.peak_activation_bytes)),
    ])
    if s.flops.lower_bound:
        st.caption("≥: a lower bound — " + widgets.md_escape(s.flops.open_text(), 300)
                   + (" (set the dims above)" if counted_as_one else ""))
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
    if s.shape_note:
        st.caption(widgets.md_escape(s.shape_note, 300))
    if s.formula_mismatches:
        with st.expander(f"Wrong dim formulas in the file ({s.formula_mismatch_count}): the real sizes are shown"):
            widgets.dataframe(pd.DataFrame([m.to_dict() for m in s.formula_mismatches]), hide_index=True,
                         width="stretch")
    if s.custom_ops:
        st.warning("Custom ops: " + ", ".join(widgets.md_escape(f"{c.domain}::{c.op_type} ×{c.count}", 80)
                                               for c in s.custom_ops))

    decoder_card.render(handle)      # KV-cache decoders: architecture, convention, KV budget
    left, right = st.columns(2)
    hist = overview_charts.op_histogram_figure(s)
    if hist is not None:
        left.plotly_chart(hist, width="stretch", key="overview_op_histogram")
    flops = overview_charts.flops_by_op_figure(s)
    if flops is not None:
        right.plotly_chart(flops, width="stretch", key="overview_flops_by_op")

    memory_panel.render(handle)      # live bytes over the schedule, the peak's tensors, the reorder what-if
    st.markdown("#### Inputs and outputs")
    io_rows = [{"kind": kind, "name": t.name, "dtype": t.dtype, "shape": shape_text(t.shape, 40)}
               for kind, items in (("input", s.inputs), ("output", s.outputs)) for t in items]
    widgets.dataframe(pd.DataFrame(io_rows), hide_index=True, width="stretch")
    st.markdown("#### Parameters by dtype")
    widgets.dataframe(pd.DataFrame([{"dtype": d.dtype, "tensors": d.tensors, "elements": d.elements,
                                "bytes": widgets.fmt_bytes(d.bytes)} for d in s.params.by_dtype]),
                 hide_index=True, width="stretch")
    st.caption(f"{s.params.initializers} initializers, {s.params.constant_nodes} Constant nodes, "
               f"{s.params.generated} generated (ConstantOfShape).")
    if s.metadata:
        with st.expander("Metadata"):
            widgets.dataframe(pd.DataFrame([{"key": k, "value": v} for k, v in s.metadata]), hide_index=True)
    widgets.cli_hint(InspectRequest(dims=state.dims()).command(handle.path.name))


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
