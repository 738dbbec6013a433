"""Graph: the model as op boxes with attributes and weight shapes (the viewer:
ELK layout in the browser, groups expand in place, click an edge for its
producer, minimap), the dot overview aggregated to fit (ECharts), a region in
detail (graphviz), and a before/after diff of any two versions drawn by the
viewer with one layout and synced pan/zoom. Every view says how to get the
same from the CLI."""

from __future__ import annotations

import hashlib

import pandas as pd
import streamlit as st

from studio import api
from studio.core.fmt import printable
from studio.core.requests import GraphRequest
from studio.ui import edit_model, edit_panel, state, widgets

MODES = ("Graph", "Overview", "Detail", "Diff")
CHART_HEIGHT = 620
VIEWER_HEIGHT = 820


def _view_key(*parts: object) -> str:
    """A chart key per drawing, so a selection never points into an older drawing."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:12]


def _selected_item(event) -> int | None:
    try:
        groups = event.selection.selected
    except (AttributeError, KeyError):
        return None
    for g in groups or []:
        if g.get("data_type") in ("node", "main") and g.get("data_indices"):
            return int(g["data_indices"][0])
    return None


def _expanded(sha256: str) -> set[str]:
    """Groups the user expanded, per model content (keys mean nothing in another model)."""
    return st.session_state.setdefault("graph_expanded", {}).setdefault(sha256, set())


def _expand(sha256: str, key: str) -> None:
    _expanded(sha256).add(key)


def _memo_view(key: tuple, build):
    """The last overview and its ECharts option, kept while nothing that shapes them changes:
    a click reruns the page, and a 10k-node layout need not be redone for it."""
    memo = st.session_state.get("graph_view_memo")
    if memo is not None and memo[0] == key:
        return memo[1], memo[2]
    view = build()
    if view is None:
        return None, None
    option = api.graph_echarts(view)
    st.session_state["graph_view_memo"] = (key, view, option)
    return view, option


def _to_detail(node: str | None = None, group: str | None = None) -> None:
    st.session_state["graph_mode"] = "Detail"
    if node is not None:
        st.session_state["graph_region"] = "Neighbourhood of a node"
        st.session_state["graph_focus"] = node
    if group is not None:
        st.session_state["graph_region"] = "A group"
        st.session_state["graph_group_pick"] = group


def _legend(view) -> None:
    legend = api.graph_legend_html(view)
    if legend:
        st.html(legend)


def _node_panel(handle, summary, index, node_id: str, key: str) -> None:
    k = index.ids.get(node_id)
    if k is None:
        return
    node = index.graph.nodes[k]
    if node.kind != "op":
        st.markdown(f"**Graph {node.kind}** {widgets.md_escape(node.name, 200)}")
        return
    if summary is None:      # the fast path of a huge model: details need the summary
        summary = widgets.guarded(lambda: state.summary(handle, state.dims()), spinner="Inspecting the model…")
        if summary is None:
            return
    widgets.node_details(handle, summary, node_id, key=key)
    c1, c2 = st.columns(2)
    c1.button("Neighbourhood in detail", key=f"{key}_to_detail", on_click=_to_detail, kwargs={"node": node_id})
    if c2.button("Open on the Nodes page", key=f"{key}_to_nodes"):
        st.switch_page("views/nodes.py")
    edit_panel.node_edit(handle, summary, node_id, key)


def _overview(handle, summary, index, overlays) -> GraphRequest:
    """The levelled overview; returns the ``GraphRequest`` it drew (its hint)."""
    fit, deepest = api.graph_levels(index)
    c1, c2, c3 = st.columns([2, 2, 3])
    level = c1.slider("Hierarchy level", 1, max(deepest, 2), value=min(fit, max(deepest, 2)), key="graph_level",
                      help="1 = top-level groups only; higher levels open nested groups") if deepest > 1 else None
    names = list(overlays)
    overlay = c2.selectbox("Overlay", names, key="graph_overlay")
    query = c3.text_input("Search nodes, op types, tensors", key="graph_query")
    # no level without the slider: the deepest that fits, which is level 1 then (what the CLI draws)
    request = GraphRequest(level=level, dims=state.dims(), overlay=overlay, search=query)
    _draw_overview(handle, summary, index, request)
    return request


def _draw_overview(handle, summary, index, request: GraphRequest) -> None:
    hier = index.hierarchy
    deepest = api.graph_levels(index)[1]
    level, overlay, query = request.level, request.overlay, request.search or ""
    expanded = _expanded(handle.sha256)
    data = state.overlay_data(handle.sha256)
    memo_key = (state.session_id(), handle.sha256, request, tuple(sorted(expanded)), id(index), id(data))
    view, option = _memo_view(memo_key, lambda: widgets.guarded(
        lambda: api.graph_view(index=index, summary=summary, request=request, expanded=expanded, overlay_data=data),
        spinner="Laying out the graph…"))
    if view is None:
        return
    st.caption(f"{len(view):,} items drawn · {index.nodes:,} nodes · level {view.projection.level} of {deepest}"
               + (f" · {len(expanded)} groups expanded" if expanded else "") + " · scroll to zoom, drag to pan, "
               "click a node for its details")
    if view.note:
        st.info(widgets.md_escape(view.note, 400))
    if expanded and st.button("Fold expanded groups back", key="graph_fold"):
        expanded.clear()
        st.rerun()
    _legend(view)
    key = "graph_chart_" + _view_key(handle.sha256, level, sorted(expanded), overlay, query)
    event = st.echarts_chart(option, on_select="rerun", key=key, height=CHART_HEIGHT)
    picked = _selected_item(event)
    if query:
        st.caption(f"search: {len(view.highlight)} drawn items match (red outline)")
        matches = [index.graph.nodes[k].id for k in api.search_nodes(index, query)]
        if matches:
            choice = st.selectbox("Matching nodes", matches, index=None, key="graph_match",
                                  format_func=lambda s: printable(s, 120))
            if choice:
                st.session_state["selected_node"] = choice
    if picked is not None and picked < len(view):
        it = view.items[picked]
        if it.kind == "group":
            g = hier.groups[it.ref]
            st.markdown(f"#### Group {widgets.md_escape(g.label, 120)}")
            lines = dict(view.tooltip_lines(picked))
            st.caption(widgets.md_escape(f"{g.kind} · {g.size:,} nodes · {lines.get('ops', '')}", 400))
            c1, c2 = st.columns(2)
            c1.button("Expand this group", key="graph_expand_btn", on_click=_expand, args=(handle.sha256, g.key))
            c2.button("Show the group in detail", key="graph_group_detail", on_click=_to_detail,
                      kwargs={"group": g.key})
            return
        st.session_state["selected_node"] = view.item_key(picked)
    selected = st.session_state.get("selected_node")
    if selected:
        _node_panel(handle, summary, index, selected, "graph")


def _viewer(handle, summary, index, overlays) -> GraphRequest:
    """The box viewer; returns the ``GraphRequest`` it drew (its hint)."""
    names = list(overlays)
    c1, c2 = st.columns([2, 5])
    overlay = c1.selectbox("Overlay", names, key="graph_overlay",
                           help="colours a stripe on each box (op type: the boxes' own header colours)")
    # The CLI's default colouring is 'op type' and its default renderer is the box viewer when no overlay is
    # named, so the request names either only when the page's choice differs.
    coloured = overlay if overlay != "op type" else None
    request = GraphRequest(dims=state.dims(), overlay=coloured, renderer="boxes" if coloured else "auto")
    _draw_viewer(handle, summary, index, request, c2)
    return request


def _draw_viewer(handle, summary, index, request: GraphRequest, c2) -> None:
    memo = st.session_state.get("graph_viewer_memo")
    # The viewer opens centred on a node picked elsewhere (search, a link); a node clicked in the
    # viewer itself only opens its panel below: re-centring would reload the drawing under the user.
    selected = st.session_state.get("selected_node")
    if selected != st.session_state.get("graph_viewer_clicked"):
        st.session_state["graph_viewer_focus"] = selected
    focus = st.session_state.get("graph_viewer_focus")
    if focus not in index.ids:
        focus = None
    data = state.overlay_data(handle.sha256)
    key = (state.session_id(), handle.sha256, request, id(index), id(data), focus)
    if memo is not None and memo[0] == key:
        html = memo[1]
    else:
        html = widgets.guarded(lambda: api.graph_viewer_html(
            index, request, summary=summary, overlay_data=data, height=VIEWER_HEIGHT, title=handle.path.name,
            focus=focus), spinner="Preparing the graph…")
        if html is None:
            return
        st.session_state["graph_viewer_memo"] = (key, html)
    c2.caption(f"{index.nodes:,} nodes · opens at a level of at most ~150 boxes · click a group to expand or "
               "collapse it in place, an edge to jump to its producer, a node for its attributes and its panel "
               "below; drag to pan, wheel to zoom, the minimap to move, Fit to see it all")
    clicked = widgets.graph_frame(html, height=VIEWER_HEIGHT + 10, key="graph_viewer_frame")
    if clicked and clicked in index.ids:
        st.session_state["selected_node"] = st.session_state["graph_viewer_clicked"] = clicked
    selected = st.session_state.get("selected_node")
    if selected and selected in index.ids:
        _node_panel(handle, summary, index, selected, "graph_viewer")
    if summary is not None:
        edit_model.model_edit(handle, summary)


def _detail(handle, summary, index, overlays) -> None:
    region = st.radio("Region", ["Neighbourhood of a node", "A group"], horizontal=True, key="graph_region")
    c1, c2 = st.columns([3, 2])
    overlay = c2.selectbox("Overlay", list(overlays), key="graph_detail_overlay")
    if region == "A group":
        hier = index.hierarchy
        groups = [g for g in hier.groups if g.parent != -1][:2000]
        if not groups:
            st.info("This model has no groups; use a node's neighbourhood.")
            return
        keys = [g.key for g in groups]
        labels = {g.key: f"{'· ' * (g.depth - 1)}{printable(g.label, 100)} ({g.size:,})" for g in groups}
        if st.session_state.get("graph_group_pick") not in keys:
            st.session_state["graph_group_pick"] = keys[0]
        gkey = c1.selectbox("Group", keys, key="graph_group_pick", format_func=lambda k: labels[k][:120])
        request = GraphRequest(group=gkey, overlay=overlay, dims=state.dims())
    else:
        default = st.session_state.get("selected_node") or next(
            (n.id for n in index.graph.nodes if n.kind == "op"), "")
        if "graph_focus" not in st.session_state:
            st.session_state["graph_focus"] = default
        focus = c1.text_input("Node id or name", key="graph_focus")
        hops = st.slider("Hops", 0, 10, 2, key="graph_hops")
        if not focus.strip():
            st.info("Type a node's id or name.")
            return
        request = GraphRequest(focus=focus, hops=hops, overlay=overlay, dims=state.dims())
    view = widgets.guarded(lambda: api.graph_view(index=index, summary=summary, request=request,
                                                  overlay_data=state.overlay_data(handle.sha256)))
    if view is None:
        return
    if view.note:
        st.info(widgets.md_escape(view.note, 400))
    _legend(view)
    st.graphviz_chart(api.graph_dot(view), width="content")   # natural size, capped by the page
    ids = [view.item_key(i) for i, it in enumerate(view.items) if it.kind == "node"]
    pick = st.selectbox("Node details", ids, index=None, key="graph_detail_node",
                        format_func=lambda s: printable(s, 120))
    if pick:
        st.session_state["selected_node"] = pick
        _node_panel(handle, summary, index, pick, "graph_detail")
    widgets.cli_hint(request.command(handle.path.name, "region.svg"))


def _model_dims(project, model) -> dict[str, int]:
    """A model's dims setting: the current model's as the Overview page holds it, another's as stored."""
    if getattr(model, "id", None) == getattr(state.workspace(), "id", None):
        return dict(state.dims())
    if project is None or getattr(model, "id", None) is None:
        return {}
    return {k: int(v) for k, v in (api.get_settings(project, model.id).get("dims") or {}).items()}


