"""reorder-for-memory: node order as written  ⇒  a file order whose ORT execution has a lower peak.

ORT runs a graph in a reverse DFS from its leaf nodes over node indices
(:func:`studio.inspect.memory_plan.ort_order`), so the order nodes are written
in decides which parallel branch runs first and which tensors stay alive
meanwhile. The pass searches a memory-aware order (exact for small graphs,
greedy otherwise) and writes the main graph's nodes so that ORT's DFS runs
it; it changes nothing unless the predicted peak (or arena) of ORT's order
drops. Only the top-level node order changes: the computation is the same,
which verification checks like every pass. Option ``sizes`` (value name -> bytes)
sizes the values whose shapes are not static (``api.memory_reorder`` passes the
memory plan's, at the dims the user chose).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, result
from passes.base import register
from studio.core.fmt import human_bytes
from studio.core.protowalk import ir_node_reads
from studio.inspect.memory_plan import OpNode, Schedule, reorder_for_memory


def _nbytes(value: ir.Value | None) -> int | None:
    if value is None or value.shape is None or value.dtype is None:
        return None
    dims = [d for d in value.shape]
    if not all(isinstance(d, int) for d in dims):
        return None
    try:
        item = value.dtype.itemsize
    except Exception:  # noqa: BLE001 - sub-byte or unknown types
        return None
    return int(math.prod(dims) * item)


def _weight_only(node: ir.Node, constants: set[str]) -> bool:
    """Computed from weights alone (ConstantOfShape of a constant shape...): ORT folds it; not scheduled."""
    return (bool(node.outputs) and not node.op_type.startswith("Random") and node.op_type != "Multinomial"
            and not any(isinstance(a, (ir.Graph,)) or getattr(a, "type", None) in (ir.AttributeType.GRAPH,
                                                                                   ir.AttributeType.GRAPHS)
                        for a in node.attributes.values())
            and all(v is None or (v.name in constants) for v in node.inputs))


def schedule_of(graph: ir.Graph, known: Mapping[str, int] | None = None) -> tuple[Schedule, list[ir.Node]]:
    """The graph's schedule (Constant nodes left out, as ORT folds them into initializers); ``known``:
    bytes of values whose shape is not static (the memory plan's, at the dims the user chose)."""
    known = known or {}
    init = set(graph.initializers)
    nodes: list[ir.Node] = []
    ops: list[OpNode] = []
    sizes: dict[str, int] = {}
    constants = set(init)
    for node in graph:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            constants.update(v.name for v in node.outputs)
            continue
        if _weight_only(node, constants):      # weights, as the memory plan counts them
            constants.update(v.name for v in node.outputs if v.name)
            continue
        ins = tuple(x for x in ir_node_reads(node) if x not in constants)   # bodies' reads too: wait on them
        outs = tuple(v.name or "" for v in node.outputs)
        for v in node.outputs:
            b = _nbytes(v)
            b = known.get(v.name or "") if b is None else b
            if v.name and b is not None:
                sizes[v.name] = int(b)
        ops.append(OpNode(len(nodes), node.name or f"{node.op_type}_{len(nodes)}", node.op_type, ins, outs))
        nodes.append(node)
    inputs = tuple(v.name for v in graph.inputs if v.name not in constants)
    for v in graph.inputs:
        b = _nbytes(v)
        b = known.get(v.name or "") if b is None else b
        if b is not None:
            sizes[v.name] = int(b)
    outputs = tuple(v.name for v in graph.outputs if v.name)
    return Schedule(tuple(ops), sizes, inputs, outputs), nodes


@register
class ReorderForMemory(StudioPass):
    """Node order  ⇒  a memory-aware order ORT will execute (lower predicted peak)."""

    name = "reorder-for-memory"
    summary = "Write the nodes in an order that lowers ORT's peak activation memory (same computation)."

    def call(self, model: ir.Model) -> PassResult:
        graph = model.graph
        schedule, nodes = schedule_of(graph, self.options.get("sizes"))
        if len(nodes) < 3:
            return result(model, [], notes=["fewer than three nodes: nothing to reorder"])
        if schedule.unknown:
            return result(model, [], notes=[f"{len(schedule.unknown)} tensors have no static size "
                                             "(give their sizes with the sizes option, as "
                                             "api.memory_reorder does, or run fix-input-shapes first): "
                                             "order left as written"])
        r = reorder_for_memory(schedule)
        if not r.improves:
            return result(model, [], notes=[f"ORT's order already peaks at {human_bytes(r.before.peak_bytes)}; "
                                             "no order found that lowers it"])
        constants = [n for n in graph if n not in set(nodes)]
        everything = list(graph)
        graph.remove(everything, safe=False)
        graph.extend(constants + [nodes[k] for k in r.file_order])
        detail = (f"predicted peak {human_bytes(r.before.peak_bytes)} → {human_bytes(r.after.peak_bytes)}, arena "
                  f"{human_bytes(r.before.arena_bytes)} → {human_bytes(r.after.arena_bytes)}")
        res = result(model, [Change("changed", tuple(r.after.order), detail)], reordered=len(nodes))
        return PassResult(res.model, res.modified, res.changes, res.counts, res.notes, res.warnings,
                          {"memory": r.to_dict()})
