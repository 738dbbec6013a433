"""Edits of the whole model on the Graph page (DESIGN.md §13), beside the node panel's: change an
input's shape or dtype, remove outputs, split at a cut, merge another model of the project in
front, import an opset or domain. Each builds the script ``onnx-studio edit --script`` takes and
goes through the node panel's preview / apply / show-as-script (``edit_panel.preview_apply``)."""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from studio import api
from studio.core.fmt import printable
from studio.ui import edit_panel, state, widgets

ACTIONS = ("Change an input", "Remove outputs", "Split at a cut", "Merge a model", "Add an opset or domain")
KEY = "graph_model"
KEEP = "(keep)"
UNCONNECTED = "(not connected)"


def _shape_text(t) -> str:
    return json.dumps([d if isinstance(d, (int, str)) or d is None else str(d) for d in t.shape]) \
        if t.shape is not None else ""


def _change_input(summary) -> list[dict] | None:
    names = [t.name for t in summary.inputs]
    if not names:
        st.caption("The model has no graph inputs.")
        return None
    name = st.selectbox("Input", names, key=f"{KEY}_in_name", format_func=lambda s: printable(s, 100))
    t = summary.inputs[names.index(name)]
    text = st.text_input("Shape (JSON list: sizes, names for dynamic dims, null for unknown)",
                         value=_shape_text(t), key=f"{KEY}_in_shape_{name}")
    dtype = st.selectbox("Dtype", (KEEP, *edit_panel.DTYPES), key=f"{KEY}_in_dtype_{name}")
    op: dict[str, Any] = {"op": "set_input", "input": name}
    if text and text != _shape_text(t):
        shape = edit_panel.json_value(text)
        if not isinstance(shape, list):
            st.caption("The shape is a JSON list, like [1, 3, 224, 224] or [\"batch\", 3, 224, 224].")
            return None
        op["shape"] = shape
    if dtype != KEEP and dtype != t.dtype:
        op["dtype"] = dtype
    if len(op) == 2:
        st.caption(f"{printable(name, 80)} is {t.dtype}{_shape_text(t)}: change its shape or dtype to build the "
                   "edit (shape inference runs again downstream).")
        return None
    return [op]


def _remove_outputs(summary) -> list[dict] | None:
    names = [t.name for t in summary.outputs]
    gone = st.multiselect("Outputs to remove (the nodes only they need go too)", names, key=f"{KEY}_rm_outputs",
                          format_func=lambda s: printable(s, 100))
    return [{"op": "remove_outputs", "outputs": list(gone)}] if gone else None


def _split(summary) -> list[dict] | None:
    cut = st.multiselect("Cut tensors (the first part's outputs, the second part's inputs; or click nodes in the "
                         "drawing and \"Add its outputs to the cut\")",
                         edit_panel.main_tensors(summary), key=edit_panel.CUT_KEY,
                         format_func=lambda s: printable(s, 100))
    if not cut:
        st.caption("Pick the tensors to cut at; both parts become versions (the second as 'part 2'), and each "
                   "is checked to reproduce the original's tensors.")
        return None
    return [{"op": "split", "cut": list(cut)}]


def _merge(summary, handle) -> list[dict] | None:
    ws = state.workspace()
    choices = {k: v for k, v in widgets.project_versions(ws).items() if v[1].sha256 != handle.sha256}
    if not choices:
        st.caption("Add the model to put in front (a pre-processing model) to this project on the Overview page "
                   "first; it is then offered here.")
        return None
    pick = st.selectbox("The other model", list(choices), format_func=lambda k: choices[k][2],
                        key=f"{KEY}_merge_model")
    after = st.radio("It goes", ("in front (its outputs feed this model)", "after (this model's outputs feed it)"),
                     horizontal=True, key=f"{KEY}_merge_position").startswith("after")
    model, version, _ = choices[pick]
    other = widgets.guarded(lambda: model.handle(version.id))
    if other is None:
        return None
    other_summary = widgets.guarded(lambda: state.summary(other, {}), spinner="Reading the other model…")
    if other_summary is None:
        return None
    feeding, fed = (summary, other_summary) if after else (other_summary, summary)
    outs = [UNCONNECTED, *[t.name for t in feeding.outputs]]
    pairs = []
    for t in fed.inputs:
        src = st.selectbox(f"{printable(t.name, 60)} ({t.dtype}{_shape_text(t)}) takes", outs,
                           key=f"{KEY}_merge_{pick}_{int(after)}_{t.name}", format_func=lambda s: printable(s, 100))
        if src != UNCONNECTED:
            pairs.append([src, t.name])
    if not pairs:
        st.caption("Connect at least one output of the first model to an input of the second.")
        return None
    op: dict[str, Any] = {"op": "merge", "model": str(other.path), "io_map": pairs}
    if after:
        op["position"] = "after"
    return [op]


def _opset() -> list[dict] | None:
    domain = st.text_input("Domain (empty: ai.onnx; ai.onnx.ml, com.microsoft, your own)", key=f"{KEY}_op_domain")
    version = int(st.number_input("Version", min_value=1, max_value=100, value=1, key=f"{KEY}_op_version"))
    if not domain:
        st.caption("Name the domain to import (changing ai.onnx's version is the convert-opset pass).")
        return None
    return [{"op": "add_opset", "domain": domain, "version": version}]


def model_edit(handle, summary) -> None:
    """The Graph page's "Edit the model" section: pick an action, then preview / apply / show as script."""
    with st.expander("Edit the model: inputs, outputs, split, merge, opsets",
                     expanded=st.session_state.get(f"{KEY}_action") is not None):
        action = st.radio("Model edit", ACTIONS, index=None, horizontal=True, key=f"{KEY}_action")
        if action is None:
            st.caption("Node edits (bypass, delete, rename, insert, attributes, weights, extract) are in the panel "
                       "of a clicked node.")
            return
        if action == "Change an input":
            ops = _change_input(summary)
        elif action == "Remove outputs":
            ops = _remove_outputs(summary)
        elif action == "Split at a cut":
            ops = _split(summary)
        elif action == "Merge a model":
            ops = _merge(summary, handle)
        else:
            ops = _opset()
        if ops is not None:
            edit_panel.preview_apply(handle, state.current_version(), ops, KEY)
