"""Profile: versions x engines side by side — latency percentiles, interleaved
ratios with their confidence, cold start, per-op time, memory and sweeps; for a KV-cache
decoder also its generation (studio/ui/generation_section.py).

The page reads widgets, calls ``api.profile`` and renders its result with
the chart builders ``api`` re-exports. Stop: any click reruns the script, which interrupts
the progress callback; the sandbox then kills the worker.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from studio import api
from studio.batch import facade as batch_api
from studio.core.errors import StudioError
from studio.core.jsonsafe import dumps as json_dumps
from studio.core.requests import ProfileOptions, ProfileRequest
from studio.ui import generation_section, profile_charts, state, widgets
from studio.ui.inputs_picker import InputsChoice, inputs_picker
from studio.ui.machine_picker import machine_picker, measured_line

_RESULT = "profile_result"
_RUNNING = "profile_running"
_VERSIONS_RUN = "profile_versions_run"
ENGINE_CHOICES = ("ort", "ov", "ov:default", "ov:bf16", "ov:throughput", "ort:cuda", "ort:trt", "trt", "trt:f16")


def _ints(text: str, label: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise StudioError(f"{label}: give comma-separated integers like 1,2,4") from None
    if any(v < 1 or v > 4096 for v in values):
        raise StudioError(f"{label}: values must be between 1 and 4096")
    return values


def _settings(choice: InputsChoice, engines: list[str]) -> ProfileRequest | None:
    with st.expander("Settings", expanded=False):
        c1, c2, c3, c4 = st.columns(4)
        mode = c1.radio("Measure", ["iterations", "duration"], key="profile_mode", horizontal=True)
        iterations = c2.number_input("Iterations per variant", 1, 1_000_000, 100, key="profile_iterations")
        duration = c2.number_input("Duration (s, all variants)", 1.0, 3600.0, 10.0, key="profile_duration")
        warmup = c3.number_input("Warm-up iterations", 0, 100_000, 10, key="profile_warmup")
        rounds = c4.number_input("Interleaved rounds", 1, 1000, 20, key="profile_rounds")
        d1, d2, d3, d4 = st.columns(4)
        per_op = d1.checkbox("Per-op time", key="profile_per_op")
        memory = d2.checkbox("Memory and leak check", key="profile_memory")
        ov_cache = d3.checkbox("OpenVINO model cache", key="profile_ov_cache",
                               help="compile again with a warm cache (kept in this session's job folder)")
        timeout = d4.number_input("Time limit per step (s)", 5, 3600, 120, key="profile_timeout")
        s1, s2, s3 = st.columns(3)
        threads = s1.text_input("Thread sweep", "", placeholder="1,2,4", key="profile_threads")
        batch = s2.text_input("Batch sweep", "", placeholder="1,4,8", key="profile_batch")
        concurrency = s3.text_input("Concurrency sweep", "", placeholder="1,2,4", key="profile_concurrency")

    def build() -> ProfileRequest:
        amount = {"duration_s": float(duration)} if mode == "duration" else {"iterations": int(iterations)}
        request = ProfileRequest(engines=tuple(engines or ("ort",)), options=ProfileOptions(
            warmup=int(warmup), rounds=int(rounds), per_op=per_op, memory=memory, ov_cache=ov_cache,
            timeout_s=float(timeout), dims=state.dims(), thread_counts=_ints(threads, "thread sweep"),
            batch_sizes=_ints(batch, "batch sweep"), concurrency=_ints(concurrency, "concurrency sweep"),
            inputs_npz=str(choice.inputs) if choice.inputs else (
                str(api.dataset_inputs_file(choice.dataset, state.current_handle(),
                                            state.workspace().job_dir("inputs") / "dataset.npz"))
                if choice.dataset is not None else None),
            images_dir=str(choice.images) if choice.images else None, **amount))
        api.profile_options(request)            # its checks, shown before Run
        return request

    return widgets.guarded(build)


_MEASURED_BY = "profile_measured_by"


def _run_remote(target: str, targets: list[api.ProfileTarget], request: ProfileRequest) -> None:
    with st.spinner(f"measuring on target {target}…"):
        measured = widgets.guarded(lambda: batch_api.profile_on([target], [(t.label, t.handle) for t in targets],
                                                                request)[0])
    if measured is not None:
        st.session_state[_RESULT] = measured.result
        st.session_state[_MEASURED_BY] = measured


def _run(targets: list[api.ProfileTarget], request: ProfileRequest,
         remote: str | None = None, stop_slot=None) -> None:  # noqa: ANN001 - a Streamlit placeholder
    st.session_state.pop(_MEASURED_BY, None)
    if remote is not None:
        _run_remote(remote, targets, request)
        return
    bar = st.progress(0.0, text="starting…")

    def on_progress(fraction: float, message: str) -> None:
        bar.progress(min(max(fraction, 0.0), 1.0), text=widgets.md_escape(message, 120))

    st.session_state[_RUNNING] = True
    def in_job():
        # A job row around the run; its side files (ORT profiles, traces) are the job's artifacts.
        with state.job("profile", {"targets": [t.label for t in targets], "engines": list(request.engines),
                                   "request": request.to_dict()}) as job:
            return api.profile(targets, request, out_dir=job.dir, pool_key=state.session_id(),
                               on_progress=on_progress)

    if stop_slot is not None:
        stop_slot.button("Stop", key="profile_stop", help="Kill the running profile")
    try:
        result = widgets.guarded(in_job)
        st.session_state[_RUNNING] = False        # stays True when a click interrupts the run
    finally:
        bar.empty()
        if stop_slot is not None:
            stop_slot.empty()
    if result is not None:
        st.session_state[_RESULT] = result


def _results(profile) -> None:  # noqa: ANN001 - profilers.profile.Profile
    measured = st.session_state.get(_MEASURED_BY)
    if measured is not None:
        st.info(widgets.md_escape("Measured " + measured_line(measured), 400))
    m = profile.machine
    load = f"{m.load_before[0]:.2f} → {m.load_after[0]:.2f}" if m.load_before and m.load_after else "?"
    st.caption(widgets.md_escape(
        f"{m.cpu} · {m.cpu_count} CPUs · load average {load} · "
        + ", ".join(f"{k} {v}" for k, v in m.engines.items() if v)
        + f" · {'interleaved, ' + str(profile.rounds) + ' shuffled rounds' if profile.interleaved else 'not interleaved'}"
        + f" · {profile.seconds:.1f} s", 600))
    for line in profile.feeds:
        st.caption(widgets.md_escape(line, 300))
    for w in profile.warnings:
        st.warning(widgets.md_escape(w, 600))
    for v in profile.variants:
        if not v.ok:
            st.error(widgets.md_escape(f"{v.id} {v.variant.label}: {v.error}", 600), icon="🚫")
    st.markdown("#### Latency")
    widgets.dataframe(pd.DataFrame(profile_charts.stats_rows(profile)), hide_index=True, width="stretch", key="profile_stats")
    if any(v.ok for v in profile.variants):
        st.plotly_chart(profile_charts.latency_histogram(profile), width="stretch", key="profile_hist")
    if profile.ratios:
        st.markdown("#### Ratios against the baseline")
        st.caption("Median of per-round ratios of median latency (< 1: faster than the baseline), with a 95 % "
                   "bootstrap interval over rounds and the interquartile spread of the rounds.")
        widgets.dataframe(pd.DataFrame(profile_charts.ratio_rows(profile)), hide_index=True, width="stretch",
                     key="profile_ratios")
        st.markdown("\n".join(f"- **{widgets.md_escape(r.other_id, 60)}**: {widgets.md_escape(r.verdict, 400)}"
                               for r in profile.ratios))
    if any(v.cold for v in profile.variants):
        st.markdown("#### Cold start")
        st.plotly_chart(profile_charts.cold_start_chart(profile), width="stretch", key="profile_cold_chart")
        widgets.dataframe(pd.DataFrame(profile_charts.cold_rows(profile)), hide_index=True, width="stretch", key="profile_cold")
    with_ops = [v for v in profile.variants if v.ops is not None]
    if with_ops:
        st.markdown("#### Per-op time")
        vid = st.selectbox("Variant", [v.id for v in with_ops], key="profile_ops_variant")
        ops = profile.variant(vid).ops
        versions_run = st.session_state.get(_VERSIONS_RUN, [])
        target = profile.variant(vid).variant.target_index
        if target < len(versions_run) and st.button("Colour the graph by this time", key="profile_to_graph"):
            # The Graph page's documented input: data["node_times"] = {node id: seconds}.
            mid, vid_run = versions_run[target].split(":", 1)
            model_run = api.project_model(state.project(), mid)
            state.publish_overlay_data(model_run.version(vid_run).sha256, "node_times", ops.node_times_s())
            state.set_model(mid, vid_run)
            st.success(f"On the Graph page, pick the 'time share' overlay ({vid}, version "
                       f"{widgets.md_escape(versions_run[target], 20)}).")
        widgets.metric_row([("per-op sum", f"{ops.per_op_sum_ms:.4f} ms"),
                            ("end-to-end", f"{ops.end_to_end_ms:.4f} ms"),
                            ("overhead", f"{ops.overhead_ms:.4f} ms" if not ops.sum_exceeds_end_to_end
                             else "n/a (sum > end-to-end)"),
                            ("mapped to ONNX nodes", f"{ops.mapped_share:.0%}")])
        if ops.sum_exceeds_end_to_end:
            st.caption(widgets.md_escape(ops.overhead_text(), 300))
        st.plotly_chart(profile_charts.op_bar(ops), width="stretch", key="profile_op_bar")
        st.plotly_chart(profile_charts.op_treemap(ops), width="stretch", key="profile_op_tree")
        widgets.dataframe(pd.DataFrame([k.to_dict() for k in ops.kernels]), hide_index=True, width="stretch",
                     key="profile_op_table")
        trace = profile.trace_path(vid)
        if trace is not None:
            st.caption(widgets.md_escape(ops.trace_note, 300))
            st.download_button("Download trace (Perfetto / chrome://tracing)", trace.read_bytes(),
                               file_name=f"trace-{Path(ops.trace_file).stem[:40]}.json", mime="application/json",
                               key="profile_trace_download")
    with_memory = [v for v in profile.variants if v.memory is not None]
    if with_memory:
        st.markdown("#### Memory")
        st.plotly_chart(profile_charts.memory_timeline(profile), width="stretch", key="profile_memory_chart")
        widgets.dataframe(pd.DataFrame([{"variant": v.id, "peak RSS MiB": round(v.memory.peak_rss / 2**20, 1),
                                    "model MiB": round(v.memory.model_rss / 2**20, 1),
                                    "leak check": v.memory.leak.verdict, "detail": v.memory.leak.message}
                                   for v in with_memory]), hide_index=True, width="stretch", key="profile_mem_table")
    kinds = sorted({s.kind for v in profile.variants for s in v.sweeps})
    if kinds:
        st.markdown("#### Sweeps")
        for kind in kinds:
            st.plotly_chart(profile_charts.sweep_chart(profile, kind), width="stretch", key=f"profile_sweep_{kind}")
        widgets.dataframe(pd.DataFrame(profile_charts.sweep_rows(profile)), hide_index=True, width="stretch",
                     key="profile_sweeps")
    st.download_button("Download profile (JSON)", json_dumps(profile.to_dict(include_samples=True), indent=1),
                       file_name="profile.json", mime="application/json", key="profile_json_download")


def render() -> None:
    st.title("Profile")
    ws = state.workspace()
    if not ws.versions:
        st.info("Open a model on the Overview page first; every version of it can then be profiled here.")
        return
    # Every version of every model of the project: A/B of two versions, or of two models.
    entries = widgets.project_versions(ws)
    current = state.current_version()
    own = [k for k in entries if k.startswith(f"{ws.id}:")]
    cur_key = f"{ws.id}:{current.id}" if current else own[-1]
    # Default: the original and the version being worked on (the comparison people want first).
    default = list(dict.fromkeys([own[0], cur_key if cur_key in entries else own[-1]]))
    chosen = st.multiselect("Versions", list(entries), default=default, format_func=lambda k: entries[k][2],
                            key="profile_versions")
    engines = st.multiselect("Engines", list(ENGINE_CHOICES), default=["ort", "ov"], format_func=api.engine_label,
                             key="profile_engines")
    remote = machine_picker("profile_target", "Measure on")
    choice = inputs_picker("profile_inputs", images_label="Images (the first one is used)", with_count=False)
    options = _settings(choice, list(engines))
    c1, c2, _ = st.columns([1, 1, 4])
    run = c1.button("Run profile", type="primary", key="profile_run",
                    disabled=not chosen or not engines or not choice.ready)
    stop_slot = c2.empty()          # the Stop button exists only while a run is going on
    if st.session_state.get(_RUNNING):
        # The previous run was interrupted (Stop, or any other click): its worker was killed.
        st.session_state[_RUNNING] = False
        st.info("Stopped: the running worker was killed.")
    settings = {"versions": [(k, entries[k][1].sha256) for k in chosen if k in entries], "engines": list(engines),
                "remote": remote, "options": repr(options), "inputs": choice.settings()}
    if run and options is not None and chosen and engines:
        targets, run_vids = [], []
        for key in chosen:
            model, v, _label = entries[key]
            handle = widgets.guarded(lambda model=model, v=v: model.handle(v.id))
            if handle is not None:
                name = key.split(":", 1)[0] if len({k.split(':', 1)[0] for k in chosen}) > 1 else ""
                targets.append(api.ProfileTarget(f"{name + ' ' if name else ''}{v.id} {v.label}", handle))
                run_vids.append(key)
        if targets:
            st.session_state[_VERSIONS_RUN] = run_vids
            st.session_state.pop(_RESULT, None)
            _run(targets, options, remote, stop_slot)
            if st.session_state.get(_RESULT) is not None:    # bound to the versions, engines and options run
                state.keep_result(_RESULT, (st.session_state.pop(_RESULT), st.session_state.get(_MEASURED_BY),
                                            run_vids), settings)
    if options is not None and chosen and engines:
        several_models = len({k.split(":")[0] for k in chosen}) > 1
        names = widgets.hint_file_names([(Path(entries[k][1].path).name, k if several_models else entries[k][1].id)
                                         for k in chosen])
        widgets.cli_hint(options.command(names, full_paths=False, target=remote))
    bound = state.bound_result(_RESULT, settings)      # run on this model's page with these settings only
    if bound is not None:
        result, st.session_state[_MEASURED_BY], st.session_state[_VERSIONS_RUN] = bound
        _results(result)
    elif state.result_is_stale(_RESULT, settings):
        st.info("No profile for this model, these versions and settings yet: press Run profile.")
    generation_section.render(entries, chosen, engines)    # KV-cache decoders only


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
