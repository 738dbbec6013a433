"""Compatibility: will the model run on ONNX Runtime, OpenVINO, TensorRT, MNN and LiteRT?

Verdict per engine target, an engines x op-type matrix, a filterable per-node
table, and findings with a one-click fix (the fix pass runs through the
verifying pipeline, adds a version, selects it, and the page re-checks it).
All logic is in ``diagnostics/`` behind ``api.check`` / ``api.apply_fix``.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from studio import api
from studio.core.requests import CheckRequest, OptimizeRequest
from studio.api import Report
from studio.ui import state, widgets

_ENGINES = {row["name"]: row["label"] for row in api.engines()}      # the engine table's rows
_EPS = ["cpu", "cuda", "tensorrt"]
_BADGE = {"runs": "✅ runs", "runs with warnings": "⚠️ runs with warnings", "not run": "⏸️ compiles, not run",
          "fails": "❌ fails", "unknown": "❔ unknown"}
_ICON = {"error": "🛑", "warning": "⚠️", "info": "ℹ️"}
MAX_ROWS = 5000


def _options() -> tuple[tuple[str, ...], tuple[str, ...], str]:
    c1, c2, c3 = st.columns([3, 2, 1])
    engines = c1.multiselect("Engines", list(_ENGINES), default=list(api.default_engines()),
                             format_func=_ENGINES.__getitem__, key="compat_engines",
                             help="MNN and LiteRT are checked wherever their stack is installed; LiteRT's converter "
                                  "(onnx2tf) loads TensorFlow, tens of seconds per check")
    eps = c2.multiselect("ONNX Runtime execution providers", _EPS, default=["cpu"], key="compat_eps",
                         help="CPU is always checked; CUDA/TensorRT EPs that are not installed use shipped tables")
    trt = c3.radio("TensorRT", ["10", "11"], horizontal=True, key="compat_trt", format_func=lambda v: f"{v}.x")
    return tuple(engines or _ENGINES), tuple(eps or ["cpu"]), trt


def page_request(engines, eps, trt, dims) -> CheckRequest:
    """The check the page runs (and re-runs after a fix): its hint is this request's command."""
    return CheckRequest(engines=engines, eps=eps, trt_version=trt, dims=dims)


def _cli(handle, engines, eps, trt) -> str:
    return page_request(engines, eps, trt, state.dims()).command(handle.path.name)


def _fix_cli(handle, name: str, options: dict, dims: dict[str, int], engines, eps, trt) -> str:
    """What the fix button runs: the fix with its options (an ``OptimizeRequest`` of that pass), at the
    fix's dims for fix-input-shapes, then the page's check of the result."""
    check = page_request(engines, eps, trt, dims if name == "fix-input-shapes" else state.dims())
    fix = OptimizeRequest(passes=(name,), pass_options={name: options})
    return check.command(handle.path.name, fix=fix, output="fixed.onnx")


def _report(handle, engines, eps, trt) -> Report | None:
    dims = dict(state.dims())                 # the model's dims setting (Overview): the runs use these sizes
    key = (handle.sha256, engines, eps, trt, tuple(sorted(dims.items())))
    cache = st.session_state.setdefault("compat_reports", {})
    if key not in cache:
        def in_job() -> Report:
            # A job row in the project (Projects page, Jobs): done with its verdicts, failed, or interrupted.
            with state.job("check", {"engines": list(engines), "eps": list(eps), "trt": trt, "dims": dims}) as job:
                found = api.check(handle, page_request(engines, eps, trt, dims), pool_key=state.session_id())
                job.message = "; ".join(f"{v.engine}: {v.verdict}" for v in found.verdicts)[:300]
                return found

        report = widgets.guarded(in_job, spinner="Checking with every engine (in sandboxed workers)…")
        if report is None:
            return None
        if len(cache) > 16:
            cache.clear()
        cache[key] = report
        state.publish_overlay_data(handle.sha256, "compatibility", api.compatibility_overlay_data(report))
    return cache[key]


def _verdicts(report: Report) -> None:
    cols = st.columns(max(1, len(report.verdicts)))
    for col, v in zip(cols, report.verdicts):
        with col.container(border=True):
            st.markdown(f"**{widgets.md_escape(_ENGINES.get(v.engine, v.engine))}** · {widgets.md_escape(v.target)}")
            st.markdown(f"### {_BADGE[v.verdict]}")
            st.caption(f"{widgets.md_escape(v.decided_by)} · {widgets.md_escape(widgets.for_page(v.summary), 300)}")
            if v.ran_on and v.ran_on.get("inputs"):
                shown = ", ".join(f"{k} {t}" for k, t in list(v.ran_on["inputs"].items())[:6])
                st.caption(f"ran on {widgets.md_escape(shown, 200)}")


def _matrix(report: Report) -> None:
    matrix = report.matrix()
    if not matrix:
        return
    rows = []
    for op, cols in matrix.items():
        row = {"op type": op}
        for label, counts in cols.items():
            parts = [f"{counts[s]} {s}" for s in ("supported", "restricted", "unsupported", "unknown") if counts.get(s)]
            row[label] = ", ".join(parts)
        rows.append(row)
    frame = pd.DataFrame(rows).fillna("")

    def color(value: str) -> str:
        if "unsupported" in value:
            return "background-color: #f8d7da"
        if "restricted" in value or "unknown" in value:
            return "background-color: #fff3cd"
        return "background-color: #d1e7dd" if value else ""

    st.markdown("#### Engines × op types")
    widgets.dataframe(frame.style.map(color, subset=[c for c in frame.columns if c != "op type"]), hide_index=True,
                 width="stretch")


