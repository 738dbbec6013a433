"""A hierarchy of groups over the graph's nodes, collapsible to any level.

Where it comes from, in order:

1. **Subgraphs.** A node that owns If/Loop/Scan bodies becomes a *control*
   group holding the node and one *subgraph* group per body (nested at any depth).
2. **Name scopes.** Exporters name nodes like ``/layer1/layer1.0/conv1/Conv``;
   the path before the last ``/`` places a node in nested *scope* groups.
   A prefix shared by every node of a graph is dropped, a scope with a single
   child is merged into it (``layer1/layer1.0``) and a scope holding one node
   is replaced by the node.
3. **Op-type runs.** Chains of 4+ nodes of one op type (each the only consumer
   of the previous) become one *run* group (``Relu ×37``).
4. **Repeats.** Sibling scopes named ``<prefix><index>`` (``layers.0`` … ``layers.31``)
   with consecutive indices, each feeding the next, whose subtrees have the same
   structure (op types and internal wiring, names ignored: a Weisfeiler-Lehman
   hash) become one *repeat* group (``layers.0–31 ×32``) holding them; a member
   that differs stays beside it and the repeat's ``note`` names it
   (``differs: layers.31``).
5. **Depth bands.** A group with more than ``fanout`` children and no real
   structure (flat names, huge graphs, 10k graph inputs) is split, recursively,
   into *band* groups of consecutive depths, so every level stays drawable (R20).
   A group with sub-scopes keeps them: only its loose nodes are banded, and only
   when they alone exceed ``fanout`` (never "depth 132–158" instead of ``cv2``).
   Bands follow a dataflow order of the loose nodes and the kept sub-scopes together and
   are cut where a sub-scope feeds back into the band, so siblings never loop (a loop
   draws one edge upwards).

Built in O(N + E) plus sorting children; group keys are stable strings, so a
UI can remember which groups a user expanded.
"""

from __future__ import annotations

import heapq
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from studio.graphview.model import OP, GraphModel
from studio.graphview.order import topo_depth

log = logging.getLogger(__name__)

FANOUT = 40           # most children a group shows before it is split into bands
RUN_MIN = 4           # shortest op-type chain folded into a run group
MAX_SCOPE_DEPTH = 16  # name components beyond this are ignored
REPEAT_MIN = 2        # fewest identical indexed siblings folded into a repeat group
WL_ROUNDS = 3         # Weisfeiler-Lehman refinement rounds of the structure signature
_INDEXED = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True, slots=True)
class Group:
    index: int
    key: str                      # stable path, e.g. "s:layer1/s:layer1.0"; never model text alone
    label: str                    # display text (model-derived: escape when rendering)
    kind: str                     # root | scope | control | subgraph | function | run | repeat | band
    parent: int                   # -1 for the root
    depth: int                    # root is 0
    groups: tuple[int, ...]       # child groups, in dataflow order
    nodes: tuple[int, ...]        # child nodes (GNode.index), in dataflow order
    size: int                     # nodes below (all levels)
    first: int                    # smallest topological position below (orders siblings)
    note: str = ""                # repeat: the indexed siblings left out because they differ


@dataclass(frozen=True)
class Hierarchy:
    groups: tuple[Group, ...]
    node_group: tuple[int, ...]           # direct parent group of each node
    order: tuple[int, ...] = field(repr=False)   # topological position of each node
    depth: tuple[int, ...] = field(repr=False)   # longest-path depth of each node
    flat_names: bool = False              # no usable name scopes were found

    @property
    def root(self) -> Group:
        return self.groups[0]

    @property
    def max_depth(self) -> int:
        return max(g.depth for g in self.groups)

    def by_key(self) -> dict[str, int]:
        return {g.key: g.index for g in self.groups}

    def ancestors(self, node: int) -> list[int]:
        """Groups containing ``node``, innermost first (the root last)."""
        out = []
        g = self.node_group[node]
        while g != -1:
            out.append(g)
            g = self.groups[g].parent
        return out

    def leaves(self, group: int) -> list[int]:
        """Every node below ``group``, in dataflow order."""
        out: list[int] = []
        stack = [group]
        while stack:
            g = self.groups[stack.pop()]
            out.extend(g.nodes)
            stack.extend(g.groups)
        out.sort(key=self.order.__getitem__)
        return out

    def visible_counts(self) -> list[int]:
        """Items drawn at each level (index = level, 1..max_depth+1): collapsed groups at
        that depth plus nodes whose parent group is shallower."""
        top = self.max_depth + 2
        groups_at = [0] * top
        nodes_under = [0] * top
        for g in self.groups:
            groups_at[g.depth] += 1
            nodes_under[g.depth] += len(g.nodes)
        counts = [0] * top
        below = 0
        for level in range(1, top):
            below += nodes_under[level - 1]
            counts[level] = below + groups_at[level]
        return counts


