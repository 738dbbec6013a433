"""The graph as the views see it: every node of every graph (main graph,
If/Loop/Scan bodies at any depth, local functions) plus the main graph's
inputs and outputs as pseudo-nodes, and dataflow edges labelled by tensor.

Node ids are the ``NodeInfo.id`` values ``summarize`` assigns, so a node
selected here opens the same node on the Nodes page. Edges inside subgraphs
resolve names lexically (own graph first, then enclosing graphs), so a value
captured from an outer graph is an edge into the body; a body's outputs get an
edge to the node that owns the body.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto

from studio.core.model import ModelHandle
from studio.core.protowalk import iter_graphs
from studio.core.protowalk import (
    node_id as summary_node_id,  # one id rule for every page
)
from studio.core.types import TensorInfo, value_info
from studio.inspect.summary import ModelSummary

log = logging.getLogger(__name__)

INPUT, OUTPUT, OP = "input", "output", "op"


# GNode and GEdge are NamedTuples, not frozen dataclasses: a 100k-node model builds
# 100k of each, and a frozen dataclass's __init__ is several times slower.
class GNode(NamedTuple):
    index: int
    id: str                  # NodeInfo.id for ops; "input:<name>" / "output:<name>" for graph I/O
    name: str
    op_type: str
    domain: str
    kind: str                # op | input | output
    graph: int               # index into GraphModel.graphs
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    flops: int | None = None


class GEdge(NamedTuple):
    src: int
    dst: int
    tensor: str


@dataclass(frozen=True, slots=True)
class GraphInfo:
    """One graph of the model: the main graph, a body, a function, a training graph."""

    scope: str               # summarize's scope string ("" for the main graph)
    parent: int | None       # enclosing graph
    owner: int | None        # node (GNode.index) owning this body, if any
    attr: str                # "then_branch", "body", "" ...
    function: str | None     # "domain::name" for a model-local function


@dataclass(frozen=True)
class GraphModel:
    name: str
    nodes: tuple[GNode, ...]
    edges: tuple[GEdge, ...]
    graphs: tuple[GraphInfo, ...]
    tensors: Mapping[str, TensorInfo] = field(repr=False)
    protos: tuple[NodeProto | None, ...] = field(repr=False, compare=False, default=())  # None for graph I/O
    constants: frozenset[str] = field(repr=False, compare=False, default=frozenset())   # initializer names
    weights: Mapping[str, tuple[int, ...]] = field(repr=False, compare=False, default_factory=dict)  # initializer dims
    # The value of each small constant input (an initializer of a few elements: TopK's K, a Reshape's
    # shape, Clip's bounds) as short text: the box shows "K = 300", not only a shape.
    values: Mapping[str, str] = field(repr=False, compare=False, default_factory=dict)

    @cached_property
    def succ(self) -> list[list[int]]:
        """Edge indices out of each node (built on first use; treat as read-only)."""
        return self._edges_at(0)

    @cached_property
    def pred(self) -> list[list[int]]:
        """Edge indices into each node (built on first use; treat as read-only)."""
        return self._edges_at(1)

    def _edges_at(self, end: int) -> list[list[int]]:
        """Per node, the indices of the edges whose ``end`` (0: src, 1: dst) it is."""
        out: list[list[int]] = [[] for _ in self.nodes]
        for i, e in enumerate(self.edges):
            out[e[end]].append(i)
        return out

    def id_map(self) -> dict[str, int]:
        return {n.id: n.index for n in self.nodes}


def _bodies(node: NodeProto) -> list[tuple[str, GraphProto]]:
    out = []
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH or a.HasField("g"):
            out.append((a.name, a.g))
        for i, g in enumerate(a.graphs):
            out.append((f"{a.name}[{i}]", g))
    return out


def build_graph(handle: ModelHandle, summary: ModelSummary | None = None) -> GraphModel:
    """The view graph of a loaded model. ``summary`` adds shapes and FLOPs; without it
    (the fast path for huge models) shapes come from the model's declared value_info."""
    return graph_from_proto(handle.proto, handle.name, summary)


