"""The graph and its hierarchy, built once per model and reused by every view
(the UI caches one per session and model; the CLI builds one per run)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.graphview.escape import display
from studio.graphview.hierarchy import Hierarchy, build_hierarchy
from studio.graphview.model import build_graph, GNode, GraphModel, OP
from studio.inspect.summary import ModelSummary


@dataclass(frozen=True)
class GraphIndex:
    graph: GraphModel = field(repr=False)
    hierarchy: Hierarchy = field(repr=False)
    ids: Mapping[str, int] = field(repr=False)
    names: Mapping[str, int] = field(repr=False)     # names that are unique in the model

    @property
    def nodes(self) -> int:
        return len(self.graph.nodes)

    def find(self, node: str) -> int:
        """Index of a node given by id or (unique) name; a one-line error otherwise."""
        k = self.ids.get(node)
        if k is None:
            k = self.names.get(node)
        if k is None:
            raise StudioError(f"no node with id or name '{display(node, 80)}' in this model", code=ErrorCode.NO_NODE)
        return k


def index_graph(graph: GraphModel, hierarchy: Hierarchy | None = None) -> GraphIndex:
    """``hierarchy``: one already built on a graph of the same nodes and edges (``with_summary``'s input)."""
    counts: dict[str, int] = {}
    for n in graph.nodes:
        if n.name:
            counts[n.name] = counts.get(n.name, 0) + 1
    names = {n.name: n.index for n in graph.nodes if n.name and counts[n.name] == 1}
    return GraphIndex(graph, hierarchy or build_hierarchy(graph), graph.id_map(), names)


def index_model(handle: ModelHandle, summary: ModelSummary | None = None) -> GraphIndex:
    return index_graph(build_graph(handle, summary))


def with_summary(plain: GraphModel, summary: ModelSummary) -> GraphModel:
    """``plain`` (built without a summary) with the summary's edge shapes and FLOPs: the graph
    ``build_graph(handle, summary)`` gives, without walking the model again. Nodes, edges and ids do not
    depend on the summary, so a hierarchy of ``plain`` is the hierarchy of the result."""
    flops = {n.id: n.flops for n in summary.nodes}
    # n._replace(flops=...) spelled out (flops is GNode's last field): _replace's Python loop was most of this
    nodes = tuple(GNode(*n[:-1], flops.get(n.id)) if n.kind == OP else n for n in plain.nodes)
    out = replace(plain, nodes=nodes, tensors={t.name: t for t in summary.edges})
    for cached in ("succ", "pred"):      # same edges: the adjacency the hierarchy already built
        if cached in plain.__dict__:
            out.__dict__[cached] = plain.__dict__[cached]
    return out
