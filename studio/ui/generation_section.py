"""The Profile page's generation section for a KV-cache decoder: greedy generations with the cache fed
back (``api.profile_generation``), TTFT, decode p50/p99, tokens/s and peak memory per prompt length and
batch, decode latency against position and memory against length. Nothing for other models."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from studio import api
from studio.core.errors import StudioError
from studio.core.requests import GenerationRequest
from studio.ui import profile_charts, state, widgets

_RESULT = "profile_generation_result"


def _ints(text: str, label: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise StudioError(f"{label}: give comma-separated integers like 16,64") from None
    if not values or any(v < 1 or v > 1_000_000 for v in values):
        raise StudioError(f"{label}: give positive integers like 16,64")
    return values


def _is_decoder(handle) -> bool:  # noqa: ANN001 - a ModelHandle
    try:
        spec = api.decoder_spec(handle)
    except StudioError:
        return False
    return spec is not None and spec.has_past


def render(entries: dict, chosen: list[str], engines: list[str]) -> None:
    """``entries``/``chosen``: the page's versions (key -> (model, version, label)) and those picked."""
    handle = state.current_handle()
    if handle is None or not _is_decoder(handle):
        return
    st.markdown("#### Generation (KV-cache decoder)")
    st.caption("Greedy decoding with the cache fed back (present → past), I/O binding on ONNX Runtime: time to "
               "first token (the prefill), per-token decode latency, tokens/s and peak memory per prompt length "
               "and batch; the variants run interleaved, round by round.")
    c1, c2, c3, c4 = st.columns(4)
    lengths = c1.text_input("Prompt lengths", "16,64", key="profile_gen_lengths")
    new_tokens = c2.number_input("New tokens", 2, 100_000, 32, key="profile_gen_tokens")
    batch = c3.text_input("Batch sizes", "1", key="profile_gen_batch")
    generations = c4.number_input("Timed generations", 1, 1000, 5, key="profile_gen_count")
    request = widgets.guarded(lambda: GenerationRequest(
        engines=tuple(engines) or ("ort",), prompt_lengths=_ints(lengths, "prompt lengths"),
        new_tokens=int(new_tokens), batch_sizes=_ints(batch, "batch sizes"), generations=int(generations)))
    options = widgets.guarded(lambda: api.GenerationOptions(**request.options)) if request is not None else None
    run = st.button("Run generation profile", key="profile_generate_run",
                    disabled=options is None or not chosen or not engines)
    settings = {"versions": [(k, entries[k][1].sha256) for k in chosen if k in entries], "engines": list(engines),
                "options": repr(options)}
    if run and options is not None:
        targets = []
        for key in chosen:
            model, v, _label = entries[key]
            h = widgets.guarded(lambda model=model, v=v: model.handle(v.id))
            if h is not None:
                targets.append(api.ProfileTarget(f"{v.id} {v.label}", h))

        def in_job():
            with state.job("profile-generate", {"targets": [t.label for t in targets], "engines": engines}) as job:
                return api.profile_generation(targets, engines, options, out_dir=job.dir, pool_key=state.session_id())

        result = widgets.guarded(in_job, spinner="generating…") if targets else None
        if result is not None:
            state.keep_result(_RESULT, result, settings)
    if options is not None and chosen and engines:
        names = widgets.hint_file_names([(Path(entries[k][1].path).name, k) for k in chosen])
        widgets.cli_hint(request.command(names))
    result = state.bound_result(_RESULT, settings)     # this model, these versions and options only
    if result is not None:
        _results(result)


def _results(result) -> None:  # noqa: ANN001 - profilers.generation_profile.GenerationProfile
    for d in result.decoders:
        st.caption(widgets.md_escape(f"{d['target']}: {d['convention']}, {d['layers']} layers, KV "
                                     f"{d['kv_bytes_per_token']} B per token, context {d['context'] or '?'}", 300))
    for w in result.warnings:
        st.warning(widgets.md_escape(w, 600))
    for v in result.variants:
        if v.error:
            st.error(widgets.md_escape(f"{v.id} {v.variant.label}: {v.error}", 600), icon="🚫")
    widgets.dataframe(pd.DataFrame(profile_charts.generation_rows(result)), hide_index=True, width="stretch",
                 key="profile_generation_table")
    if result.ratios:
        widgets.dataframe(pd.DataFrame(profile_charts.generation_ratio_rows(result)), hide_index=True, width="stretch",
                     key="profile_generation_ratios")
    if any(c.decode_by_position_ms for v in result.variants for c in v.cases):
        st.plotly_chart(profile_charts.decode_position_chart(result), width="stretch", key="profile_gen_position")
    if any(c.rss_by_length for v in result.variants for c in v.cases):
        st.plotly_chart(profile_charts.memory_length_chart(result), width="stretch", key="profile_gen_memory")