def graph_from_proto(model: ModelProto, name: str = "model", summary: ModelSummary | None = None) -> GraphModel:
    if summary is not None:
        tensors: dict[str, TensorInfo] = {t.name: t for t in summary.edges}
    else:
        tensors = {}
        g = model.graph
        for vi in (*g.input, *g.output, *g.value_info):
            tensors.setdefault(vi.name, value_info(vi))
    nodes: list[GNode] = []
    protos: list[NodeProto | None] = []
    constants: set[str] = set()
    weights: dict[str, tuple[int, ...]] = {}
    values: dict[str, str] = {}
    edges: list[GEdge] = []
    graphs: list[GraphInfo] = []
    producers: list[dict[str, int]] = []   # per graph: tensor -> producing node
    formal: list[set[str]] = []            # per graph: its inputs and initializers (they shadow outer names)
    pending: dict[str, list[tuple[int, int, str]]] = {}   # child scope -> [(owner node, parent graph, attr)]
    seen: set[str] = set()
    flops = ({n.id: n.flops for n in summary.nodes} if summary is not None else {})

    def resolve(gi: int, tensor: str) -> int | None:
        while gi is not None:
            p = producers[gi].get(tensor)
            if p is not None:
                return p
            if tensor in formal[gi]:
                return None
            gi = graphs[gi].parent
        return None

    for ref in iter_graphs(model):
        gi = len(graphs)
        queue = pending.get(ref.scope)
        owner, parent, attr = queue.pop(0) if queue else (None, 0 if gi else None, "")
        if ref.function is not None or ref.scope.startswith("<training"):
            owner, parent = None, None
        graphs.append(GraphInfo(ref.scope, parent, owner, attr, ref.function))
        g = ref.graph
        init = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
        for t in g.initializer:
            weights.setdefault(t.name, tuple(t.dims))
            text = small_value(t)
            if text is not None:
                values.setdefault(t.name, text)
        for t in g.sparse_initializer:
            weights.setdefault(t.values.name, tuple(t.dims))
        constants.update(init)
        here = init | {vi.name for vi in g.input}
        formal.append(here)
        prod: dict[str, int] = {}
        producers.append(prod)
        if gi == 0:
            for vi in g.input:
                if vi.name in init:
                    continue
                k = len(nodes)
                nodes.append(GNode(k, f"input:{vi.name}", vi.name, "Input", "", INPUT, gi, (), (vi.name,)))
                protos.append(None)
                prod[vi.name] = k
        base = len(nodes)
        scope = ref.scope
        for i, n in enumerate(g.node):
            k = base + i
            nname, op = n.name, n.op_type
            nid = summary_node_id(scope, nname, op, i, seen)
            dom = n.domain
            outs = tuple(n.output)
            nodes.append(GNode(k, nid, nname, op, "" if dom == "ai.onnx" else dom, OP, gi, tuple(n.input), outs,
                               flops.get(nid)))
            protos.append(n)
            for o in outs:
                if o:
                    prod[o] = k
            if n.attribute:
                for label_attr, _ in _bodies(n):
                    child = f"{scope}/{nname or f'{op}_{i}'}/{label_attr}"
                    pending.setdefault(child, []).append((k, gi, label_attr))
        outer = graphs[gi].parent
        for k in range(base, len(nodes)):
            ins = nodes[k].inputs
            done: set[str] | None = set() if len(ins) > 1 else None
            for t in ins:
                if not t:
                    continue
                p = prod.get(t)
                if p is None and outer is not None and t not in here:
                    p = resolve(outer, t)         # a value captured from an enclosing graph
                if p is None or p == k:
                    continue
                if done is not None:
                    if t in done:
                        continue
                    done.add(t)
                edges.append(GEdge(p, k, t))
        info = graphs[gi]
        if info.owner is not None:     # body outputs flow to the node that owns the body
            for vi in g.output:
                p = prod.get(vi.name)
                if p is not None:
                    edges.append(GEdge(p, info.owner, vi.name))
        if gi == 0:
            for vi in g.output:
                k = len(nodes)
                nodes.append(GNode(k, f"output:{vi.name}", vi.name, "Output", "", OUTPUT, gi, (vi.name,), ()))
                protos.append(None)
                p = prod.get(vi.name)
                if p is not None:
                    edges.append(GEdge(p, k, vi.name))
    log.debug("graph %s: %d nodes, %d edges, %d graphs", name, len(nodes), len(edges), len(graphs))
    return GraphModel(name, tuple(nodes), tuple(edges), tuple(graphs), tensors, tuple(protos), frozenset(constants),
                      weights, values)


SMALL_VALUE_ELEMENTS = 8         # constants up to this many elements are shown by value


def small_value(t: TensorProto) -> str | None:
    """A small constant's value as short text ("300", "1,-1,64", "0.5"), or None: large, external
    (the weights are never read here) or of a type that has no short form."""
    count = 1
    for d in t.dims:
        count *= d
    if count > SMALL_VALUE_ELEMENTS or t.data_location == TensorProto.EXTERNAL or t.data_type in (
            TensorProto.STRING, TensorProto.UNDEFINED):
        return None
    try:
        from onnx import numpy_helper

        arr = numpy_helper.to_array(t).reshape(-1)
    except Exception:  # noqa: BLE001 - an odd encoding: the box shows the shape instead
        return None
    if arr.size == 0:
        return "[]"
    text = ",".join(f"{v:g}" if arr.dtype.kind == "f" else str(v.item() if hasattr(v, "item") else v) for v in arr)
    return text if len(text) <= 40 else None
