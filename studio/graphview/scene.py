"""The scene the browser renderer draws: the hierarchy's open part as a tree of
groups, its leaves (op boxes with their attributes and weight shapes, graph
inputs/outputs, and *sealed* groups that stand for parts too big to ship),
the dataflow edges between leaves with their shape labels, and the groups
open at first paint.

Python decides what is shipped (at most ``SCENE_BUDGET`` leaves: a model past
150k nodes is aggregated here, R20; a 100k-node one ships whole, so every group
of it can be opened, issue 35) and the level the view opens at (at most
``OPEN_BUDGET`` visible items, so the first drawing is readable); the browser
lays out whatever is open with ELK (compound layered layout, so topology stays
visible inside expanded groups) and expands/collapses in place without a
round trip. The result is plain JSON data; model text in it is raw and the
renderer writes it with ``fillText``/``textContent`` only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter

from studio.graphview.boxes import attr_value, edge_label, edge_shape, node_box
from studio.graphview.escape import display
from studio.graphview.hierarchy import Hierarchy
from studio.graphview.model import INPUT, OP, OUTPUT, GraphModel
from studio.graphview.project import GROUP, auto_level, project

# Leaves shipped to the browser (past it, groups are sealed: drawn closed for good). It was 12,000, sized for
# ECharts; the canvas renderer lays out 100k nodes with every group open (~130k items) in its quick layout's
# worker in ~3 s and draws them through its bands at 1-3 ms a frame (issue 35), for a ~45 MB page.
SCENE_BUDGET = 150_000
OPEN_BUDGET = 150         # visible items at first paint
DETAIL_NODES = 4_000      # above this, full attribute lists stay out of the payload
TINY_GROUP = 2           # groups this small open with their parent
TEXT = 120                # longest model string shipped

# Netron-like header colours by op category.
CATEGORY_COLORS = {
    "layer": "#33557a", "activation": "#7a2e2e", "pool": "#335c3a", "norm": "#2f5d5d",
    "shape": "#6b4a26", "data": "#555555", "control": "#5a3d7a", "quant": "#7a5a2e", "io": "#222222",
}
_CATEGORIES = {
    "layer": ("Conv", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger", "QLinearConv", "QLinearMatMul",
              "ConvInteger", "Einsum", "Attention", "MultiHeadAttention", "LSTM", "GRU", "RNN"),
    "activation": ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "Gelu", "HardSigmoid", "HardSwish",
                   "Softmax", "LogSoftmax", "Softplus", "Softsign", "PRelu", "Mish", "Clip", "Erf"),
    "pool": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "Resize", "Upsample"),
    "norm": ("BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
             "LRN", "SimplifiedLayerNormalization", "SkipLayerNormalization", "Dropout"),
    "shape": ("Concat", "Split", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Gather",
              "GatherElements", "GatherND", "Expand", "Tile", "Pad", "Shape", "DepthToSpace", "SpaceToDepth"),
    "control": ("If", "Loop", "Scan"),
    "quant": ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Cast", "CastLike"),
}
_CATEGORY_OF = {op: c for c, ops in _CATEGORIES.items() for op in ops}


def op_color(op_type: str, kind: str = OP) -> str:
    if kind != OP:
        return CATEGORY_COLORS["io"]
    return CATEGORY_COLORS.get(_CATEGORY_OF.get(op_type, "data"), CATEGORY_COLORS["data"])


@dataclass(frozen=True)
class SceneStats:
    leaves: int            # leaves shipped
    groups: int            # open-able groups shipped
    edges: int
    open_level: int        # hierarchy level the view opens at
    visible: int           # items visible at first paint
    sealed: int            # groups shipped closed for good (their members stay in Python)


def _t(text: str) -> str:
    return display(text, TEXT)


class _Texts(dict):
    """``_t`` of each distinct string once per scene: a tensor name is shipped as one node's output, other
    nodes' inputs, an edge and a tensors entry (on a 100k-node model ~1M strings, most of them repeats)."""

    def __missing__(self, text: str) -> str:
        out = self[text] = display(text, TEXT)
        return out


def _op_counts(graph: GraphModel, hierarchy: Hierarchy) -> list[Counter]:
    """Op-type histogram below each group, in O(N + G) (children have larger pre-order indices)."""
    counts = [Counter() for _ in hierarchy.groups]
    for g in hierarchy.groups:
        c = counts[g.index]
        for k in g.nodes:
            if graph.nodes[k].kind == OP:
                c[graph.nodes[k].op_type] += 1
    for g in reversed(hierarchy.groups):
        if g.parent != -1:
            counts[g.parent].update(counts[g.index])
    return counts


_RANK = {"removed": 3, "added": 3, "changed": 2}


