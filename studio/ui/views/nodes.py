"""Nodes: searchable node table and the details of one node (attributes,
shapes, weight statistics with a histogram)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from studio.ui import state, widgets

MAX_ROWS = 5000


def _node_table(summary, query: str, ops: list[str]) -> pd.DataFrame:
    edges = {t.name: t for t in summary.edges}
    q = query.lower().strip()
    rows = []
    for n in summary.nodes:
        if ops and n.op_type not in ops:
            continue
        if q and q not in n.id.lower() and q not in n.op_type.lower() and not any(
                q in x.lower() for x in (*n.inputs, *n.outputs)):
            continue
        out = edges.get(n.outputs[0]) if n.outputs else None
        rows.append({"id": n.id, "op": (f"{n.domain}::" if n.domain else "") + n.op_type,
                     "scope": n.scope or "main", "output shape": out.shape_text(20) if out else "?",
                     "MFLOPs": None if n.flops is None else round(n.flops / 1e6, 3)})
        if len(rows) >= MAX_ROWS:
            break
    return pd.DataFrame(rows, columns=["id", "op", "scope", "output shape", "MFLOPs"])


def render() -> None:
    opened = widgets.page_model("Nodes")
    if opened is None:
        return
    handle, _ = opened
    summary = widgets.guarded(lambda: state.summary(handle, state.dims()), spinner="Inspecting the model…")
    if summary is None:
        return
    c1, c2 = st.columns([2, 1])
    query = c1.text_input("Search nodes, op types or tensor names", key="node_query")
    op_types = sorted({n.op_type for n in summary.nodes})
    ops = c2.multiselect("Op types", op_types, key="node_ops")
    table = _node_table(summary, query, ops)
    st.caption(f"{len(table)} of {len(summary.nodes)} nodes" + (" (first 5,000 shown)" if len(table) >= MAX_ROWS else ""))
    event = widgets.dataframe(table, hide_index=True, width="stretch", on_select="rerun",
                         selection_mode="single-row", key="node_table", height=360)
    rows = event.selection.rows if event is not None and hasattr(event, "selection") else []
    if rows:
        st.session_state["selected_node"] = table.iloc[rows[0]]["id"]
    selected = st.session_state.get("selected_node")
    ids = table["id"].tolist()
    if selected is None and ids:
        selected = ids[0]
    if selected is None:
        return
    widgets.node_details(handle, summary, selected)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
