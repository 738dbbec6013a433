"""The Profile page's tables and plotly figures of a profile (``api.profile``'s ``Profile``).

Presentation only: rows and figures built from the result object the facade returns, for the page
(and nothing else: the CLI prints the JSON). Kept out of the Streamlit page so the page stays thin
and the figures can be tested without a browser. Model-derived strings go into figures as data
(plotly escapes them), never as HTML.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from studio.charts.layout import category_rows, legend_below

if TYPE_CHECKING:
    from studio.api import Profile

OpProfile = Any   # a profiled variant's ``ops`` (profilers.ops.OpProfile; pages see it through the Profile only)

__all__ = ["cold_rows", "cold_start_chart", "decode_position_chart", "generation_ratio_rows", "generation_rows",
           "latency_histogram", "memory_length_chart", "memory_timeline", "op_bar", "op_treemap",
           "ratio_rows", "stats_rows", "sweep_chart", "sweep_rows"]

GenerationProfile = Any   # api.profile_generation's result (profilers.generation_profile.GenerationProfile)


def _plain(text: str, limit: int = 60) -> str:
    """Model-derived text for plotly, which renders a subset of HTML (<br>, <a>...): entities, never tags."""
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


def stats_rows(profile: Profile) -> list[dict]:
    rows = []
    for v in profile.variants:
        s = v.latency
        rows.append({"variant": v.id, "version": v.variant.target_label, "engine": v.variant.engine.label,
                     "status": "ok" if v.ok else f"{v.error_kind}: {v.error}",
                     "p50 ms": _r(s.p50_ms) if s else None, "p90 ms": _r(s.p90_ms) if s else None,
                     "p99 ms": _r(s.p99_ms) if s else None, "p99.9 ms": _r(s.p999_ms) if s else None,
                     "mean ms": _r(s.mean_ms) if s else None, "std ms": _r(s.std_ms) if s else None,
                     "min ms": _r(s.min_ms) if s else None, "p10 ms": _r(s.p10_ms) if s else None,
                     "QPS": _r(s.qps, 1) if s else None, "samples": s.count if s else 0,
                     "precision": v.details.get("precision_effective") or ("f32" if v.ok else None)})
    return rows


def ratio_rows(profile: Profile) -> list[dict]:
    return [{"variant": r.other_id, "vs baseline": r.baseline_id, "ratio (p50)": _r(r.estimate.ratio),
             "95% CI low": _r(r.estimate.ci_low), "95% CI high": _r(r.estimate.ci_high),
             "spread (IQR)": _r(r.estimate.spread), "rounds": r.estimate.rounds,
             "significant": r.estimate.significant, "verdict": r.verdict} for r in profile.ratios]


def cold_rows(profile: Profile) -> list[dict]:
    rows = []
    for v in profile.variants:
        if v.cold is None:
            continue
        c = v.cold
        rows.append({"variant": v.id, "worker start ms": _r(c.worker_start_ms, 2), "import ms": _r(c.import_ms, 2),
                     "convert ms": _r(c.convert_ms, 1), "load ms": _r(c.load_ms, 2),
                     "session ms": _r(c.session_ms, 2),
                     "first inference ms": _r(c.first_inference_ms, 3),
                     "warm inference ms": _r(c.warm_inference_ms, 3),
                     "from cache ms": _r(c.cached_session_ms, 2),
                     "time to first result ms": _r(c.time_to_first_result_ms, 1)})
    return rows


LABEL_PX = 11            # quantile label font size
LABEL_ROW_PX = 18        # one row of quantile labels per variant (fits an 11-px label and its padding)


def latency_histogram(profile: Profile, bins: int = 60) -> go.Figure:
    """Overlaid latency histograms (up to p99.9; the rest is counted in the legend) with p50/p99 lines."""
    fig = go.Figure()
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    for i, v in enumerate(x for x in profile.variants if x.ok):
        color = palette[i % len(palette)]
        samples = v.samples_ms
        cut = float(np.percentile(samples, 99.9))
        shown = samples[samples <= cut]
        fig.add_trace(go.Histogram(x=shown, name=f"{v.id} ({int((samples > cut).sum())} beyond p99.9)",
                                   nbinsx=bins, opacity=0.55, marker_color=color))
        # Each variant's labels get a row of their own, and in it p50's label extends left of its line and
        # p99's right of its (p50 <= p99): labels never overlap, however close the lines are.
        for q, dash in (("p50", "dash"), ("p99", "dot")):
            value = v.latency.p50_ms if q == "p50" else v.latency.p99_ms
            fig.add_vline(x=value, line_dash=dash, line_color=color, annotation_text=f"{q} {v.id}",
                          annotation_font_color=color, annotation_font_size=LABEL_PX,
                          annotation_yshift=-LABEL_ROW_PX * i,
                          annotation_position="top left" if q == "p50" else "top right")
    fig.update_layout(barmode="overlay", title="Latency per inference (ms)", xaxis_title="ms",
                      yaxis_title="iterations", height=420)
    return legend_below(fig)


def cold_start_chart(profile: Profile) -> go.Figure:
    """Stacked bars: worker start, import, session creation, first inference."""
    rows = [v for v in profile.variants if v.cold is not None]
    fig = go.Figure()
    for label, attr in (("worker start", "worker_start_ms"), ("engine import", "import_ms"),
                        ("session / compile", "session_ms"), ("first inference", "first_inference_ms")):
        fig.add_trace(go.Bar(y=[v.id for v in rows], x=[getattr(v.cold, attr) or 0 for v in rows], name=label,
                             orientation="h"))
    fig.update_layout(barmode="stack", title="Cold start (ms, fresh worker)", xaxis_title="ms")
    return legend_below(category_rows(fig, len(rows), extra_px=60))


def op_bar(ops: OpProfile, top: int = 20) -> go.Figure:
    kernels = list(ops.top(top))[::-1]
    fig = go.Figure(go.Bar(x=[k.ms for k in kernels], y=[f"{len(kernels) - i}. " + _plain(f"{k.name} ({k.op_type})", 80)
                              for i, k in enumerate(kernels)],
                           orientation="h", customdata=[_plain(k.anchor or "(not mapped)", 120) for k in kernels],
                           hovertemplate="%{y}<br>%{x:.4f} ms<br>ONNX node: %{customdata}<extra></extra>"))
    fig.update_layout(title=f"Top {len(kernels)} kernels, {ops.variant_id} (ms per inference)",
                      xaxis_title="ms")
    return category_rows(fig, len(kernels))


def op_treemap(ops: OpProfile, limit: int = 200) -> go.Figure:
    """Op type -> kernel, sized by time."""
    kernels = list(ops.kernels[:limit])
    types = sorted({k.op_type for k in kernels})
    ids = [f"type:{t}" for t in types] + [f"k:{i}" for i in range(len(kernels))]
    labels = [_plain(t) for t in types] + [_plain(k.name, 50) for k in kernels]
    parents = [""] * len(types) + [f"type:{k.op_type}" for k in kernels]
    values = [sum(k.ms for k in kernels if k.op_type == t) for t in types] + [k.ms for k in kernels]
    fig = go.Figure(go.Treemap(ids=ids, labels=labels, parents=parents, values=values, branchvalues="total"))
    fig.update_layout(title=f"Time by op type, {ops.variant_id}", height=480, margin={"t": 40, "l": 0, "r": 0, "b": 0})
    return fig


def memory_timeline(profile: Profile) -> go.Figure:
    fig = go.Figure()
    for v in profile.variants:
        if v.memory is None:
            continue
        t = [p[0] for p in v.memory.timeline]
        rss = [p[1] / 2**20 for p in v.memory.timeline]
        fig.add_trace(go.Scatter(x=t, y=rss, mode="lines", name=f"{v.id} ({v.memory.leak.verdict})",
                                 customdata=[p[2] for p in v.memory.timeline],
                                 hovertemplate="%{x:.3f} s<br>%{y:.1f} MiB<br>%{customdata}<extra></extra>"))
    fig.update_layout(title="Worker resident memory (MiB)", xaxis_title="seconds", yaxis_title="MiB", height=380)
    return legend_below(fig)


def sweep_rows(profile: Profile) -> list[dict]:
    rows = []
    for v in profile.variants:
        for sweep in v.sweeps:
            if sweep.error:
                rows.append({"variant": v.id, "sweep": sweep.kind, "value": None, "note": sweep.error})
                continue
            for p in sweep.points:
                rows.append({"variant": v.id, "sweep": sweep.kind, "value": p.value,
                             "p50 ms": _r(p.stats.p50_ms) if p.stats else None,
                             "p99 ms": _r(p.stats.p99_ms) if p.stats else None,
                             "throughput /s": _r(p.throughput, 1), "note": p.note})
    return rows


def sweep_chart(profile: Profile, kind: str) -> go.Figure:
    """Throughput (x) against latency (y): p50 solid, p99 dotted, one color per variant,
    points labelled by the swept value; log latency axis when the tails dwarf the medians."""
    label = {"threads": "threads", "batch": "batch", "concurrency": "in flight"}[kind]
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    fig = go.Figure()
    spread = 1.0
    index = 0
    for v in profile.variants:
        for sweep in v.sweeps:
            if sweep.kind != kind or sweep.error:
                continue
            pts = [p for p in sweep.points if p.stats is not None and p.throughput is not None]
            color = palette[index % len(palette)]
            index += 1
            x = [p.throughput for p in pts]
            fig.add_trace(go.Scatter(x=x, y=[p.stats.p50_ms for p in pts], mode="lines+markers+text",
                                     text=[f"{label} {p.value}" for p in pts], textposition="top center",
                                     name=f"{v.id} p50", line={"color": color}))
            fig.add_trace(go.Scatter(x=x, y=[p.stats.p99_ms for p in pts], mode="lines+markers",
                                     name=f"{v.id} p99", line={"color": color, "dash": "dot"}))
            spread = max([spread] + [p.stats.p99_ms / p.stats.p50_ms for p in pts if p.stats.p50_ms > 0])
    fig.update_layout(title=f"{kind} sweep: throughput vs latency (p50 solid, p99 dotted)",
                      xaxis_title="throughput (samples/s)", yaxis_title="latency (ms)", height=420,
                      yaxis_type="log" if spread > 5 else "linear")
    return legend_below(fig)


# ---------------------------------------------------------------------------- generation (KV-cache decoders)

def generation_rows(result: GenerationProfile) -> list[dict]:
    """One row per variant x case: TTFT, decode p50/p99, tokens/s, peak memory, the KV cache at the end."""
    rows = []
    for v in result.variants:
        if v.error:
            rows.append({"variant": v.id, "engine": v.variant.engine.label, "status": f"{v.error_kind}: {v.error}"})
            continue
        for c in v.cases:
            rows.append({"variant": v.id, "engine": v.variant.engine.label, "prompt": c.prompt_length,
                         "batch": c.batch, "status": "ok" if c.ok else c.error,
                         "TTFT ms": _r(c.ttft.p50_ms) if c.ttft else None,
                         "decode p50 ms": _r(c.decode.p50_ms) if c.decode else None,
                         "decode p99 ms": _r(c.decode.p99_ms) if c.decode else None,
                         "tokens/s": _r(c.tokens_per_s, 1), "end-to-end tokens/s": _r(c.e2e_tokens_per_s, 1),
                         "peak RSS MiB": _r(c.peak_rss / 2**20, 1) if c.peak_rss else None,
                         "KV cache KiB": _r(c.kv_cache_bytes / 2**10, 1) if c.kv_cache_bytes else None,
                         "generations": c.generations})
    return rows


def generation_ratio_rows(result: GenerationProfile) -> list[dict]:
    rows = []
    for r in result.ratios:
        rows.append({"variant": r.other_id, "vs baseline": r.baseline_id, "prompt": r.prompt_length,
                     "batch": r.batch, "TTFT ratio": _r(r.ttft.ratio) if r.ttft else None,
                     "TTFT 95% CI": r.ttft.interval_text() if r.ttft else None,
                     "decode ratio": _r(r.decode.ratio) if r.decode else None,
                     "decode 95% CI": r.decode.interval_text() if r.decode else None,
                     "same tokens": r.tokens_agree})
    return rows


def decode_position_chart(result: GenerationProfile) -> go.Figure:
    """Median decode latency against the past length it read, one line per variant x case."""
    fig = go.Figure()
    for v in result.variants:
        for c in v.cases:
            if not c.decode_by_position_ms:
                continue
            fig.add_trace(go.Scatter(x=list(c.past_lengths[1:]), y=list(c.decode_by_position_ms), mode="lines+markers",
                                     name=_plain(f"{v.id} prompt {c.prompt_length} batch {c.batch}")))
    fig.update_layout(title="Decode latency against position (median per step)", xaxis_title="past length (tokens)",
                      yaxis_title="ms per token", height=400)
    return legend_below(fig)


def memory_length_chart(result: GenerationProfile) -> go.Figure:
    """Resident memory of the worker against the positions held in the cache, one line per variant x case."""
    fig = go.Figure()
    for v in result.variants:
        for c in v.cases:
            if not c.rss_by_length:
                continue
            fig.add_trace(go.Scatter(x=[x for x, _ in c.rss_by_length], y=[b / 2**20 for _, b in c.rss_by_length],
                                     mode="lines", name=_plain(f"{v.id} prompt {c.prompt_length} batch {c.batch}")))
    fig.update_layout(title="Memory against length (resident MiB after each token)",
                      xaxis_title="positions in the cache", yaxis_title="MiB", height=400)
    return legend_below(fig)