class _Draft:
    __slots__ = ("key", "label", "kind", "children", "nodes", "groups", "note")

    def __init__(self, key: str, label: str, kind: str) -> None:
        self.key, self.label, self.kind = key, label, kind
        self.note = ""
        self.children: dict[str, _Draft] = {}   # scope children by name
        self.nodes: list[int] = []
        self.groups: list[_Draft] = []          # non-scope child groups

    def child(self, name: str) -> _Draft:
        c = self.children.get(name)
        if c is None:
            c = self.children[name] = _Draft(f"{self.key}/s:{name}", name, "scope")
        return c

    def all_groups(self) -> list[_Draft]:
        return [*self.children.values(), *self.groups]


def _scope_path(name: str) -> list[str]:
    if "/" not in name:
        return []
    parts = [p for p in name.split("/") if p]
    return parts[:-1][:MAX_SCOPE_DEPTH] if len(parts) > 1 else []


def _common_prefix(paths: list[list[str]]) -> int:
    if not paths or any(not p for p in paths):
        return 0
    first = paths[0]
    k = len(first)
    for p in paths[1:]:
        k = min(k, len(p))
        for j in range(k):
            if p[j] != first[j]:
                k = j
                break
        if k == 0:
            break
    return k


def build_hierarchy(graph: GraphModel, fanout: int = FANOUT) -> Hierarchy:
    """Group ``graph`` by subgraphs, name scopes, op-type runs and depth bands.

    A hostile model can nest bodies and scopes deep enough to exhaust Python's
    recursion; it then gets the flat hierarchy (depth bands only), not an error."""
    try:
        return _build(graph, fanout, structured=True)
    except RecursionError:
        log.warning("hierarchy of %s nests too deep; showing depth bands only", graph.name[:80])
        return _build(graph, fanout, structured=False)


