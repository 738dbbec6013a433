"""How many nodes a model becomes once its local functions are inlined, without inlining (R46).

A few-KB model whose functions call each other ten times per level becomes
millions of nodes in every engine (ORT and OpenVINO inline functions while
loading; onnx shape inference walks every call). Counting is cheap: one
memoized pass over the function table, so the count of a 10^12-node bomb
takes microseconds. ``check_expansion`` refuses above a limit with a message
that says what is too large, before any engine or inference sees the model.
"""

from __future__ import annotations

import os
from pathlib import Path

from onnx import AttributeProto, GraphProto, ModelProto

from studio.core.errors import ModelLoadError

# Default limit on nodes after inlining local functions (ONNX_STUDIO_MAX_INLINED_NODES overrides).
# 10^6 inlined nodes already take ORT more than 30 s to load here; real models with functions
# (exported with torch.onnx dynamo, onnxscript) inline to a few times their node count.
DEFAULT_MAX_INLINED_NODES = 500_000


def max_inlined_nodes() -> int:
    raw = os.environ.get("ONNX_STUDIO_MAX_INLINED_NODES", "")
    try:
        value = int(raw)
    except ValueError:
        return DEFAULT_MAX_INLINED_NODES
    return value if value > 0 else DEFAULT_MAX_INLINED_NODES


def inlined_node_count(model: ModelProto, cap: int | None = None) -> int:
    """Nodes of the main graph (subgraphs included) once every call to a model-local function
    is replaced by the function's body, recursively. A recursive call counts as one node (the
    full check refuses it with its own words). Counting stops early above ``cap``."""
    big = cap if cap is not None else 2**62
    functions = {(f.domain, f.name, getattr(f, "overload", "")): f for f in model.functions}
    by_name = {(f.domain, f.name): f for f in model.functions}
    memo: dict[tuple, int] = {}
    active: set[tuple] = set()

    def nodes_of(nodes) -> int:
        total = 0
        for node in nodes:
            key = (node.domain, node.op_type, getattr(node, "overload", ""))
            fn = functions.get(key) or by_name.get((node.domain, node.op_type))
            if fn is not None:
                total += function_count(fn)
            else:
                total += 1
                for attr in node.attribute:
                    if attr.type == AttributeProto.GRAPH:
                        total += graph_count(attr.g)
                    elif attr.type == AttributeProto.GRAPHS:
                        total += sum(graph_count(g) for g in attr.graphs)
            if total >= big:
                return big
        return total

    def graph_count(graph: GraphProto) -> int:
        return nodes_of(graph.node)

    def function_count(fn) -> int:
        key = (fn.domain, fn.name, getattr(fn, "overload", ""))
        if key in memo:
            return memo[key]
        if key in active:
            return 1                         # recursion: never inlined; the full check names it
        active.add(key)
        memo[key] = min(big, nodes_of(fn.node))
        active.discard(key)
        return memo[key]

    return min(big, graph_count(model.graph))


def check_expansion(model: ModelProto, limit: int | None = None) -> None:
    """Refuse a model whose local functions inline to more than ``limit`` nodes."""
    if not model.functions:
        return
    limit = limit or max_inlined_nodes()
    count = inlined_node_count(model, cap=limit * 1000)
    if count > limit:
        shown = f"{count:,}" if count < limit * 1000 else f"more than {limit * 1000:,}"
        raise ModelLoadError(f"inlining local functions would create {shown} nodes (limit {limit:,}; "
                             f"{len(model.functions)} functions, {len(model.graph.node)} nodes in the graph); "
                             "set ONNX_STUDIO_MAX_INLINED_NODES to allow more")


def model_size_note(path: Path, limit_bytes: int = 2**31 - 1) -> str:
    """" on a model of 20,000 nodes" (functions inlined when they add nodes) for messages about a
    stage that timed out or died; "" when the file cannot be read."""
    try:
        if not path.is_file() or path.stat().st_size > limit_bytes:
            return ""
        model = ModelProto()
        model.ParseFromString(path.read_bytes())
    except Exception:
        return ""
    plain = len(model.graph.node)
    inlined = inlined_node_count(model, cap=10**12) if model.functions else plain
    nodes = f"{plain:,} node{'' if plain == 1 else 's'}"
    if inlined > plain:
        return f" on a model of {nodes} ({inlined:,} once its local functions are inlined)"
    return f" on a model of {nodes}"
