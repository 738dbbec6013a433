"""Walk every graph, node and tensor of a ModelProto: main graph, If/Loop/Scan
bodies (at any depth), model-local functions and training graphs.

Many checks (external-data safety, node counts, op histograms) are wrong if
they look at ``model.graph.node`` alone, so they all go through here. So does
the one rule for what a subgraph body reads from the scope around it (the
topological sort, the cycle check, the memory plan; reorder-for-memory through
an onnx-ir reader of the same rule).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto

if TYPE_CHECKING:            # onnx-ir is imported by passes, not on every import of this module
    import onnx_ir as ir

T = TypeVar("T")

# Guard against pathological nesting (a hand-made model can nest thousands deep).
MAX_DEPTH = 64


@dataclass(frozen=True)
class GraphRef:
    graph: GraphProto
    scope: str           # "" for the main graph, "/If_0/then_branch" for a body...
    depth: int
    function: str | None = None   # "domain::name" for a model-local function body


@dataclass(frozen=True)
class NodeRef:
    node: NodeProto
    scope: str
    depth: int
    function: str | None = None


def _subgraphs(node: NodeProto) -> Iterator[tuple[str, GraphProto]]:
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH or attr.HasField("g"):
            yield attr.name, attr.g
        for i, g in enumerate(attr.graphs):
            yield f"{attr.name}[{i}]", g


def subgraphs_of(node: NodeProto) -> Iterator[tuple[str, GraphProto]]:
    """(attribute label, body) of a node's subgraphs, labelled as the scopes of ``iter_graphs``."""
    return _subgraphs(node)