def _group_marks(hierarchy: Hierarchy, status: Mapping[int, str], colors: Mapping[str, str]) -> dict[int, str]:
    """Per group, the colour of the most significant diff status below it (none if unchanged),
    so a closed group shows that something inside changed."""
    worst: list[str | None] = [None] * len(hierarchy.groups)
    for g in hierarchy.groups:
        for k in g.nodes:
            st = status.get(k)
            if st in _RANK and (worst[g.index] is None or _RANK[st] > _RANK[worst[g.index]]):
                worst[g.index] = st
    for g in reversed(hierarchy.groups):
        st = worst[g.index]
        if g.parent != -1 and st is not None:
            p = worst[g.parent]
            if p is None or _RANK[st] > _RANK[p]:
                worst[g.parent] = st
    return {i: colors[st] for i, st in enumerate(worst) if st is not None and st in colors}


def _summary_text(c: Counter) -> str:
    # c.most_common(3) as its documented equal, a sort (heapq.nlargest's Python loop was most of it here, on ~3k
    # groups of a few op types each)
    return ", ".join(f"{op} ×{n}" for op, n in sorted(c.items(), key=itemgetter(1), reverse=True)[:3])


def _visible_at_open(parents: list[int], leaf_parent: list[int], is_open: list[bool]) -> int:
    """Items drawn when only ``is_open`` groups are open: leaves under open chains plus
    the closed groups directly inside open ones (groups are pre-ordered)."""
    reach = [False] * len(parents)
    for i, p in enumerate(parents):
        reach[i] = i == 0 or (reach[p] and is_open[p])
    shown_groups = sum(1 for i in range(1, len(parents)) if reach[i] and not is_open[i])
    shown_leaves = sum(1 for p in leaf_parent if reach[p] and is_open[p])
    return shown_groups + shown_leaves


