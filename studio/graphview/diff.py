"""Before/after diff of two models (any two workspace versions).

Nodes are matched, in order of confidence:

1. graph inputs/outputs by name;
2. nodes by name (unique on both sides, same op type);
3. nodes by their first output tensor name (same op type) — a pass that renames
   nodes but keeps tensor names;
4. by structure, for pipelines that rename everything: a node matches when it
   has the same op type and its non-constant inputs come from matched
   producers in the same slots (forward, in dataflow order), or its outputs
   feed matched consumers in the same slots (backward, in reverse order);
   repeated until nothing new matches. Only unique candidates match.

A matched pair is *changed* when its attributes or inputs differ (input count,
which producer feeds a slot, or constant input values), else *unchanged*
(perhaps renamed). Unmatched nodes are *removed* (only in the first model)
or *added* (only in the second). Pass lineage (``lineage.py``) says which
pass did it. ``diffview`` draws the result (overlay and side-by-side modes).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from onnx import AttributeProto, ModelProto, TensorProto

from studio.graphview.lineage import LineageChange, describe, lineage_index
from studio.graphview.model import OP, GNode, GraphModel
from studio.graphview.order import topo_depth

UNCHANGED, CHANGED, REMOVED, ADDED = "unchanged", "changed", "removed", "added"
MAX_ROUNDS = 8
BRIDGE = 3                      # removed nodes in a row the structural match looks through
INFO = ("renamed", "rewired")  # reasons that do not make a node "changed"


@dataclass(frozen=True)
class NodeDiff:
    status: str
    a: int | None                  # node index in the first graph
    b: int | None                  # node index in the second graph
    reasons: tuple[str, ...] = ()  # what changed ("attributes: epsilon", "renamed" ...)
    lineage: tuple[LineageChange, ...] = ()
    matched_by: str = ""           # io | name | output | structure


@dataclass(frozen=True)
class OpCountRow:
    op_type: str
    before: int
    after: int

    @property
    def delta(self) -> int:
        return self.after - self.before


@dataclass(frozen=True)
class GraphDiff:
    a: GraphModel = field(repr=False)
    b: GraphModel = field(repr=False)
    entries: tuple[NodeDiff, ...] = field(repr=False)
    op_counts: tuple[OpCountRow, ...]
    matched_by: Mapping[str, int]
    passes: tuple[str, ...]            # pass names from the lineage, in order

    def counts(self) -> dict[str, int]:
        c = Counter(e.status for e in self.entries if not self._is_io(e))
        return {s: c.get(s, 0) for s in (UNCHANGED, CHANGED, ADDED, REMOVED)}

    def _is_io(self, e: NodeDiff) -> bool:
        n = self.a.nodes[e.a] if e.a is not None else self.b.nodes[e.b]
        return n.kind != OP

    def by_status(self, status: str) -> list[NodeDiff]:
        return [e for e in self.entries if e.status == status and not self._is_io(e)]

    def status_of_a(self) -> dict[str, str]:
        return {self.a.nodes[e.a].id: e.status for e in self.entries if e.a is not None}

    def status_of_b(self) -> dict[str, str]:
        return {self.b.nodes[e.b].id: e.status for e in self.entries if e.b is not None}

    def removed_by(self, pass_name: str) -> list[str]:
        """Names of removed nodes whose lineage names ``pass_name``."""
        return [self.a.nodes[e.a].name for e in self.by_status(REMOVED)
                if any(c.pass_name == pass_name for c in e.lineage)]

    def name(self, e: NodeDiff) -> str:
        n = self.b.nodes[e.b] if e.b is not None else self.a.nodes[e.a]
        return n.name or n.id

    def note(self, e: NodeDiff) -> str:
        """Reasons and lineage of one entry, as one line."""
        return "; ".join([*e.reasons, *([describe(list(e.lineage))] if e.lineage else [])])


# -- matching -------------------------------------------------------------------

def _const_producers(g: GraphModel) -> set[int]:
    return {n.index for n in g.nodes if n.op_type == "Constant" and n.kind == OP}


class _Side:
    """Per-graph lookups the matcher needs."""

    def __init__(self, g: GraphModel) -> None:
        self.g = g
        self.consts = _const_producers(g)
        # producer of each (node, input slot) and consumers of each node with their slots
        self.in_src: list[list[int | None]] = [[None] * len(n.inputs) for n in g.nodes]
        self.out_dst: list[list[tuple[int, int]]] = [[] for _ in g.nodes]
        for e in g.edges:
            dst = g.nodes[e.dst]
            for slot, t in enumerate(dst.inputs):
                if t == e.tensor:
                    self.in_src[e.dst][slot] = e.src
                    self.out_dst[e.src].append((e.dst, slot))
            if e.tensor not in dst.inputs:           # body output -> owner: a slot of its own
                self.out_dst[e.src].append((e.dst, -1))
        order, _ = topo_depth(len(g.nodes), [(e.src, e.dst) for e in g.edges])
        self.topo = sorted(range(len(g.nodes)), key=order.__getitem__)

    def dyn_inputs(self, k: int) -> list[int | None] | None:
        """Producers of the non-constant inputs; None when an input has no producer we know."""
        out = []
        for slot, t in enumerate(self.g.nodes[k].inputs):
            if not t or t in self.g.constants:
                continue
            p = self.in_src[k][slot]
            if p is None:
                return None
            if p in self.consts:
                continue
            out.append(p)
        return out


def _match(a: GraphModel, b: GraphModel, sa: _Side, sb: _Side) -> tuple[dict[int, int], dict[int, str]]:
    """b index -> a index, and how each b node was matched."""
    m: dict[int, int] = {}
    how: dict[int, str] = {}
    used_a: set[int] = set()

    def pair(bi: int, ai: int, kind: str) -> None:
        m[bi] = ai
        how[bi] = kind
        used_a.add(ai)

    a_io = {n.id: n.index for n in a.nodes if n.kind != OP}
    for n in b.nodes:
        if n.kind != OP and n.id in a_io:
            pair(n.index, a_io[n.id], "io")
    a_names = Counter(n.name for n in a.nodes if n.kind == OP and n.name)
    b_names = Counter(n.name for n in b.nodes if n.kind == OP and n.name)
    a_by_name = {n.name: n.index for n in a.nodes if n.kind == OP and n.name and a_names[n.name] == 1}
    for n in b.nodes:
        if n.kind == OP and n.name and b_names[n.name] == 1:
            ai = a_by_name.get(n.name)
            if ai is not None and a.nodes[ai].op_type == n.op_type:
                pair(n.index, ai, "name")
    a_by_out: dict[str, int] = {}
    dup: set[str] = set()
    for n in a.nodes:
        if n.kind == OP and n.index not in used_a:
            first = next((o for o in n.outputs if o), None)
            if first:
                if first in a_by_out:
                    dup.add(first)
                a_by_out[first] = n.index
    for n in b.nodes:
        if n.kind != OP or n.index in m:
            continue
        first = next((o for o in n.outputs if o), None)
        ai = a_by_out.get(first) if first and first not in dup else None
        if ai is not None and ai not in used_a and a.nodes[ai].op_type == n.op_type:
            pair(n.index, ai, "output")

    # Forward signatures of first-graph nodes are fixed: (op, domain, producers of dynamic inputs).
    fwd_a: dict[tuple, list[int]] = {}
    for n in a.nodes:
        if n.kind == OP:
            dyn = sa.dyn_inputs(n.index)
            if dyn is not None:
                fwd_a.setdefault((n.op_type, n.domain, tuple(dyn)), []).append(n.index)
    back_a: dict[tuple, list[int]] = {}
    for n in a.nodes:
        if n.kind == OP and sa.out_dst[n.index]:
            back_a.setdefault((n.op_type, n.domain, tuple(sorted(sa.out_dst[n.index]))), []).append(n.index)

    def take(cands: Iterable[int] | None) -> int | None:
        free = list(dict.fromkeys(c for c in cands or () if c not in used_a))
        return free[0] if len(free) == 1 else None

    def exact() -> None:
        for bi in sb.topo:
            n = b.nodes[bi]
            if n.kind != OP or bi in m:
                continue
            dyn = sb.dyn_inputs(bi)
            if dyn is None or not dyn or any(p not in m for p in dyn):
                continue
            ai = take(fwd_a.get((n.op_type, n.domain, tuple(m[p] for p in dyn))))
            if ai is not None:
                pair(bi, ai, "structure")
        for bi in reversed(sb.topo):
            n = b.nodes[bi]
            if n.kind != OP or bi in m or not sb.out_dst[bi] or any(d not in m for d, _ in sb.out_dst[bi]):
                continue
            ai = take(back_a.get((n.op_type, n.domain, tuple(sorted((m[d], s) for d, s in sb.out_dst[bi])))))
            if ai is not None:
                pair(bi, ai, "structure")

    def same_op(x: int, n: GNode) -> bool:
        c = a.nodes[x]
        return c.kind == OP and x not in used_a and c.op_type == n.op_type and c.domain == n.domain

    def bridged() -> None:
        """Like ``exact`` but looking through first-graph nodes a pass removed (a BN folded
        into its Conv, a dropped Identity): unmatched nodes with one dynamic input."""
        for bi in sb.topo:
            n = b.nodes[bi]
            if n.kind != OP or bi in m:
                continue
            dyn = sb.dyn_inputs(bi)
            if not dyn or any(p not in m for p in dyn):
                continue
            images = [m[p] for p in dyn]
            cands = [c for c in _down_reach(sa, images[0], used_a) if same_op(c, n)]
            ok = []
            for c in cands:
                dc = sa.dyn_inputs(c)
                if dc is not None and len(dc) == len(images) and all(
                        q in _up_chain(sa, x, used_a) for q, x in zip(images, dc)):
                    ok.append(c)
            ai = take(ok)
            if ai is not None:
                pair(bi, ai, "structure")
        for bi in reversed(sb.topo):
            n = b.nodes[bi]
            outs = [(d, s) for d, s in sb.out_dst[bi] if s >= 0]
            if n.kind != OP or bi in m or not outs or any(d not in m for d, _ in outs):
                continue
            common: set[int] | None = None
            for d, s in outs:
                src = sa.in_src[m[d]][s] if s < len(sa.in_src[m[d]]) else None
                here = {c for c in _up_chain(sa, src, used_a) if same_op(c, n)} if src is not None else set()
                common = here if common is None else common & here
            ai = take(common)
            if ai is not None:
                pair(bi, ai, "structure")

    for _ in range(MAX_ROUNDS):
        before = len(m)
        exact()
        if len(m) == before:
            bridged()
        if len(m) == before:
            break
    return m, how


def _up_chain(side: _Side, x: int | None, matched: set[int], depth: int = BRIDGE) -> list[int]:
    """``x`` and the nodes above it while they are unmatched and have one dynamic input."""
    out: list[int] = []
    while x is not None and len(out) <= depth:
        out.append(x)
        if x in matched or side.g.nodes[x].kind != OP:
            break
        dyn = side.dyn_inputs(x)
        x = dyn[0] if dyn is not None and len(dyn) == 1 else None
    return out


def _down_reach(side: _Side, x: int, matched: set[int], depth: int = BRIDGE) -> list[int]:
    """Consumers of ``x``, and their consumers through unmatched one-input nodes."""
    out: list[int] = []
    frontier = [x]
    for _ in range(depth + 1):
        nxt = []
        for u in frontier:
            for d, _slot in side.out_dst[u]:
                out.append(d)
                if d not in matched and side.g.nodes[d].kind == OP and len(side.dyn_inputs(d) or ()) == 1:
                    nxt.append(d)
        frontier = nxt
    return out


# -- classification -------------------------------------------------------------

def _attr_digest(attr: AttributeProto) -> str:
    if attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        return "graph"            # bodies are compared node by node, not as one blob
    return hashlib.sha1(attr.SerializeToString(deterministic=True)).hexdigest()


def _node_attrs(node) -> dict[str, str]:
    return {} if node is None else {x.name: _attr_digest(x) for x in node.attribute}


def _tensor_digest(t: TensorProto) -> str:
    c = TensorProto()
    c.CopyFrom(t)
    c.name = ""
    c.doc_string = ""
    return hashlib.sha1(c.SerializeToString(deterministic=True)).hexdigest()


def _initializers(model: ModelProto | None) -> dict[str, str]:
    if model is None:
        return {}
    return {t.name: _tensor_digest(t) for t in model.graph.initializer}


def _reasons(a: GraphModel, b: GraphModel, ai: int, bi: int, m_inv: Mapping[int, int], matched_a: set[int],
             sa: _Side, sb: _Side, init_a: Mapping[str, str], init_b: Mapping[str, str]) -> list[str]:
    na, nb = a.nodes[ai], b.nodes[bi]
    out: list[str] = []
    pa, pb = a.protos[ai] if a.protos else None, b.protos[bi] if b.protos else None
    if pa is not None and pb is not None:
        da, db = _node_attrs(pa), _node_attrs(pb)
        diff = sorted(k for k in da.keys() | db.keys() if da.get(k) != db.get(k))
        if diff:
            out.append("attributes: " + ", ".join(diff[:8]))
    if len([t for t in na.inputs if t]) != len([t for t in nb.inputs if t]):
        out.append(f"inputs: {len([t for t in na.inputs if t])} → {len([t for t in nb.inputs if t])}")
    else:
        for slot, (ta, tb) in enumerate(zip(na.inputs, nb.inputs)):
            src_a = sa.in_src[ai][slot]
            src_b = sb.in_src[bi][slot]
            if ta in a.constants and tb in b.constants:
                if init_a and init_b and init_a.get(ta) != init_b.get(tb):
                    out.append(f"input {slot}: constant values differ")
            elif (ta in a.constants) != (tb in b.constants):
                out.append(f"input {slot}: constant on one side only")
            elif src_a in sa.consts and src_b in sb.consts:
                if a.protos and b.protos and _node_attrs(a.protos[src_a]) != _node_attrs(b.protos[src_b]):
                    out.append(f"input {slot}: constant values differ")
            elif (src_a is None) != (src_b is None):
                out.append(f"input {slot}: fed by a different node")
            elif src_b is not None and m_inv.get(src_b) != src_a:
                if m_inv.get(src_b) in _up_chain(sa, src_a, matched_a):
                    out.append("rewired")           # a removed node in between: not a change here
                else:
                    out.append(f"input {slot}: fed by a different node")
    if na.name != nb.name:
        out.append("renamed")
    return list(dict.fromkeys(out))


def diff_graphs(a: GraphModel, b: GraphModel, *, lineage: object = None,
                model_a: ModelProto | None = None, model_b: ModelProto | None = None) -> GraphDiff:
    """Match and classify every node of ``a`` (before) and ``b`` (after).
    ``lineage`` is the pipeline records list; the protos compare constant inputs."""
    sa, sb = _Side(a), _Side(b)
    m, how = _match(a, b, sa, sb)
    init_a, init_b = _initializers(model_a), _initializers(model_b)
    index = lineage_index(lineage)

    def lin(*names: str) -> tuple[LineageChange, ...]:
        seen: list[LineageChange] = []
        for n in names:
            for c in index.get(n, ()):
                if c not in seen:
                    seen.append(c)
        return tuple(seen)

    entries: list[NodeDiff] = []
    matched_a = set(m.values())
    for bn in b.nodes:
        ai = m.get(bn.index)
        if ai is None:
            entries.append(NodeDiff(ADDED, None, bn.index, (), lin(bn.name) if bn.kind == OP else ()))
            continue
        reasons = _reasons(a, b, ai, bn.index, m, matched_a, sa, sb, init_a, init_b) if bn.kind == OP else []
        real = [r for r in reasons if r not in INFO]
        entries.append(NodeDiff(CHANGED if real else UNCHANGED, ai, bn.index, tuple(reasons),
                                lin(a.nodes[ai].name, bn.name) if bn.kind == OP else (), how[bn.index]))
    for an in a.nodes:
        if an.index not in matched_a:
            entries.append(NodeDiff(REMOVED, an.index, None, (), lin(an.name) if an.kind == OP else ()))
    ca = Counter(n.op_type for n in a.nodes if n.kind == OP)
    cb = Counter(n.op_type for n in b.nodes if n.kind == OP)
    rows = tuple(OpCountRow(op, ca.get(op, 0), cb.get(op, 0))
                 for op in sorted(ca.keys() | cb.keys(), key=lambda o: (-(ca.get(o, 0) + cb.get(o, 0)), o)))
    passes = tuple(dict.fromkeys(c.pass_name for cs in index.values() for c in cs))
    return GraphDiff(a, b, tuple(entries), rows, dict(Counter(how.values())), passes)
