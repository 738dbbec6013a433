"""Shared widgets: literal text for model-derived strings, errors, the CLI hint,
the version picker and the summary cards. Model-derived text never goes
through Markdown unescaped."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from studio.core.errors import StudioError
from studio.core.fmt import human_bytes, human_count, printable
from studio import api
from studio.ui import state, viewer_docs

T = TypeVar("T")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def md_escape(text: str, max_len: int = 300) -> str:
    """Escape Markdown (and the HTML Streamlit would otherwise keep) in model text."""
    text = text if len(text) <= max_len else text[: max_len - 1] + "…"
    return _MD_SPECIAL.sub(r"\\\1", text).replace("\n", " ").replace("\r", " ")


_CLI_ONLY_ADVICE = (
    (re.compile(r"raise --timeout( or simplify the model)?"),
     "the page runs with the default time limit (for more, run the equivalent CLI command with --timeout SECONDS)"
     r"\1"),
)


def for_page(text: str) -> str:
    """Engine and sandbox messages are written for the CLI; advice a page user cannot follow ("raise
    --timeout") is said as what they can do here instead."""
    for pattern, instead in _CLI_ONLY_ADVICE:
        text = pattern.sub(instead, text)
    return text


def arrow_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with every column that mixes kinds of values (numbers and text, lists and None) as text:
    Arrow, which draws Streamlit's tables, takes one type per column and logs ArrowInvalid otherwise."""
    out = frame
    for col in frame.columns:
        values = frame[col]
        if values.dtype != object:
            continue
        kinds = {type(v) for v in values if v is not None and not (isinstance(v, float) and v != v)}
        if len(kinds) > 1 or any(k in (list, tuple, dict, set) for k in kinds):
            if out is frame:
                out = frame.copy()
            out[col] = ["" if v is None else str(v) for v in values]
    return out


def dataframe(data, *, where=None, **kwargs):  # noqa: ANN001, ANN201 - rows, a DataFrame or a Styler
    """``st.dataframe`` (or ``where.dataframe``, a column) through the one table helper: mixed columns as text."""
    if not hasattr(data, "to_html") or isinstance(data, pd.DataFrame):     # a Styler passes as it is
        data = arrow_safe(data if isinstance(data, pd.DataFrame) else pd.DataFrame(data))
    return (where or st).dataframe(data, **kwargs)


def metric_text(value) -> str:  # noqa: ANN001 - a float, an int or None
    """A metric value as shown: "n/a" for none, else 6 significant digits (0.9999999999999988 -> 1)."""
    if value is None:
        return "n/a"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _perfect(metric: str, value) -> bool:  # noqa: ANN001
    """The value is the best the metric has (agreement 1, a drop or error of 0) at 6 significant digits."""
    if not isinstance(value, (int, float)):
        return False
    try:
        higher = api.target_direction(metric) == ">="
    except (KeyError, StudioError):
        return False
    return float(f"{value:.6g}") == (1.0 if higher else 0.0)


def task_metric_rows(outputs) -> list[dict]:  # noqa: ANN001 - the task report's "outputs" list
    """The rows of a task-metric table (Verify, Data): values rounded, and the worst samples listed only
    where some sample falls short (an agreement of 1.0 has no worst samples to name)."""
    return [{"output": o["output"], "task": o["task"], "metric": m["metric"], "value": metric_text(m["value"]),
             "worst samples": "" if _perfect(m["metric"], m["value"])
             else ", ".join(str(i) for i in (m.get("worst_samples") or [])[:5]), "detail": m["detail"]}
            for o in outputs for m in o["metrics"]]


def md_code(text: str, max_len: int = 120) -> str:
    """Model text as a Markdown inline code span. Backslash escapes are not processed inside code, so
    ``md_escape`` there would show ``fix\\-input\\-shapes``; the span is fenced by more backticks than
    the text holds instead (CommonMark)."""
    text = printable(text, max_len)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plain(text: str, max_len: int = 120) -> str:
    """Model text for places that are not Markdown (table cells, option labels, metrics, code, file
    names): printable and capped, never backslash-escaped."""
    return printable(text, max_len)


def show_error(exc: BaseException) -> None:
    """One-line error for a user; unexpected exceptions are named, never dumped."""
    if isinstance(exc, StudioError):
        st.error(md_escape(str(exc), 600), icon="🚫")
    else:
        st.error(md_escape(f"unexpected error ({type(exc).__name__}); the studio is still running. "
                           f"Details: {str(exc).splitlines()[0] if str(exc) else ''}", 600), icon="🚫")


def guarded(fn: Callable[[], T], spinner: str | None = None) -> T | None:
    """Run ``fn``; on failure show the one-line error and return None."""
    try:
        if spinner:
            with st.spinner(spinner):
                return fn()
        return fn()
    except Exception as exc:   # Streamlit control-flow exceptions are BaseException, so they pass
        show_error(exc)
        return None


def project_versions(ws) -> dict[str, tuple]:  # noqa: ANN001 - the open workspace
    """Every version of every model of the open project, ``"model:version"`` -> (the model's workspace,
    the version, its label): the choices of the pages that compare two versions (``ws`` is the open one)."""
    project = state.project()
    entries: dict[str, tuple] = {}
    for m in state.models() if project is not None else []:
        model = ws if getattr(ws, "id", None) == m.id else guarded(lambda mid=m.id: api.project_model(project, mid))
        for v in (model.versions if model is not None else ()):
            entries[f"{m.id}:{v.id}"] = (model, v, f"{m.name} · {v.id} · {v.label} · {v.sha256[:8]}")
    return entries


def run_stoppable(label: str, fn: Callable[[Callable[[float], None]], T]) -> T | None:
    """Run a long job with a progress line and a Stop button.

    ``fn(on_tick)`` must pass ``on_tick`` to the sandbox (``run_job``/engine
    ``run``). Clicking Stop makes Streamlit interrupt this script run at the next
    element update, which ``on_tick`` performs; the sandbox then kills the worker.
    """
    # The Stop button and the progress line live in one placeholder, cleared however the run ends:
    # a Stop left on the page after the run would be a dead button.
    slot = st.empty()
    with slot.container():
        stop_col, status_col = st.columns([1, 6])
        stop_col.button("Stop", key=f"stop_{label}", help="Kill the running job")
        status = status_col.empty()
    started = time.monotonic()

    def on_tick(elapsed: float) -> None:
        # Throttled: one element update per second is enough to notice a Stop.
        if int(elapsed) != getattr(on_tick, "last", -1):
            on_tick.last = int(elapsed)
            status.caption(f"{label}… {time.monotonic() - started:.0f} s")

    try:
        return guarded(lambda: fn(on_tick))
    finally:
        slot.empty()


def hint_file_names(files: Sequence[tuple[str, str]]) -> list[str]:
    """The file names a command hint gives the versions it runs, from ``(stored file name, version key)``
    pairs: their own names, or ``<stem>-<key>.onnx`` where versions are stored under one name (an optimized
    version keeps its parent's: ``graph X --diff X`` would diff a file with itself)."""
    names = [name for name, _ in files]
    return [f"{Path(name).stem}-{key.replace(':', '-')}.onnx" if names.count(name) > 1 else name
            for name, key in files]


def cli_hint(command: str) -> None:
    """Show the equivalent CLI command (so users can move from clicking to scripting)."""
    with st.expander("Equivalent CLI command"):
        st.code(command, language="bash")


# The graph viewer in a same-origin frame; a node the user clicks there comes back to Python as a
# one-time "node" trigger (a custom component of Streamlit's v2 API: the viewer is one HTML
# document, so a frame is the simplest host, and this is the little JS no library provides).
_GRAPH_FRAME_JS = """
export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  let frame = parentElement.querySelector('iframe');
  if (!frame) {
    frame = document.createElement('iframe');
    frame.setAttribute('sandbox', 'allow-scripts allow-same-origin allow-downloads');
    frame.setAttribute('title', 'graph viewer');
    frame.style.cssText = 'width:100%;border:0;display:block';
    parentElement.appendChild(frame);
  }
  frame.style.height = (data.height || 820) + 'px';
  const onMessage = (ev) => {
    if (ev.source !== frame.contentWindow || !ev.data || typeof ev.data.gvSelect !== 'string') return;
    setTriggerValue('node', ev.data.gvSelect);
  };
  window.addEventListener('message', onMessage);
  if (frame.dataset.key !== data.key) {
    frame.dataset.key = data.key;
    if (data.url) { frame.removeAttribute('srcdoc'); frame.src = data.url; } else { frame.srcdoc = data.doc; }
  }
  return () => window.removeEventListener('message', onMessage);
}
"""


@functools.cache
def _graph_frame_component():
    return st.components.v2.component("onnx_studio_graph_frame", html="<div class='gv-host'></div>",
                                      js=_GRAPH_FRAME_JS, isolate_styles=True)


def graph_frame(doc: str, *, height: int, key: str, on_node: Callable[[], None] | None = None) -> str | None:
    """The viewer document ``doc`` in a frame ``height`` px high; the node id the user just
    clicked in it (once, on the rerun it causes), else None. ``doc`` is reloaded only when it
    changes, so pan, zoom and open groups survive the reruns clicks cause. Under ``onnx-studio serve`` the
    frame loads ``doc`` by URL (:mod:`studio.ui.viewer_docs`): a rerun's message carries its address, not the
    document."""
    import hashlib

    if viewer_docs.served():
        url, digest = viewer_docs.publish(doc)
        data = {"url": url, "key": digest[:16], "height": int(height)}
    else:
        digest = hashlib.sha1(doc.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        data = {"doc": doc, "key": digest, "height": int(height)}
    result = _graph_frame_component()(data=data, key=key, on_node_change=on_node or (lambda: None))
    node = getattr(result, "node", None)
    return node if isinstance(node, str) else None


@functools.cache
def _code_editor_component():
    """The Ace editor component of ``streamlit-code-editor`` (frontend bundled in its wheel, no CDN), or None
    when it is missing or fails to import: the plain text area then takes over."""
    try:
        from code_editor import code_editor as component
    except Exception:   # noqa: BLE001 -- ImportError or a broken install: never take the page down
        return None
    return component


def _code_plain_changed(widget_key: str, text_key: str, rev_key: str) -> None:
    st.session_state[text_key] = st.session_state[widget_key]
    st.session_state[rev_key] = st.session_state.get(rev_key, 0) + 1   # remount the editor with the new text


def _code_reset(value: str, text_key: str, rev_key: str) -> None:
    st.session_state[text_key] = value
    st.session_state[rev_key] = st.session_state.get(rev_key, 0) + 1


def code_editor(label: str, value: str, key: str, *, help: str | None = None, lines: tuple[int, int] = (18, 30),
                reset_label: str | None = None) -> str:
    """An editor for Python text that starts at ``value``; returns the current text.

    The Ace code editor (syntax highlighting, line numbers) sends its text when it loses focus (clicking a
    button after editing is enough) or on Ctrl+Enter. A "Plain text editor" toggle, and a missing or broken
    component, give a ``st.text_area`` keyed ``key`` instead (AppTest drives that one). The text itself lives
    in ``st.session_state[f"{key}__text"]``, so it survives switching between the two; ``reset_label``
    adds a button that puts ``value`` back.
    """
    text_key, rev_key, plain_key = f"{key}__text", f"{key}__rev", f"{key}__plain"
    component = _code_editor_component()
    if text_key not in st.session_state:
        st.session_state[text_key] = value
    head, toggle_col = st.columns([4, 1], vertical_alignment="bottom")
    head.markdown(f"**{md_escape(label, 200)}**", help=help)
    plain = toggle_col.toggle("Plain text editor", key=plain_key, disabled=component is None,
                              value=component is None,
                              help="A plain text box instead of the code editor (for screen readers, or when the "
                                   "editor component cannot load)")
    if plain or component is None:
        if st.session_state.get(key) != st.session_state[text_key]:
            st.session_state[key] = st.session_state[text_key]
        st.markdown(f"<style>.st-key-{key} textarea {{font-family: monospace; font-size: 0.85rem;}}</style>",
                    unsafe_allow_html=True)
        st.text_area(label, key=key, height=20 * lines[0] + 60, label_visibility="collapsed",
                     on_change=_code_plain_changed, args=(key, text_key, rev_key))
    else:
        rev = st.session_state.get(rev_key, 0)
        # Keyed by key + revision: a Reset or a plain-text edit remounts the editor with the new text; otherwise
        # the same editor lives across reruns (the component's identity is its key, not its arguments).
        with st.container(key=f"{key}__editor"):
            event = component(st.session_state[text_key], lang="python", height=list(lines), response_mode="blur",
                              options={"showLineNumbers": True, "wrap": False}, key=f"{key}__ace{rev}")
        if isinstance(event, dict) and event.get("id") and isinstance(event.get("text"), str):
            st.session_state[text_key] = event["text"]
        st.caption("Edits reach the studio when you leave the editor (or press Ctrl+Enter).")
    if reset_label:
        st.button(reset_label, key=f"{key}__reset", on_click=_code_reset, args=(value, text_key, rev_key))
    return st.session_state[text_key]


def page_model(title: str):
    """Title, then the current (handle, version); an info line and None when no model is open."""
    st.title(title)
    version = state.current_version()
    handle = state.current_handle() if version is not None else None
    if handle is None:
        st.info("Open a model on the Overview page first.")
        return None
    st.caption(f"Version {version.id} · {md_escape(version.label, 60)} · {md_escape(handle.name, 80)} · "
               f"sha256 {handle.short_sha}")
    return handle, version


def project_sidebar() -> None:
    """Sidebar: the current project, then pickers for its model and that model's versions."""
    project = state.project()
    if project is None:
        st.sidebar.caption("No project open: upload a model on the Overview page, or open one on Projects.")
        return
    st.sidebar.markdown(f"**Project** {md_escape(project.name, 60)}")
    models = state.models()
    if not models:
        st.sidebar.caption("No model in this project yet.")
        return
    ws = state.workspace()
    mids = [m.id for m in models]
    # Labels that do not change while the model grows (a changed label unsettles the widget's value).
    names = {m.id: f"{m.id} · {plain(m.name, 60)}" for m in models}
    current_model = ws.id if ws.id is not None else mids[-1]
    mkey = f"model_picker_{len(mids)}"
    st.sidebar.selectbox("Model", mids, index=mids.index(current_model) if current_model in mids else len(mids) - 1,
                         format_func=names.__getitem__, key=mkey,
                         on_change=lambda: st.session_state[mkey] in mids and state.pick_model(st.session_state[mkey]))
    if ws.id is None:
        return
    versions = ws.versions
    current = state.current_version()
    ids = [v.id for v in versions]
    labels = {v.id: f"{v.id} · {plain(v.label, 60)} · {v.sha256[:8]}" for v in versions}
    index = ids.index(current.id) if current and current.id in ids else len(ids) - 1
    # Keyed per model and version count so a version added during this run selects itself.
    vkey = f"version_picker_{ws.id}_{len(ids)}"
    st.sidebar.selectbox("Model version", ids, index=index, format_func=labels.__getitem__, key=vkey,
                         on_change=lambda: state.pick_version(st.session_state[vkey]))


def metric_row(items: list[tuple[str, str]]) -> None:
    cols = st.columns(len(items))
    for col, (label, value) in zip(cols, items, strict=True):
        col.metric(label, value)


def fmt_count(n: int | None) -> str:
    return human_count(n)


def fmt_bytes(n: int | None) -> str:
    return human_bytes(n)


def _weights(handle, details, key: str) -> None:
    for port in details.inputs:
        if not port.is_weight:
            continue
        stats = guarded(lambda name=port.name: api.weight_stats(handle, name))
        if stats is None:
            continue
        st.markdown(f"**Weight** {md_escape(stats.name, 120)} — {stats.dtype} {list(stats.shape)}, "
                    f"{fmt_bytes(stats.nbytes)}")
        if stats.min is None:
            continue
        metric_row([("min", f"{stats.min:.4g}"), ("max", f"{stats.max:.4g}"),
                    ("mean", f"{stats.mean:.4g}"), ("std", f"{stats.std:.4g}"),
                    ("zeros", f"{100 * stats.zeros_fraction:.1f}%")])
        if stats.nan_count or stats.inf_count:
            st.warning(f"{stats.nan_count} NaN and {stats.inf_count} Inf values")
        if stats.histogram_counts:
            centers = [(a + b) / 2 for a, b in zip(stats.histogram_edges[:-1], stats.histogram_edges[1:])]
            fig = go.Figure(go.Bar(x=centers, y=list(stats.histogram_counts)))
            fig.update_layout(height=220, margin={"t": 10, "b": 10}, xaxis_title="value", yaxis_title="count")
            st.plotly_chart(fig, width="stretch", key=f"{key}_hist_{stats.name}")


def node_details(handle, summary, node_id: str, key: str = "nodes") -> bool:
    """Details of one node (as on the Nodes page): header, inputs/outputs with shapes,
    attributes and weight statistics. ``key`` keeps widget keys apart between pages.
    Returns False when the id is not a node of this model."""
    details = api.node_details(handle, summary, node_id)
    if details is None:
        st.info("Select a node to see its details.")
        return False
    info = details.info
    st.markdown(f"### {md_escape(info.op_type, 80)} · {md_escape(info.id, 200)}")
    st.caption(f"domain {md_escape(info.domain or 'ai.onnx', 60)} · scope "
               f"{md_escape(info.scope or 'main graph', 120)} · "
               + ("FLOPs ?" if info.flops is None else f"FLOPs {fmt_count(info.flops)}"))
    left, right = st.columns(2)
    left.markdown("**Inputs**")
    dataframe(pd.DataFrame([p.__dict__ for p in details.inputs]), where=left, hide_index=True, width="stretch")
    right.markdown("**Outputs**")
    dataframe(pd.DataFrame([p.__dict__ for p in details.outputs]), where=right, hide_index=True, width="stretch")
    if details.attributes:
        st.markdown("**Attributes**")
        dataframe(pd.DataFrame([a.__dict__ for a in details.attributes]), hide_index=True, width="stretch")
    _weights(handle, details, key)
    return True