def _build(graph: GraphModel, fanout: int, structured: bool) -> Hierarchy:
    n = len(graph.nodes)
    order, depth = topo_depth(n, [(e.src, e.dst) for e in graph.edges])
    root = _Draft("root", graph.name, "root")
    owners = {gi.owner for gi in graph.graphs if gi.owner is not None}
    containers: dict[int, _Draft] = {}     # graph index -> its container draft
    control: dict[int, _Draft] = {}        # owner node -> its control group
    functions: _Draft | None = None
    nodes_of: list[list[int]] = [[] for _ in graph.graphs]
    for node in graph.nodes:
        nodes_of[node.graph].append(node.index)
    any_scoped = False
    for gi, info in enumerate(graph.graphs):
        if not structured:
            root.nodes.extend(nodes_of[gi])
            continue
        if info.owner is not None and info.owner in control:
            owner = control[info.owner]
            c = _Draft(f"{owner.key}/b:{info.attr}", info.attr or "body", "subgraph")
            owner.groups.append(c)
        elif info.function is not None or info.parent is None and gi:
            if functions is None:
                functions = _Draft("root/functions", "local functions", "function")
                root.groups.append(functions)
            c = _Draft(f"{functions.key}/f:{gi}", info.function or info.scope, "function")
            functions.groups.append(c)
        else:
            c = root
        containers[gi] = c
        members = nodes_of[gi]
        paths = [_scope_path(graph.nodes[k].name) if graph.nodes[k].kind == OP else [] for k in members]
        op_paths = [p for k, p in zip(members, paths) if graph.nodes[k].kind == OP]
        any_scoped = any_scoped or any(op_paths)
        strip = _common_prefix(op_paths)
        places: dict[tuple[str, ...], _Draft] = {}     # a scope's draft, found once for all of its nodes
        for k, path in zip(members, paths):
            scope = tuple(path[strip:])
            place = places.get(scope)
            if place is None:
                place = c
                for part in scope:
                    place = place.child(part)
                places[scope] = place
            if k in owners:
                node = graph.nodes[k]
                ctl = _Draft(f"{place.key}/c:{node.id}", node.name or node.op_type, "control")
                ctl.nodes.append(k)
                place.groups.append(ctl)
                control[k] = ctl
            else:
                place.nodes.append(k)

    def simplify(d: _Draft) -> None:
        for c in d.all_groups():
            simplify(c)
        merged: dict[str, _Draft] = {}
        for name, c in d.children.items():
            # A scope with one scope child and nothing else: merge ("layer1/layer1.0").
            while c.kind == "scope" and not c.nodes and not c.groups and len(c.children) == 1:
                (only,) = c.children.values()
                only.label = f"{c.label}/{only.label}"    # its key already starts with c's key
                c = only
            if c.kind == "scope" and len(c.nodes) == 1 and not c.children and not c.groups:
                d.nodes.append(c.nodes[0])        # a scope holding one node is the node
            else:
                merged[name] = c
        d.children = merged

    simplify(root)
    succ_ops = graph.succ

    def runs(d: _Draft) -> None:
        for c in d.all_groups():
            runs(c)
        if len(d.nodes) < RUN_MIN:
            return
        members = set(d.nodes)
        nxt: dict[int, int] = {}
        has_prev: set[int] = set()
        for k in d.nodes:
            node = graph.nodes[k]
            if node.kind != OP:
                continue
            outs = {graph.edges[e].dst for e in succ_ops[k]}
            if len(outs) != 1:
                continue
            (v,) = outs
            if v in members and graph.nodes[v].op_type == node.op_type and graph.nodes[v].kind == OP \
                    and len({graph.edges[e].src for e in graph.pred[v]}) == 1:
                nxt[k] = v
                has_prev.add(v)
        taken: set[int] = set()
        for k in d.nodes:
            if k in has_prev or k not in nxt:
                continue
            chain = [k]
            while chain[-1] in nxt:
                chain.append(nxt[chain[-1]])
            if len(chain) >= RUN_MIN:
                op = graph.nodes[k].op_type
                r = _Draft(f"{d.key}/r:{graph.nodes[k].id}", f"{op} ×{len(chain)}", "run")
                r.nodes = chain
                d.groups.append(r)
                taken.update(chain)
        if taken:
            d.nodes = [k for k in d.nodes if k not in taken]

    runs(root)
    if structured:
        _repeats(graph, root)

    # Freeze: assign indices depth-first, order children by dataflow, split wide groups.
    groups: list[Group | None] = []
    node_group = [-1] * n

    def first_of(d: _Draft, memo: dict[int, int]) -> int:
        v = memo.get(id(d))
        if v is None:
            v = min([order[k] for k in d.nodes] + [first_of(c, memo) for c in d.all_groups()] or [n])
            memo[id(d)] = v
        return v

    memo: dict[int, int] = {}
    min_depth: dict[int, int] = {}

    def depth_of(d: _Draft) -> int:
        v = min_depth.get(id(d))
        if v is None:
            v = min([depth[k] for k in d.nodes] + [depth_of(c) for c in d.all_groups()] or [0])
            min_depth[id(d)] = v
        return v

    def band(d: _Draft, items: list | None = None) -> None:
        """Split ``d``'s children into depth bands while there are more than ``fanout``;
        ``items`` are the children already sorted (when a band is split again)."""
        keep_children: dict[str, _Draft] = {}
        keep_groups: list[_Draft] = []
        cuts: set[int] = set()
        if items is None:
            if len(d.nodes) + len(d.children) + len(d.groups) <= fanout:
                return
            structure = [c for c in d.all_groups() if c.kind != "run"]
            if structure:
                # Real sub-scopes (or bodies) stay as they are: only loose nodes and runs
                # are banded, and only when they alone are too many.
                loose = [c for c in d.groups if c.kind == "run"]
                if len(d.nodes) + len(loose) <= fanout:
                    return
                keep_children = d.children
                keep_groups = [c for c in d.groups if c.kind != "run"]
                items = [(depth[k], order[k], k) for k in d.nodes]
                items += [(depth_of(c), first_of(c, memo), c) for c in loose]
            else:
                items = [(depth[k], order[k], k) for k in d.nodes]
                items += [(depth_of(c), first_of(c, memo), c) for c in d.all_groups()]
            if len(items) <= fanout:
                return
            kept = [(depth_of(c), first_of(c, memo), c) for c in list(keep_children.values()) + keep_groups]
            if kept or any(not isinstance(t[2], int) for t in items):
                items, cuts = _flow_bands(graph, items, kept)
            else:       # nodes alone: their depth order is already a dataflow order (flat names, 100k nodes)
                items.sort(key=lambda t: (t[0], t[1]))
        if len(items) <= fanout:
            return
        k = min(fanout, math.ceil(len(items) / fanout))
        size = math.ceil(len(items) / k)
        d.children, d.nodes, d.groups = keep_children, [], list(keep_groups)
        starts = [0]
        for i in range(1, len(items)):
            if i in cuts or i - starts[-1] >= size:
                starts.append(i)
        for b, (s0, s1) in enumerate(zip(starts, starts[1:] + [len(items)])):
            chunk = items[s0:s1]
            lo, hi = min(t[0] for t in chunk), max(t[0] for t in chunk)
            bd = _Draft(f"{d.key}/d:{b}", f"depth {lo}–{hi}" if hi > lo else f"depth {lo}", "band")
            for _, _, x in chunk:
                if isinstance(x, int):
                    bd.nodes.append(x)
                else:
                    bd.groups.append(x)
            band(bd, chunk)
            d.groups.append(bd)

    def freeze(d: _Draft, parent: int, level: int) -> tuple[int, int]:
        band(d)
        idx = len(groups)
        groups.append(None)
        kids = sorted(d.all_groups(), key=lambda c: first_of(c, memo))
        child_idx = []
        size = len(d.nodes)
        for c in kids:
            ci, csize = freeze(c, idx, level + 1)
            child_idx.append(ci)
            size += csize
        nodes = sorted(d.nodes, key=order.__getitem__)
        for k in nodes:
            node_group[k] = idx
        groups[idx] = Group(idx, d.key, d.label, d.kind, parent, level, tuple(child_idx), tuple(nodes), size,
                            first_of(d, memo), d.note)
        return idx, size

    freeze(root, -1, 0)
    return Hierarchy(tuple(groups), tuple(node_group), tuple(order), tuple(depth),
                     flat_names=not any_scoped)