def build_scene(graph: GraphModel, hierarchy: Hierarchy, *, title: str | None = None,
                status: Mapping[int, str] | None = None, status_colors: Mapping[str, str] | None = None,
                side: Mapping[int, str] | None = None, edge_side: Mapping[tuple[int, int, str], str] | None = None,
                budget: int = SCENE_BUDGET,
                open_budget: int = OPEN_BUDGET, expanded: tuple[str, ...] = (),
                focus: str | None = None) -> tuple[dict, SceneStats]:
    """The JSON scene for ``graph`` (see module doc).

    ``status``/``status_colors`` colour nodes by a diff status (node index -> status);
    ``side`` marks each node "a", "b" or "ab" for the side-by-side diff (``edge_side`` each
    edge, by (source node, target node, tensor)); ``expanded``
    names groups (by hierarchy key) to open as well at first paint; ``focus`` (a node id)
    is revealed, centred and selected once drawn."""
    _t = _Texts().__getitem__      # noqa: N806 (shadows the module's _t: the same text, each string once)
    groups = hierarchy.groups
    counts = hierarchy.visible_counts()
    deepest = len(counts) - 1
    ship_level = auto_level(hierarchy, budget)
    if counts[deepest] <= budget:
        ship_level = deepest
    proj = project(graph, hierarchy, ship_level)
    # Open groups holding something shipped, in pre-order (parents first); root is local 0.
    used = sorted(proj.open_groups | {0})
    local = {g: i for i, g in enumerate(used)}
    op_counts = _op_counts(graph, hierarchy)
    group_mark = _group_marks(hierarchy, status, status_colors) if status is not None and status_colors else {}
    out_groups = []
    for g in used:
        grp = groups[g]
        out_groups.append({"key": _t(grp.key), "label": _t(grp.label), "kind": grp.kind,
                           "parent": local.get(grp.parent, -1) if grp.parent != -1 else -1,
                           "size": grp.size, "depth": grp.depth,
                           "ops": _t(_summary_text(op_counts[g])) if g else "",
                           **({"note": _t(grp.note)} if grp.note else {}),
                           **({"mark": group_mark[g]} if g in group_mark else {})})
    detail = len(graph.nodes) <= DETAIL_NODES
    nodes, node_group = graph.nodes, hierarchy.node_group
    leaves = []
    leaf_parent = []
    sealed = 0
    for it in proj.items:
        if it.kind == GROUP:
            grp = groups[it.ref]
            parent = local[grp.parent]
            sealed += 1
            leaves.append({"kind": "sealed", "key": _t("group:" + grp.key), "op": _t(grp.label),
                           "name": f"{grp.size:,} nodes", "attrs": [_t(_summary_text(op_counts[it.ref]))],
                           "w": [], "g": parent, "c": "#777777", "side": "ab",
                           **({"mark": group_mark[it.ref]} if it.ref in group_mark else {})})
        else:
            n = nodes[it.ref]
            g = node_group[it.ref]
            parent = local[g] if g != -1 else 0
            box = node_box(graph, it.ref)
            # map over the bound lookup, not a comprehension: no Python frame per string (~10 per leaf)
            leaf = {"kind": n.kind, "key": _t(n.id), "op": _t(box.title), "name": _t(box.name),
                    "full": _t(n.name or n.id), "attrs": list(map(_t, box.attrs)), "w": list(map(_t, box.weights)),
                    "g": parent, "c": op_color(n.op_type, n.kind),
                    "in": list(map(_t, filter(None, n.inputs[:16]))),
                    "out": list(map(_t, filter(None, n.outputs[:16])))}
            if n.kind in (INPUT, OUTPUT):
                leaf["attrs"] = [edge_shape(graph, n.name)] if edge_shape(graph, n.name) else []
            if detail and n.kind == OP and graph.protos and graph.protos[it.ref] is not None:
                leaf["all"] = [[_t(a.name), attr_value(a, 80)] for a in graph.protos[it.ref].attribute][:24]
            if n.flops:
                leaf["flops"] = n.flops
            if status is not None:
                st = status.get(it.ref, "unchanged")
                leaf["status"] = st
                if status_colors and st in status_colors and st != "unchanged":
                    leaf["mark"] = status_colors[st]
            leaf["side"] = side.get(it.ref, "ab") if side is not None else "ab"
            leaves.append(leaf)
        leaf_parent.append(parent)
    edges = []
    tensors: dict[str, str] = {}
    for e in proj.edges:
        if e.count != 1:
            edges.append([e.src, e.dst, "", "", e.count])
            continue
        info = graph.tensors.get(e.tensor)
        label = edge_label(info)
        row = [e.src, e.dst, _t(e.tensor), label, 1]
        if edge_side is not None:
            a, b = proj.items[e.src], proj.items[e.dst]
            if a.kind != GROUP and b.kind != GROUP:
                row.append(edge_side.get((a.ref, b.ref, e.tensor), "ab"))
        edges.append(row)
        if e.tensor not in tensors:
            tensors[_t(e.tensor)] = (f"{info.dtype} {label}" if info is not None else label).strip()
    # The level the view opens at: the deepest whose visible items fit ``open_budget``.
    parents = [og["parent"] for og in out_groups]
    depths = [og["depth"] for og in out_groups]
    keys = {og["key"] for og in out_groups if og["key"] in set(expanded)}
    # A repeat's members after the first are copies of it (``layers.0–2 ×3``): they open at first paint only when
    # asked for, so the opening view draws one layer's contents, not three alike (issue 35: on the llama sample
    # ELK laid out all three at first paint, 171 items, most of its wait), and the budget goes deeper instead.
    # Not in a diff, where a member may hold a change.
    first_member = {p: i for i, p in reversed(list(enumerate(parents))) if i and out_groups[p]["kind"] == "repeat"}
    copy = [status is None and parents[i] in first_member and first_member[parents[i]] != i
            and out_groups[i]["key"] not in keys for i in range(len(out_groups))]

    def opened_at(level: int) -> list[bool]:
        return [i == 0 or out_groups[i]["key"] in keys or (depths[i] < level and not copy[i])
                for i in range(len(out_groups))]

    open_level = 1
    for level in range(1, ship_level + 1):
        if _visible_at_open(parents, leaf_parent, opened_at(level)) <= open_budget:
            open_level = level
        else:
            break
    is_open = opened_at(open_level)
    visible = _visible_at_open(parents, leaf_parent, is_open)
    # Tiny groups (a SiLU's Sigmoid and Mul) say more open than as a box, and an open repeat
    # shows its first member's contents (the others stay listed as boxes), while it fits.
    direct_leaves = Counter(leaf_parent)
    child_groups = Counter(parents[1:])
    reach = [True] + [False] * (len(out_groups) - 1)
    for i in range(1, len(out_groups)):
        p = parents[i]
        reach[i] = reach[p] and is_open[p]
        if reach[i] and not is_open[i] and (out_groups[i]["size"] <= TINY_GROUP or first_member.get(p) == i):
            delta = direct_leaves[i] + child_groups[i] - 1
            if visible + delta <= open_budget:
                is_open[i] = True
                visible += delta
    note = None
    if sealed:
        note = (f"{len(graph.nodes):,} nodes: {sealed:,} groups are drawn closed (open them as a region in "
                "the Detail view or with --focus/--level on the CLI)")
    scene = {"title": _t(title or graph.name), "groups": out_groups, "leaves": leaves, "edges": edges,
             "tensors": tensors, "open": [i for i, o in enumerate(is_open) if o], "note": note,
             "nodes": len(graph.nodes),
             "focus": next((i for i, lf in enumerate(leaves) if focus is not None and lf["key"] == focus), None)}
    return scene, SceneStats(len(leaves), len(out_groups), len(edges), open_level, visible, sealed)


def opening_view(scene: dict, open_groups: set[int] | None = None) -> tuple[list[str], set[tuple[str, str]]]:
    """What the renderer draws for ``open_groups`` (default: the scene's opening set): the
    visible items ("n<leaf>" or "g<group>", closed groups and leaves under open ones) and the
    merged edges between them. The same rule as ``web/renderer.js``, for tests and tools."""
    groups = scene["groups"]
    is_open = set(scene["open"] if open_groups is None else open_groups) | {0}

    def rep(leaf: int) -> str:
        g, r = scene["leaves"][leaf]["g"], None
        while g > 0:
            if g not in is_open:
                r = g
            g = groups[g]["parent"]
        return f"n{leaf}" if r is None else f"g{r}"

    reps = [rep(i) for i in range(len(scene["leaves"]))]
    items = list(dict.fromkeys(reps))
    edges = {(reps[e[0]], reps[e[1]]) for e in scene["edges"] if reps[e[0]] != reps[e[1]]}
    return items, edges