def _diff() -> None:
    """Any two versions of the project: of one model (with the passes between them) or of two models."""
    project, ws = state.project(), state.workspace()
    entries = widgets.project_versions(ws)
    if len(entries) < 2:
        st.info("The diff needs two versions: optimize the model, or open another model on the Overview page.")
        return
    keys = list(entries)
    current = state.current_version()
    cur_key = f"{getattr(ws, 'id', None)}:{current.id}" if current is not None else None
    b_default = keys.index(cur_key) if cur_key in keys else len(keys) - 1
    _, vb, _ = entries[keys[b_default]]
    parent_key = f"{getattr(ws, 'id', None)}:{vb.parent}" if vb.parent else None
    a_default = keys.index(parent_key) if parent_key in keys else (0 if b_default else 1)
    c1, c2, c3 = st.columns([2, 2, 2])
    a = c1.selectbox("Before", keys, index=a_default, key="diff_a", format_func=lambda k: entries[k][2])
    b = c2.selectbox("After", keys, index=b_default, key="diff_b", format_func=lambda k: entries[k][2])
    mode = c3.radio("Mode", ["overlay", "side-by-side"], horizontal=True, key="diff_mode")
    if a == b:
        st.info("Pick two different versions.")
        return
    (ma, va, _), (mb, vb, _) = entries[a], entries[b]
    memo = st.session_state.setdefault("graph_diff_memo", {})
    dims_a, dims_b = _model_dims(project, ma), _model_dims(project, mb)   # each model's dims setting
    request = GraphRequest(dims=dims_a, diff_mode=mode)     # B's own dims are the call's (a CLI diff has one set)
    mkey = (a, b, va.sha256, vb.sha256, tuple(sorted(dims_a.items())), tuple(sorted(dims_b.items())))
    d = memo.get(mkey)
    if d is None:
        if ma is mb or getattr(ma, "id", 1) == getattr(mb, "id", 2):
            d = widgets.guarded(lambda: api.diff_versions(ma, va.id, vb.id, dims=request,
                                                          pool_key=state.session_id()), spinner="Matching nodes…")
        else:
            d = widgets.guarded(lambda: api.diff(ma.handle(va.id), mb.handle(vb.id), dims=request, dims_b=dims_b,
                                                 pool_key=state.session_id()), spinner="Matching nodes…")
        if d is None:
            return
        memo.clear()
        memo[mkey] = d
    counts = d.counts()
    widgets.metric_row([("Removed", str(counts["removed"])), ("Added", str(counts["added"])),
                        ("Changed", str(counts["changed"])), ("Unchanged", str(counts["unchanged"]))])
    if d.passes:
        st.caption("Passes: " + widgets.md_escape(", ".join(d.passes), 300))
    html = widgets.guarded(lambda: api.diff_viewer_html(d, request, height=VIEWER_HEIGHT), spinner="Laying out…")
    if html is None:
        return
    st.caption("One layout of both versions: a matched node sits at the same place on both sides, and pan/zoom "
               "move both. Removed nodes are ghosted after, added ones before; the stripe is the status.")
    st.iframe(html, height=VIEWER_HEIGHT + 10)
    tables = api.diff_tables(d)
    for t in tables:
        if t.rows:
            st.markdown(f"#### {widgets.md_escape(t.caption, 120)}")
            widgets.dataframe(pd.DataFrame(list(t.rows), columns=list(t.header)), hide_index=True, width="stretch")
    with st.expander("Changed region in detail (graphviz)"):
        reg = widgets.guarded(lambda: api.diff_region_view(d))
        if reg is not None:
            if reg.note:
                st.caption(widgets.md_escape(reg.note, 300))
            st.graphviz_chart(api.graph_dot(reg), width="content")
    same_model = getattr(ma, "id", 1) == getattr(mb, "id", 2)
    pa, pb = widgets.hint_file_names([(ma.handle(va.id).path.name, va.id if same_model else a),
                                      (mb.handle(vb.id).path.name, vb.id if same_model else b)])
    widgets.cli_hint(request.command(pa, "diff.html", diff=pb))