def _flow_bands(graph: GraphModel, items: list, kept: list) -> tuple[list, set[int]]:
    """``items`` (``(depth, order, node or run)``, to be banded) in a dataflow order of them and of the
    ``kept`` sub-groups beside them, and the positions where a band must start.

    A band is drawn as one box among its siblings: one holding a node that feeds a kept sub-group and a
    node fed by it would make a loop (band -> group -> band), so one edge of every such loop pointed
    upwards however the siblings were laid out (llama_optimum's self_attn: ``d:1`` <-> ``repeat_kv``,
    issue 35 item 2). In a topological order of items and kept groups together (ties by depth, then
    the graph's order), a band is cut before an item fed, through kept groups, by the band so far, so
    every band is a stretch of that order with no way out and back in: the siblings stay acyclic."""
    units = items + kept
    owner: dict[int, int] = {}
    for p, (_, _, x) in enumerate(units):
        for k in ([x] if isinstance(x, int) else _draft_leaves(x)):
            owner[k] = p
    succ: list[set[int]] = [set() for _ in units]
    pred: list[set[int]] = [set() for _ in units]
    for k, p in owner.items():
        for e in graph.succ[k]:
            q = owner.get(graph.edges[e].dst)
            if q is not None and q != p:
                succ[p].add(q)
                pred[q].add(p)
    indeg = [len(x) for x in pred]
    ready = [(units[p][0], units[p][1], p) for p in range(len(units)) if not indeg[p]]
    heapq.heapify(ready)
    left, seq = set(range(len(units))), []
    while left:
        if not ready:      # kept groups in a loop of their own: the earliest one goes next
            p = min(left, key=lambda q: (units[q][0], units[q][1]))
            ready.append((units[p][0], units[p][1], p))
        p = heapq.heappop(ready)[2]
        if p not in left:
            continue
        left.discard(p)
        seq.append(p)
        for q in succ[p]:
            indeg[q] -= 1
            if indeg[q] == 0 and q in left:
                heapq.heappush(ready, (units[q][0], units[q][1], q))
    n_items, out, cuts = len(items), [], set()
    band: set[int] = set()       # the current band's items and the kept groups they reach
    for p in seq:
        if p >= n_items:
            if pred[p] & band:
                band.add(p)
            continue
        if any(q >= n_items for q in pred[p] & band):
            cuts.add(len(out))
            band = set()
        band.add(p)
        out.append(items[p])
    return out, cuts


