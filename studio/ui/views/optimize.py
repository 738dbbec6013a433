"""Optimize: choose a preset or passes, run them with verification after every
modifying pass, see what each pass did, save the result as a new version."""

from __future__ import annotations

import io
import zipfile

import pandas as pd
import streamlit as st

from studio import api
from studio.batch import facade as batch_api
from studio.core.requests import OptimizeRequest
from studio.ui import state, widgets
from studio.ui.machine_picker import machine_picker, measured_line

_RESULT = "onnx_studio_optimize_result"
MAX_DOWNLOAD_BYTES = 300 * 2**20
TIME_BUDGET_S = 900.0          # passes that would start later are skipped (a browser session should not run for hours)


def _choose(cat: dict) -> tuple[str | None, list[str] | None]:
    presets = {p["name"]: p for p in cat["presets"]}
    summaries = {p["name"]: p["summary"] for p in cat["passes"]}
    options = list(presets) + ["custom"]
    choice = st.selectbox("Preset", options, index=0, key="opt_preset",
                          format_func=lambda n: n if n == "custom" else f"{n} — {presets[n]['description']}")
    if choice != "custom":
        with st.expander(f"Passes in '{choice}'"):
            for name in presets[choice]["passes"]:
                st.markdown(f"- **{name}** — {widgets.md_escape(summaries.get(name, ''), 200)}")
        return choice, None
    chosen = st.multiselect("Passes, in order", list(summaries), key="opt_passes",
                            format_func=lambda n: f"{n} — {summaries[n]}")
    return None, chosen


def _options(passes: list[str] | None, handle) -> dict[str, dict]:
    """Options of the chosen passes that need one (convert-opset's target)."""
    options: dict[str, dict] = {}
    if passes and "convert-opset" in passes:
        current = next((o.version for o in handle.proto.opset_import if o.domain in ("", "ai.onnx")), 17)
        options["convert-opset"] = {"target": int(st.number_input(
            "convert-opset: target opset", min_value=7, max_value=25, value=max(17, int(current)), key="opt_target"))}
    return options


def _dims(handle) -> dict[str, int]:
    init = {t.name for t in handle.proto.graph.initializer}
    symbolic = sorted({d.dim_param for vi in handle.proto.graph.input if vi.name not in init
                       for d in vi.type.tensor_type.shape.dim if d.dim_param})
    if not symbolic:
        return {}
    dims = state.dims()
    st.caption("Dynamic dims: values used for the verification inputs; fix-input-shapes (tensorrt preset) makes "
               "them static.")
    cols = st.columns(min(4, len(symbolic)))
    for i, name in enumerate(symbolic[:16]):
        # An unset dim stays unset (as on the Overview): these are the model's dims every page uses, so a
        # box's default of 1 written here would pin it for Precision, Profile and Export too, and stop the
        # verifier's search for sizes the model runs at (an STFT front end refuses 1 sample).
        value = cols[i % len(cols)].number_input(
            name[:40], min_value=1, value=int(dims[name]) if name in dims else None, key=f"opt_dim_{i}_{name[:40]}",
            placeholder="unset (sizes searched)")
        if value is None:
            dims.pop(name, None)
        else:
            dims[name] = int(value)
    return {k: v for k, v in dims.items() if k in symbolic}


def _run(handle, version, request: OptimizeRequest, remote: str | None = None) -> None:
    """Run ``request`` here or, with ``remote``, on that target (the same request, its model coming back into
    this run's job folder); the result becomes a version of the model and version it was computed on."""
    preset, passes, dims = request.preset, request.passes, dict(request.dims)
    ws = state.workspace()
    bar = st.progress(0.0, text="Starting…" if remote is None else f"Optimizing on target {remote}…")

    def progress(i: int, n: int, name: str) -> None:
        bar.progress(min(1.0, i / max(n, 1)), text=f"{name} ({min(i + 1, n)}/{n})" if i < n else "Saving…")

    measured = None

    def in_job():
        nonlocal measured
        # The job row is written before the run and closed after: a server killed mid-run leaves it
        # "interrupted" in the project, never "done".
        with state.job("optimize", {"preset": preset, "passes": passes, "dims": dims, "target": remote,
                                    "on_failure": request.on_failure, "verify": request.verify}) as job:
            out = job.dir / f"{handle.name}.onnx"
            if remote is None:
                res = api.optimize(handle, request, out_path=out, on_progress=progress, pool_key=state.session_id())
            else:       # a partial result lands at the same place, as "output" does here
                measured = batch_api.optimize_on(remote, handle, request, out_path=out, partial=out,
                                                 pool_key=state.session_id())
                res = measured.result
            job.message = res.summary()[:300]
            return res

    result = widgets.guarded(in_job)
    bar.empty()
    if result is None:
        return
    new_version, made = None, None
    if result.modified:
        # A run that stopped early still offers its last verified model, labelled as partial.
        label = (preset or "custom") + ("" if result.ok else " (partial)")
        v = widgets.guarded(lambda: api.add_optimized_version(ws, version.id, result, preset=preset or "custom",
                                                              label=label))
        if v is not None:
            new_version, made = v.id, v
            state.set_current(v.id)
    # bound to the version it made (else the one optimized), of this model and project only
    state.keep_result(_RESULT, {"result": result, "source": version.id, "version": new_version,
                                "command": page_command(request, handle.path.name, remote),
                                "measured": measured},
                      version=made or version)
    if new_version is not None:
        st.rerun()         # the header, the sidebar and the URL name the new version, not the one optimized