def _nodes(report: Report) -> None:
    st.markdown("#### Nodes")
    c1, c2, c3 = st.columns(3)
    targets = sorted({f"{n.engine} ({n.target})" for n in report.nodes})
    pick_target = c1.multiselect("Engine", targets, key="compat_node_targets")
    pick_status = c2.multiselect("Status", ["unsupported", "restricted", "unknown", "supported"],
                                 default=["unsupported", "restricted"], key="compat_node_status")
    query = c3.text_input("Node or op contains", key="compat_node_query").lower().strip()
    rows = []
    for n in report.nodes:
        label = f"{n.engine} ({n.target})"
        if pick_target and label not in pick_target or pick_status and n.status not in pick_status:
            continue
        if query and query not in n.node.lower() and query not in n.op_type.lower():
            continue
        rows.append({"node": n.node, "op": f"{n.domain}::{n.op_type}" if n.domain else n.op_type, "engine": label,
                     "status": n.status, "reason": n.reason, "source": n.source})
        if len(rows) >= MAX_ROWS:
            break
    st.caption(f"{len(rows)} of {len(report.nodes)} node × engine rows")
    widgets.dataframe(pd.DataFrame(rows, columns=["node", "op", "engine", "status", "reason", "source"]),
                 hide_index=True, width="stretch", height=min(400, 40 + 35 * max(1, len(rows))))


def _apply(pass_name: str, options: dict, dims: dict[str, int] | None = None) -> None:
    ws = state.workspace()
    current = state.current_version()
    if current is None:
        return
    def in_job():
        with state.job("fix", {"pass": pass_name, "options": options, "dims": dims or {}}) as job:
            added = api.apply_fix(ws, current.id, pass_name, options=options, dims=dims, pool_key=state.session_id())
            job.message = f"saved as {added.id}"
            return added

    version = widgets.guarded(in_job, spinner=f"Applying {pass_name} and verifying it against the original…")
    if version is not None:
        state.set_current(version.id)
        st.session_state["compat_fixed"] = (pass_name, version.id)
        st.rerun()


def _dim_values() -> dict[str, int]:
    """Values for the dynamic dims that fix-input-shapes would set (the user edits them)."""

    defaults = api.default_dims(state.current_handle().path)
    if not defaults:
        return {}
    defaults.update({k: int(v) for k, v in state.dims().items() if k in defaults})   # the model's dims setting
    st.caption("Values for **fix-input-shapes**:")
    cols = st.columns(min(4, len(defaults)))
    return {name: int(cols[i % len(cols)].number_input(widgets.md_escape(name, 40), min_value=1, value=value, step=1,
                                                       key=f"compat_dim_{i}"))
            for i, (name, value) in enumerate(defaults.items())}


def _findings(report: Report, checked: tuple) -> None:
    st.markdown("#### Findings")
    fixes = report.fixes()
    if fixes:
        st.markdown("**One-click fixes** (each runs through the verifying pipeline and adds a version)")
        dims = _dim_values() if "fix-input-shapes" in fixes else {}
        cols = st.columns(min(4, len(fixes)))
        for i, name in enumerate(fixes):
            options = report.fix_options(name)
            hint = ", ".join(f"{k}={v}" for k, v in options.items())
            if cols[i % len(cols)].button(f"Fix: {name}", key=f"compat_fix_{name}", type="primary",
                                          help=f"options: {hint}" if hint else None):
                _apply(name, options, dims if name == "fix-input-shapes" else None)
        widgets.cli_hint("\n".join(_fix_cli(state.current_handle(), name, report.fix_options(name), dims, *checked)
                                   for name in fixes))
    if not report.findings:
        st.success("No findings.")
        return
    groups = report.grouped()
    if len(groups) < len(report.findings):
        st.caption(f"{len(report.findings)} findings in {len(groups)} groups (same code and message); "
                   "open a group for its nodes.")
    for i, g in enumerate(groups):
        f = g.first
        count = f" ×{g.count}" if g.count > 1 else ""
        where = [*g.engines] or ["any engine"]
        if len(g.nodes) == 1:
            where.append(g.nodes[0])
        label = " · ".join(widgets.md_escape(x, 80) for x in where[:4]) + (" …" if len(where) > 4 else "")
        with st.expander(f"{_ICON[g.severity]} {g.code}{count} — {label}", expanded=False):
            st.markdown(widgets.md_escape(widgets.for_page(g.message), 600))
            if f.fix_hint:
                st.caption("What to do: " + widgets.md_escape(f.fix_hint, 300))
            if f.fix_pass:
                st.caption("Fix pass: " + widgets.md_code(f.fix_pass, 60))
            st.caption("Source: " + widgets.md_escape(f.source or "?", 80))
            if len(g.nodes) > 1:
                widgets.dataframe(pd.DataFrame({"node": list(g.nodes)}), hide_index=True, width="stretch",
                             height=min(36 * len(g.nodes) + 38, 320), key=f"compat_group_{i}")

def render() -> None:
    opened = widgets.page_model("Compatibility")
    if opened is None:
        return
    handle, _ = opened
    fixed = st.session_state.pop("compat_fixed", None)
    if fixed:
        st.success(f"Applied {widgets.md_escape(fixed[0], 60)} → version {widgets.md_escape(fixed[1], 20)}; "
                   "re-checked below.")
    engines, eps, trt = _options()
    if st.button("Re-run check", key="compat_rerun"):
        st.session_state.pop("compat_reports", None)
    report = _report(handle, engines, eps, trt)
    if report is None:
        return
    _verdicts(report)
    for note in report.notes:
        st.caption("ℹ️ " + widgets.md_escape(note, 300))
    _findings(report, (engines, eps, trt))
    _matrix(report)
    _nodes(report)
    widgets.cli_hint(_cli(handle, engines, eps, trt))


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