def _draft_leaves(d: _Draft) -> list[int]:
    out: list[int] = []
    stack = [d]
    while stack:
        x = stack.pop()
        out.extend(x.nodes)
        stack.extend(x.all_groups())
    return out


def structure_signature(graph: GraphModel, members: list[int],
                        adjacency: Sequence[list[list[int]]] | None = None) -> tuple:
    """A name-free signature of the subgraph on ``members``: the sorted multiset of
    Weisfeiler-Lehman labels (op type, domain, fed from / feeding outside, then
    ``WL_ROUNDS`` rounds of the neighbours' labels along internal edges). Two
    structurally identical layers get equal signatures whatever their names.
    ``adjacency``: :func:`node_adjacency` of ``graph``, when the caller signs many member sets of it."""
    return _refine(member_wiring(graph, members, adjacency or node_adjacency(graph)))


def member_wiring(graph: GraphModel, members: list[int],
                  adjacency: Sequence[list[list[int]]]) -> tuple[int, list[int], list[list[int]], list[list[int]]]:
    """What :func:`structure_signature` is a function of: (the number of members, each distinct member's
    first label, its internal predecessors, its internal successors), members numbered by first position."""
    preds, succs = adjacency
    # Members by position (a node once), their internal neighbours as positions, once: the rounds
    # revisit them WL_ROUNDS times over lists, not dicts.
    distinct = dict.fromkeys(members)
    pos = dict(zip(distinct, range(len(distinct))))
    at_pos = pos.get
    nodes = graph.nodes
    preds_in: list[list[int]] = []
    succs_in: list[list[int]] = []
    label: list[int] = []
    for k in pos:
        pk, sk = preds[k], succs[k]
        pin = [i for i in map(at_pos, pk) if i is not None]
        sin = [i for i in map(at_pos, sk) if i is not None]
        preds_in.append(pin)
        succs_in.append(sin)
        n = nodes[k]
        # Whether, not how often, a node is fed from / feeds outside: the last layer feeds
        # one final norm where the others feed the next layer's norm and residual.
        label.append(hash((n.kind, n.op_type, n.domain, len(pin) < len(pk), len(sin) < len(sk))))
    return len(members), label, preds_in, succs_in


def _refine(wiring: tuple[int, list[int], list[list[int]], list[list[int]]]) -> tuple:
    """The signature of a :func:`member_wiring`: ``WL_ROUNDS`` rounds of refinement, labels sorted."""
    size, label, preds_in, succs_in = wiring
    for _ in range(WL_ROUNDS):
        at = label.__getitem__
        label = [hash((own, tuple(sorted(map(at, pin))), tuple(sorted(map(at, sin)))))
                 for own, pin, sin in zip(label, preds_in, succs_in)]
    return size, tuple(sorted(label))


