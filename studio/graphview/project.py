"""Project the graph onto a cut of the hierarchy: each node is drawn as itself
or as the collapsed group that contains it; edges between the same two drawn
items merge (with a count). O(N + E + G).

Which groups are open: every group shallower than ``level``, plus the
groups named in ``expanded``, minus those named in ``collapsed`` (by key).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from studio.graphview.hierarchy import Hierarchy
from studio.graphview.model import GraphModel

NODE, GROUP = "node", "group"


@dataclass(frozen=True, slots=True)
class Item:
    kind: str        # node | group
    ref: int         # GNode.index or Group.index


@dataclass(frozen=True, slots=True)
class VEdge:
    src: int         # item indices
    dst: int
    count: int       # graph edges merged into this one
    tensor: str      # the first merged edge's tensor (its label when count == 1)


@dataclass(frozen=True)
class Projection:
    items: tuple[Item, ...]               # in dataflow order
    edges: tuple[VEdge, ...]
    item_of_node: tuple[int, ...]         # -1 for nodes left out of the view
    level: int
    open_groups: frozenset[int]           # open groups that hold something drawn (DOT clusters)


def open_set(hierarchy: Hierarchy, level: int, expanded: Collection[str] = (),
             collapsed: Collection[str] = ()) -> list[bool]:
    """Whether each group is open (its children drawn) under these settings."""
    exp, col = set(expanded), set(collapsed)
    return [g.parent == -1 or (g.key not in col and (g.depth < level or g.key in exp))
            for g in hierarchy.groups]


def reveal(hierarchy: Hierarchy, node: int) -> set[str]:
    """Keys of the groups to expand so that ``node`` is drawn as itself."""
    return {hierarchy.groups[g].key for g in hierarchy.ancestors(node)}


def project(graph: GraphModel, hierarchy: Hierarchy, level: int, *, expanded: Collection[str] = (),
            collapsed: Collection[str] = (), nodes: Iterable[int] | None = None) -> Projection:
    """The drawn items and edges at ``level`` (see module doc); ``nodes`` limits the view
    to a subset (a region) and drops edges leaving it."""
    groups = hierarchy.groups
    is_open = open_set(hierarchy, level, expanded, collapsed)
    rep = [-1] * len(groups)               # the collapsed group that stands for this group
    for g in groups:                       # parents come before children (pre-order indices)
        if g.parent == -1:
            continue
        pr = rep[g.parent]
        rep[g.index] = pr if pr != -1 else (-1 if is_open[g.index] else g.index)
    n = len(graph.nodes)
    by_order = [0] * n
    for k, pos in enumerate(hierarchy.order):
        by_order[pos] = k
    subset = None if nodes is None else set(nodes)
    item_of_node = [-1] * n
    group_item: dict[int, int] = {}
    items: list[Item] = []
    open_used: set[int] = set()
    for k in by_order:
        if subset is not None and k not in subset:
            continue
        g = hierarchy.node_group[k]
        r = rep[g] if g != -1 else -1
        if r == -1:
            item_of_node[k] = len(items)
            items.append(Item(NODE, k))
            open_used.add(g)
        else:
            i = group_item.get(r)
            if i is None:
                i = group_item[r] = len(items)
                items.append(Item(GROUP, r))
                open_used.add(groups[r].parent)
            item_of_node[k] = i
    merged: dict[tuple[int, int], list] = {}
    for e in graph.edges:
        a, b = item_of_node[e.src], item_of_node[e.dst]
        if a == -1 or b == -1 or a == b:
            continue
        m = merged.get((a, b))
        if m is None:
            merged[(a, b)] = [1, e.tensor]
        else:
            m[0] += 1
    edges = tuple(VEdge(a, b, c, t) for (a, b), (c, t) in merged.items())
    # Every open ancestor of something drawn is a cluster in the DOT view.
    closure: set[int] = set()
    for g in open_used:
        while g != -1 and g not in closure:
            closure.add(g)
            g = groups[g].parent
    return Projection(tuple(items), edges, tuple(item_of_node), level, frozenset(closure))


def auto_level(hierarchy: Hierarchy, budget: int) -> int:
    """The deepest level whose drawing has at most ``budget`` items (at least 1)."""
    counts = hierarchy.visible_counts()
    best = 1
    for level in range(1, len(counts)):
        if counts[level] <= budget:
            best = level
    return best