def render() -> None:
    opened = widgets.page_model("Graph")
    if opened is None:
        return
    handle, _ = opened
    # A huge model is drawn before inspect; shapes and FLOPs come on request or with a node's details.
    fast = api.graph_prefers_fast_path(handle) and handle.sha256 not in st.session_state.get("graph_with_shapes", set())
    summary = None
    if not fast:
        summary = widgets.guarded(lambda: state.summary(handle, state.dims()), spinner="Inspecting the model…")
        if summary is None:
            return
    index = widgets.guarded(lambda: state.graph_index(handle, summary, state.dims()), spinner="Building the graph…")
    if index is None:
        return
    if fast:
        c1, c2 = st.columns([4, 1])
        c1.caption(f"{index.nodes:,} nodes: drawn without shapes and FLOPs so the overview comes first; "
                   "add them (shape inference) when you need them.")
        if c2.button("Add shapes and FLOPs", key="graph_add_shapes"):
            st.session_state.setdefault("graph_with_shapes", set()).add(handle.sha256)
            st.rerun()
    edit_panel.last_edit()
    mode = st.radio("View", MODES, horizontal=True, key="graph_mode", label_visibility="collapsed")
    overlays = api.graph_overlays(index, summary, state.overlay_data(handle.sha256))
    if mode == "Graph":          # each view's hint is the request it drew
        widgets.cli_hint(_viewer(handle, summary, index, overlays).command(handle.path.name, "graph.html"))
    elif mode == "Overview":
        widgets.cli_hint(_overview(handle, summary, index, overlays).command(handle.path.name, "graph.html"))
    elif mode == "Detail":
        _detail(handle, summary, index, overlays)
    else:
        _diff()


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