def family_signatures(graph: GraphModel, leaves: list[list[int]],
                      adjacency: Sequence[list[list[int]]]) -> list[tuple | None]:
    """:func:`structure_signature` of each member list of at least ``RUN_MIN`` nodes, None for a smaller one.
    A list wired exactly as the one signed before it, position for position, has its signature without the
    rounds: the signature is a function of the wiring (the 10k-node model's 50 blocks of a stage, and its
    20 stages, are each one wiring: 1,020 refinements become 21)."""
    sigs: list[tuple | None] = []
    last: tuple | None = None
    sig: tuple | None = None
    for lv in leaves:
        if len(lv) < RUN_MIN:
            sigs.append(None)
            continue
        wiring = member_wiring(graph, lv, adjacency)
        if wiring != last:
            last, sig = wiring, _refine(wiring)
        sigs.append(sig)
    return sigs


def node_adjacency(graph: GraphModel) -> tuple[list[list[int]], list[list[int]]]:
    """(the source node of each edge into, the target node of each edge out of) every node of ``graph``."""
    edges = graph.edges
    return ([[edges[e][0] for e in p] for p in graph.pred], [[edges[e][1] for e in s] for s in graph.succ])


def _repeats(graph: GraphModel, d: _Draft, adjacency: list[list[list[int]]] | None = None) -> None:
    """Fold stacks of identical indexed sibling scopes of ``d`` (and below) into repeat
    groups. A stack is a run of consecutive indices of one structure signature where
    each member feeds the next (decoder layers; not parallel per-scale heads), each
    member at least ``RUN_MIN`` nodes (a 3-node Conv block says more drawn than folded). ``adjacency``:
    :func:`node_adjacency`, listed on the first signature and shared by all of them."""
    adjacency = [] if adjacency is None else adjacency
    for c in d.all_groups():
        _repeats(graph, c, adjacency)
    families: dict[str, list[tuple[int, str, _Draft]]] = {}
    for name, c in d.children.items():
        m = _INDEXED.match(name)
        if m and c.kind == "scope":
            families.setdefault(m.group(1), []).append((int(m.group(2)), name, c))
    for prefix, fam in families.items():
        if len(fam) < REPEAT_MIN:
            continue
        fam.sort(key=lambda t: t[0])
        leaves = [_draft_leaves(t[2]) for t in fam]
        if not adjacency and any(len(lv) >= RUN_MIN for lv in leaves):
            adjacency.extend(node_adjacency(graph))
        sigs = family_signatures(graph, leaves, adjacency)
        stacks: list[list[int]] = []
        for j in range(len(fam)):
            if sigs[j] is not None and stacks and stacks[-1][-1] == j - 1 and fam[j][0] == fam[j - 1][0] + 1 \
                    and sigs[j] == sigs[j - 1] and _feeds(graph, leaves[j - 1], leaves[j]):
                stacks[-1].append(j)
            else:
                stacks.append([j])
        for st in stacks:
            if len(st) < REPEAT_MIN:
                continue
            lo, hi = fam[st[0]], fam[st[-1]]
            rep = _Draft(f"{d.key}/x:{lo[1]}", f"{prefix}{lo[0]}–{hi[0]} ×{len(st)}", "repeat")
            odd = [fam[j][1] for j in (st[0] - 1, st[-1] + 1) if 0 <= j < len(fam) and sigs[j] != sigs[st[0]]]
            if odd:
                rep.note = "differs: " + ", ".join(odd)
            for j in st:
                rep.groups.append(fam[j][2])
                del d.children[fam[j][1]]
            d.groups.append(rep)


def _feeds(graph: GraphModel, a: list[int], b: list[int]) -> bool:
    """Whether a node of ``b`` consumes a tensor made in ``a``."""
    src = set(a)
    return any(graph.edges[e].src in src for k in b for e in graph.pred[k])