def _node_label(node: NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def iter_graphs(model: ModelProto) -> Iterator[GraphRef]:
    """Every graph in the model, main graph first, depth-first."""
    yield from walk_graph(model.graph)
    for fn in model.functions:
        label = f"{fn.domain}::{fn.name}"
        # A function body is a node list; wrap it so callers see one shape.
        body = GraphProto(node=fn.node, name=label)
        yield from _walk_graph(body, f"<function {label}>", 1, label)
    for i, info in enumerate(model.training_info):
        for part in ("initialization", "algorithm"):
            if info.HasField(part):
                yield from _walk_graph(getattr(info, part), f"<training[{i}].{part}>", 1, None)


def walk_graph(graph: GraphProto) -> Iterator[GraphRef]:
    """``graph`` and every If/Loop/Scan body nested in it, depth-first (``graph`` first, then each node's bodies
    in node order): :func:`iter_graphs` without the model's functions and training graphs."""
    return _walk_graph(graph, "", 0, None)


def _walk_graph(graph: GraphProto, scope: str, depth: int, function: str | None) -> Iterator[GraphRef]:
    if depth > MAX_DEPTH:
        raise onnx.checker.ValidationError(f"subgraphs nested deeper than {MAX_DEPTH} levels")
    yield GraphRef(graph, scope, depth, function)
    for i, node in enumerate(graph.node):
        if not node.attribute:      # most nodes have none: no generator to start (every walk visits every node)
            continue
        for attr_name, sub in _subgraphs(node):
            yield from _walk_graph(sub, f"{scope}/{_node_label(node, i)}/{attr_name}", depth + 1, function)


def iter_nodes(model: ModelProto) -> Iterator[NodeRef]:
    """Every node of every graph (subgraph bodies and functions included)."""
    for ref in iter_graphs(model):
        for node in ref.graph.node:
            yield NodeRef(node, ref.scope, ref.depth, ref.function)


def _attr_tensors(attr: AttributeProto, where: str) -> Iterator[tuple[TensorProto, str]]:
    if attr.HasField("t"):
        yield attr.t, f"{where} attribute '{attr.name}'"
    for j, t in enumerate(attr.tensors):
        yield t, f"{where} attribute '{attr.name}'[{j}]"
    if attr.HasField("sparse_tensor"):
        yield attr.sparse_tensor.values, f"{where} attribute '{attr.name}' (sparse values)"
        yield attr.sparse_tensor.indices, f"{where} attribute '{attr.name}' (sparse indices)"
    for j, st in enumerate(attr.sparse_tensors):
        yield st.values, f"{where} attribute '{attr.name}'[{j}] (sparse values)"
        yield st.indices, f"{where} attribute '{attr.name}'[{j}] (sparse indices)"


def iter_tensors(model: ModelProto) -> Iterator[tuple[TensorProto, str]]:
    """Every TensorProto that can hold data, with a human label of where it sits.

    Initializers, sparse initializers, tensor-valued attributes of any node
    (Constant and others) in every graph and function.
    """
    for ref in iter_graphs(model):
        g = ref.graph
        prefix = ref.scope or "main graph"
        for t in g.initializer:
            yield t, f"initializer '{t.name}' in {prefix}"
        for st in g.sparse_initializer:
            yield st.values, f"sparse initializer '{st.values.name}' in {prefix}"
            yield st.indices, f"sparse initializer '{st.values.name}' indices in {prefix}"
        for i, node in enumerate(g.node):
            attrs = node.attribute
            if not attrs:       # most nodes have none: no label to write (10k of them on a 10k-node model)
                continue
            where = f"node '{_node_label(node, i)}' ({node.op_type}) in {prefix}"
            for attr in attrs:
                yield from _attr_tensors(attr, where)
    for fn in model.functions:
        # Function attribute defaults can carry tensors too.
        for attr in fn.attribute_proto:
            yield from _attr_tensors(attr, f"function {fn.domain}::{fn.name} default")


def node_id(scope: str, name: str, op_type: str, index: int, seen: set[str] | None = None) -> str:
    """The node id used across the studio (summary, findings, graph, overlays): ``scope/name``,
    ``op_type_index`` for an unnamed node, ``#k`` appended to repeats when ``seen`` is given."""
    local = name or f"{op_type}_{index}"
    base = f"{scope}/{local}" if scope else local
    return base if seen is None else unique_name(seen, base, "#")


def unique_name(taken: set[str], base: str, sep: str = "_") -> str:
    """``base``, else ``base<sep>2``, ``base<sep>3``...: the first not in ``taken``, which it is added to."""
    if base not in taken:       # the usual case (every node id of a model is named so): no generator to start
        taken.add(base)
        return base
    return next(unique_names(taken, base, sep))


def unique_names(taken: set[str], base: str, sep: str = "_", start: int | None = None) -> Iterator[str]:
    """Names not in ``taken``, each added to it as it is handed out: ``base``, ``base<sep>2``, ``base<sep>3``...
    (as :func:`unique_name` called again and again), or with ``start`` ``base<sep><start>``,
    ``base<sep><start + 1>``... (``base`` itself not tried). The count goes on from the last name handed out,
    so naming n values costs n steps plus the names skipped, not n squared."""
    k = start
    while True:
        name = base if k is None else f"{base}{sep}{k}"
        if name not in taken:
            taken.add(name)
            yield name
        k = 2 if k is None else k + 1


def reachable(start: Iterable[T], step: Callable[[T], Iterable[T]], limit: int | None = None) -> list[T]:
    """Everything reachable from ``start`` through ``step``, each item once (by identity), depth first (the
    last found first). With ``limit``: once that many are collected, no item is stepped from any more (those
    already found are still collected)."""
    out: list[T] = []
    todo, seen = list(start), set()
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        out.append(item)
        if limit is None or len(out) < limit:
            todo.extend(step(item))
    return out


def cycle_text(cyclic: Sequence[str]) -> str:
    """"the graph has a cycle: 2 node(s) in it or waiting on it ('Add_0', 'Relu_1')": the one wording check,
    memory and inspect use for :func:`cycle_nodes` (whose list holds the nodes behind a cycle too)."""
    return (f"the graph has a cycle: {len(cyclic)} node(s) in it or waiting on it "
            f"({', '.join(repr(c[:60]) for c in cyclic[:4])})")


B = TypeVar("B")
# A body as the read rule sees it, whatever holds it (a GraphProto, an onnx-ir Graph): its own names (inputs,
# weights), its output names, and per node its input names ("" for a missing one), output names and bodies.
BodyParts = tuple[Iterable[str], Iterable[str], Sequence[tuple[Sequence[str], Sequence[str], Sequence[B]]]]


def reads_from_outside(body: B, parts: Callable[[B], BodyParts[B]], depth: int = 1) -> tuple[str, ...]:
    """The one rule for what a body reads from the scope around it, for any graph type (``parts`` reads
    one): its nodes' inputs, its nested bodies' outer reads and its outputs, less the body's own names
    (inputs, weights, node outputs, even when they repeat an outer name: an Optimum merged decoder's If
    branches name their values as the If's outputs). In first-read order (node by node, each node's
    inputs then its bodies' reads, the body's outputs last), each name once."""
    if depth > MAX_DEPTH:
        raise onnx.checker.ValidationError(f"subgraphs nested deeper than {MAX_DEPTH} levels")
    own, outputs, nodes = parts(body)
    made = set(own) | {o for _, outs, _ in nodes for o in outs if o}
    used: dict[str, None] = {}
    for ins, _, subs in nodes:
        used.update(dict.fromkeys(x for x in ins if x))
        for sub in subs:
            used.update(dict.fromkeys(reads_from_outside(sub, parts, depth + 1)))
    used.update(dict.fromkeys(x for x in outputs if x))
    return tuple(x for x in used if x not in made)


def _proto_parts(graph: GraphProto) -> BodyParts[GraphProto]:
    own = [*(v.name for v in graph.input), *(t.name for t in graph.initializer),
           *(t.values.name for t in graph.sparse_initializer)]
    return own, [v.name for v in graph.output], [(n.input, n.output, [b for _, b in _subgraphs(n)])
                                                 for n in graph.node]


def outer_reads(graph: GraphProto, depth: int = 1) -> tuple[str, ...]:
    """Names a body reads from the scope around it, its own nested bodies' reads included: what the node
    holding it waits on besides its inputs (:func:`reads_from_outside`)."""
    return reads_from_outside(graph, _proto_parts, depth)


def node_reads(node: NodeProto) -> tuple[str, ...]:
    """Every name ``node`` waits on, once each: its inputs (as written, missing ones left out), then what
    its subgraph bodies read from outside (ORT's implicit inputs)."""
    if not node.attribute:      # no bodies (most nodes): its inputs alone, without the generators
        return tuple(dict.fromkeys(filter(None, node.input)))
    return _reads(node.input, [b for _, b in _subgraphs(node)], _proto_parts)


def _reads(inputs: Iterable[str], bodies: Iterable[B], parts: Callable[[B], BodyParts[B]]) -> tuple[str, ...]:
    names = dict.fromkeys(x for x in inputs if x)
    for sub in bodies:
        names.update(dict.fromkeys(reads_from_outside(sub, parts)))
    return tuple(names)


def _ir_bodies(node: ir.Node) -> list[ir.Graph]:
    out: list[ir.Graph] = []
    for attr in node.attributes.values():
        if attr.type == AttributeProto.GRAPH:       # ir.AttributeType is an IntEnum of AttributeProto's values
            out.append(attr.value)
        elif attr.type == AttributeProto.GRAPHS:
            out.extend(attr.value)
    return out


def _ir_name(value: ir.Value | None) -> str:
    return (value.name or "") if value is not None else ""


def _ir_parts(graph: ir.Graph) -> BodyParts[ir.Graph]:
    own = [*(v.name or "" for v in graph.inputs), *graph.initializers]
    return own, [v.name or "" for v in graph.outputs], [
        ([_ir_name(v) for v in n.inputs], [v.name or "" for v in n.outputs],
         _ir_bodies(n)) for n in graph]


def ir_node_reads(node: ir.Node) -> tuple[str, ...]:
    """:func:`node_reads` for an onnx-ir node (passes hold the model as onnx-ir), by the same rule."""
    return _reads(map(_ir_name, node.inputs), _ir_bodies(node), _ir_parts)


@dataclass(frozen=True)
class TopoOrder:
    """A run order of one graph's nodes, as indices into ``graph.node``.

    ``order`` lists the nodes that can run; ``stuck`` (file order) the ones that never can: each is in a
    cycle or waits on one. ``stuck`` is empty exactly when ``order`` covers every node.
    """

    order: tuple[int, ...]
    stuck: tuple[int, ...]

    @property
    def in_file_order(self) -> bool:
        """Whether the file's own order is already this run order (nothing to move)."""
        return not self.stuck and self.order == tuple(range(len(self.order)))


def topo_order(graph: GraphProto) -> TopoOrder:
    """Kahn's topological sort of ``graph``'s nodes (not of its bodies'), the one both the cycle check and
    the sorting pass use. A node waits on the first producer of each name in :func:`node_reads`; names no
    node here produces (graph inputs, weights, the outer scope) are not waited on. Two rules:

    - a node that reads its own output is a cycle (ONNX Runtime refuses it: 'the graph is not acyclic');
    - ties keep file order: of the nodes ready, the earliest in the file runs first (as ONNX Runtime
      sorts), so a graph already in order comes back unchanged and a sort never moves a node needlessly.
    """
    producer: dict[str, int] = {}
    for i, n in enumerate(graph.node):
        for o in n.output:
            if o:
                producer.setdefault(o, i)
    reads = [node_reads(n) for n in graph.node]
    get = producer.get
    if all(get(x, -1) < i for i, names in enumerate(reads) for x in names):
        # Every node waits only on nodes before it (an exporter's file): the sort below would give the file
        # order, nothing stuck; known without its sets and heap (the cycle check of every inspect).
        return TopoOrder(tuple(range(len(reads))), ())
    waits = [{producer[x] for x in names if x in producer} for names in reads]
    users: list[list[int]] = [[] for _ in graph.node]
    for i, ps in enumerate(waits):
        for p in ps:
            users[p].append(i)
    left = [len(ps) for ps in waits]
    ready = [i for i, k in enumerate(left) if k == 0]      # ascending: already a heap
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            left[u] -= 1
            if left[u] == 0:
                heapq.heappush(ready, u)
    return TopoOrder(tuple(order), tuple(i for i, k in enumerate(left) if k > 0))


def cycle_nodes(graph: GraphProto) -> list[str]:
    """Labels of the nodes that can never run because each waits, directly or not, on its own output (a
    cycle in the graph's data flow, subgraph reads and a node reading its own output included), and of the
    nodes that wait on those; empty for a well-formed graph (:func:`topo_order`'s ``stuck``). ONNX Runtime
    refuses such a graph at load ('the graph is not acyclic'); a plan over it would silently leave those
    nodes out."""
    return [_node_label(graph.node[i], i) for i in topo_order(graph).stuck]
