"""The Overview page's "Memory plan" section: live bytes over ORT's execution order with the peak
marked, the tensors at the peak, ORT's and OpenVINO's measured activation memory beside the
prediction, the KV cache's share for a decoder, the reorder what-if, and the Graph page's "live memory" overlay.

A section of its own (not inline in the page) so the Overview stays one call per part; it calls
only ``studio.api`` and draws with ``memory_charts``."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from studio import api
from studio.core.requests import MemoryRequest
from studio.ui import memory_charts, state, widgets

_RESULT = "onnx_studio_memory_plan"


def _key(handle, dims: dict[str, int]) -> tuple:
    return (handle.sha256, tuple(sorted(dims.items())))


def _reorder(handle, request: MemoryRequest):
    with tempfile.TemporaryDirectory(prefix="studio-reorder-") as tmp:   # the what-if only: nothing kept
        return api.memory_reorder(handle, request, Path(tmp, "reordered.onnx"), pool_key=state.session_id())


def render(handle) -> None:
    """The section, below the Overview's summary (``handle``: the open model version)."""
    st.markdown("#### Memory plan")
    dims = dict(state.dims())
    key = _key(handle, dims)
    c1, c2, c3 = st.columns([1, 1, 2])
    measure = c3.checkbox("Measure what ONNX Runtime and OpenVINO allocate", value=True, key="memory_measure",
                          help="a child process per engine records the aligned blocks it allocates for "
                               "intermediate tensors: ORT's memory-pattern block (arena off, second run), "
                               "OpenVINO CPU's workspace (re-allocated after release_memory); Linux with a C "
                               "compiler")
    held = state.bound_result(_RESULT) or {}          # this project's model, version and dims only
    if c1.button("Plan memory", key="memory_plan_run"):
        report = widgets.guarded(lambda: api.memory_plan(handle, MemoryRequest(dims=dims, measure=measure),
                                                         pool_key=state.session_id()), spinner="Planning memory…")
        held = {"key": key, "report": report} if report is not None else {}
        state.keep_result(_RESULT, held)
        if report is not None:           # once per plan: the Graph page's view memo sees one change
            state.publish_overlay_data(handle.sha256, "node_memory", report.node_live_bytes())
    if c2.button("Try a memory-aware order", key="memory_reorder_run"):
        what_if = widgets.guarded(lambda: _reorder(handle, MemoryRequest(dims=dims, measure=measure, reorder=True)),
                                  spinner="Reordering and verifying…")
        held = {"key": key, "report": what_if.before, "reorder": what_if} if what_if is not None else {}
        state.keep_result(_RESULT, held)
        if what_if is not None:
            state.publish_overlay_data(handle.sha256, "node_memory", what_if.before.node_live_bytes())
    if held.get("key") != key:
        st.caption("Every tensor's lifetime in ONNX Runtime's execution order at the dims above (unset ones as "
                   "the seeded inputs take them), the peak and the tensors that make it, and whether another "
                   "node order lowers it.")
        return
    report, what_if = held["report"], held.get("reorder")
    _show(report, what_if)
    widgets.cli_hint(MemoryRequest(dims=dims, measure=measure, reorder=what_if is not None).command(handle.path.name))


def _show(report, what_if) -> None:
    p = report.plan
    ge = "≥ " if report.unknown_tensors else ""
    widgets.metric_row([
        ("Predicted peak", ge + widgets.fmt_bytes(p.peak_bytes)),
        ("Arena (best fit)", ge + widgets.fmt_bytes(p.arena_bytes)),
        ("Peak at step", f"{p.peak_step + 1} / {len(p.order)}"),
        *([("KV cache (past)", widgets.fmt_bytes(report.kv_cache.past_bytes))] if report.kv_cache else []),
    ])
    st.caption("Peak while running " + widgets.md_escape(p.peak_node or "-", 160)
               + ". Colour the graph by it: Graph page, overlay \"live memory\".")
    after = what_if.after if what_if is not None else None
    st.plotly_chart(memory_charts.live_bytes_figure(report, compare=after), width="stretch",
                    key="memory_live_bytes")
    st.markdown("Tensors at the peak")
    widgets.dataframe(pd.DataFrame(memory_charts.peak_tensor_rows(report)), hide_index=True, width="stretch")
    if report.measured:
        widgets.dataframe(pd.DataFrame(memory_charts.measured_rows(report)), hide_index=True, width="stretch")
    if report.kv_cache:
        kv = report.kv_cache
        st.caption(f"KV cache: {len(kv.past_inputs)} past inputs at {widgets.md_escape(kv.past_length_dim, 60)}="
                   f"{kv.past_length} hold {widgets.fmt_bytes(kv.past_bytes)}; the present outputs "
                   f"{widgets.fmt_bytes(kv.present_bytes)}. Set the past length in the dims above.")
    for note in report.notes:
        st.caption(widgets.md_escape(note, 600))
    if what_if is not None:
        verdict = "verified" if what_if.verified else "not verified"
        if after is not None:
            st.success(f"Reordered ({verdict}): predicted peak {widgets.fmt_bytes(p.peak_bytes)} → "
                       f"{widgets.fmt_bytes(after.peak_bytes)}, arena {widgets.fmt_bytes(p.arena_bytes)} → "
                       f"{widgets.fmt_bytes(after.plan.arena_bytes)}. Keep it with the CLI command below (-o OUT).")
            widgets.dataframe(pd.DataFrame(memory_charts.measured_rows(after)), hide_index=True, width="stretch")
        else:
            st.info("No node order with a lower peak was found (" + verdict + "): "
                    + widgets.md_escape("; ".join(what_if.notes) or what_if.verification, 300))