def _download(result) -> None:
    out = result.output
    if out is None or not out.exists():
        return
    files = [p for p in out.parent.iterdir() if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    if total > MAX_DOWNLOAD_BYTES:
        st.caption(f"The result is {widgets.fmt_bytes(total)}: too large to download here; use the CLI command.")
        return
    what = "the optimized model" if result.ok else "the last verified model (partial: the pipeline stopped)"
    if len(files) == 1:
        st.download_button(f"Download {what}", out.read_bytes(), file_name=out.name,
                           mime="application/octet-stream", key="opt_download")
        return
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for p in files:
            z.write(p, p.name)
    st.download_button(f"Download {what} (.zip with its weights)", buf.getvalue(),
                       file_name=f"{out.stem}.zip", mime="application/zip", key="opt_download")


def _report(saved: dict) -> None:
    result = saved["result"]
    (st.success if result.ok else st.error)(widgets.md_escape(result.summary(), 400))
    if saved.get("measured") is not None:
        st.info(widgets.md_escape("Optimized and verified " + measured_line(saved["measured"]), 400))
    if saved.get("version"):
        st.info(f"Saved as version {saved['version']} (now selected)." if result.ok else
                f"The last verified model is saved as version {saved['version']} (partial, now selected).")
    st.caption("Verified against the original: " + widgets.md_escape(result.reference, 300))
    st.markdown("#### Report")
    widgets.dataframe(pd.DataFrame(api.optimize_report_rows(result)), hide_index=True, width="stretch", key="opt_report")
    diff = api.op_count_diff(result.ops_before, result.ops_after)
    if diff:
        st.markdown("#### Op counts that changed")
        widgets.dataframe(pd.DataFrame([{"op": op, "before": a, "after": b, "change": b - a} for op, a, b in diff]),
                     hide_index=True, width="stretch", key="opt_ops")
    with st.expander("What each pass changed"):
        for r in result.records:
            for c in r.changes[:50]:
                st.text(f"{r.name}: {c.kind} {', '.join(c.nodes[:8])}{' …' if len(c.nodes) > 8 else ''} "
                        f"— {c.detail}"[:500])
    _download(result)
    widgets.cli_hint(saved["command"])


def render() -> None:
    opened = widgets.page_model("Optimize")
    if opened is None:
        return
    handle, version = opened
    cat = api.list_passes()
    preset, passes = _choose(cat)
    options = _options(passes, handle)
    dims = _dims(handle)
    left, right = st.columns(2)
    on_failure = left.radio("When a pass fails verification", ["stop", "revert"], horizontal=True,
                            key="opt_on_failure",
                            help="stop: keep the last verified model; revert: undo that pass and continue")
    verify = right.checkbox("Verify after every modifying pass (ONNX Runtime, optimizations off)", value=True,
                            key="opt_verify")
    remote = machine_picker("opt_machine", "Run on")
    request = page_request(preset, passes, dims, on_failure, verify, options)
    if st.button("Run", type="primary", key="opt_run", disabled=preset is None and not passes):
        _run(handle, version, request, remote)
    saved = state.bound_result(_RESULT)
    if saved:
        _report(saved)
    else:
        widgets.cli_hint(page_command(request, handle.path.name, remote))


def page_request(preset, passes, dims, on_failure, verify, options) -> OptimizeRequest:
    """The one request the page runs and prints (its hint is ``request.command``)."""
    return OptimizeRequest(preset=preset, passes=passes or None, dims=dims, pass_options=options,
                           on_failure=on_failure, verify=verify, time_budget_s=TIME_BUDGET_S)


def page_command(request: OptimizeRequest, model: str, remote: str | None) -> str:
    """The page's equivalent CLI command: the request's own, plus ``--target NAME`` where it runs remotely."""
    return request.command(model, extra=[("--target", remote)])


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
