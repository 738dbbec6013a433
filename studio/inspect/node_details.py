"""Details of one node: attributes, inputs/outputs with shapes, which inputs are
weights. Node ids are the ones ``summarize`` assigns (``NodeInfo.id``)."""

from __future__ import annotations

from dataclasses import dataclass

from onnx import AttributeProto, NodeProto, helper

from studio.core.model import ModelHandle
from studio.core.protowalk import iter_nodes
from studio.core.types import shape_text
from studio.inspect.summary import ModelSummary, NodeInfo

MAX_VALUE_CHARS = 300


@dataclass(frozen=True)
class AttributeInfo:
    name: str
    type: str
    value: str      # display text, truncated


@dataclass(frozen=True)
class PortInfo:
    name: str
    dtype: str
    shape: str
    is_weight: bool


@dataclass(frozen=True)
class NodeDetails:
    info: NodeInfo
    attributes: tuple[AttributeInfo, ...]
    inputs: tuple[PortInfo, ...]
    outputs: tuple[PortInfo, ...]
    doc_string: str


def _attr_text(a: AttributeProto) -> str:
    if a.type == AttributeProto.GRAPH:
        return f"<subgraph: {len(a.g.node)} nodes>"
    if a.type == AttributeProto.GRAPHS:
        return f"<{len(a.graphs)} subgraphs>"
    if a.type == AttributeProto.TENSOR:
        return f"<tensor {helper.tensor_dtype_to_string(a.t.data_type)} {list(a.t.dims)}>"
    if a.type == AttributeProto.TENSORS:
        return f"<{len(a.tensors)} tensors>"
    if a.type == AttributeProto.SPARSE_TENSOR:
        return f"<sparse tensor {list(a.sparse_tensor.dims)}>"
    try:
        value = helper.get_attribute_value(a)
    except Exception:
        return "<unreadable>"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif isinstance(value, list) and value and isinstance(value[0], bytes):
        value = [v.decode("utf-8", "replace") for v in value]
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def find_node_proto(handle: ModelHandle, summary: ModelSummary, node_id: str) -> NodeProto | None:
    """The NodeProto behind a summary node id (same walk order as ``summarize``)."""
    index = next((i for i, n in enumerate(summary.nodes) if n.id == node_id), None)
    if index is None:
        return None
    for i, ref in enumerate(iter_nodes(handle.proto)):
        if i == index:
            return ref.node
    return None


def node_details(handle: ModelHandle, summary: ModelSummary, node_id: str) -> NodeDetails | None:
    info = summary.node(node_id)
    node = find_node_proto(handle, summary, node_id)
    if info is None or node is None:
        return None
    edges = {t.name: t for t in summary.edges}
    weights = {t.name for t in handle.proto.graph.initializer}
    weights.update(o for n in handle.proto.graph.node if n.op_type == "Constant" for o in n.output)

    def port(name: str) -> PortInfo:
        t = edges.get(name)
        return PortInfo(name, t.dtype if t else "?", shape_text(t.shape) if t else "?", name in weights)

    return NodeDetails(
        info=info,
        attributes=tuple(AttributeInfo(a.name, AttributeProto.AttributeType.Name(a.type).lower(), _attr_text(a))
                         for a in node.attribute),
        inputs=tuple(port(n) for n in node.input if n),
        outputs=tuple(port(n) for n in node.output if n),
        doc_string=node.doc_string[:MAX_VALUE_CHARS],
    )
