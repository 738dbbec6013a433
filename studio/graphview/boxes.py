"""What a node box says, Netron-style: the op type, the one to three attributes
that tell two nodes of that op apart (kernel/stride/group for a Conv, perm for a
Transpose, axis for a Concat...), and the shapes of its weights inline
(``W ⟨16×8×3×3⟩``, ``B ⟨16⟩``); and the shape an edge carries.

Pure functions of the graph model, so the browser renderer, tests and the CLI
all get the same text. Model text is returned raw; renderers escape it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from onnx import AttributeProto, NodeProto

from studio.core.types import TensorInfo
from studio.graphview.escape import display
from studio.graphview.model import GraphModel

# Attributes worth a line in the box, per op type, in display order. Ops not listed show
# nothing but their weights; every attribute is in the details panel.
KEY_ATTRS: dict[str, tuple[str, ...]] = {
    "Conv": ("kernel_shape", "strides", "group", "pads", "dilations"),
    "ConvTranspose": ("kernel_shape", "strides", "group", "pads"),
    "ConvInteger": ("kernel_shape", "strides", "group"),
    "QLinearConv": ("kernel_shape", "strides", "group"),
    "MaxPool": ("kernel_shape", "strides", "pads"),
    "AveragePool": ("kernel_shape", "strides", "pads"),
    "LpPool": ("kernel_shape", "strides"),
    "Transpose": ("perm",),
    "Concat": ("axis",),
    "Softmax": ("axis",),
    "LogSoftmax": ("axis",),
    "Hardmax": ("axis",),
    "Gather": ("axis",),
    "GatherElements": ("axis",),
    "Split": ("axis", "split", "num_outputs"),
    "Flatten": ("axis",),
    "ArgMax": ("axis", "keepdims"),
    "ArgMin": ("axis", "keepdims"),
    "CumSum": ("exclusive", "reverse"),
    "Resize": ("mode", "coordinate_transformation_mode", "nearest_mode"),
    "Upsample": ("mode",),
    "Cast": ("to",),
    "CastLike": ("saturate",),
    "Gemm": ("transA", "transB", "alpha"),
    "LeakyRelu": ("alpha",),
    "Elu": ("alpha",),
    "HardSigmoid": ("alpha", "beta"),
    "Clip": ("min", "max"),
    "BatchNormalization": ("epsilon",),
    "InstanceNormalization": ("epsilon",),
    "LayerNormalization": ("axis", "epsilon"),
    "GroupNormalization": ("num_groups", "epsilon"),
    "ReduceMean": ("axes", "keepdims"),
    "ReduceSum": ("axes", "keepdims"),
    "ReduceMax": ("axes", "keepdims"),
    "ReduceMin": ("axes", "keepdims"),
    "ReduceProd": ("axes", "keepdims"),
    "ReduceL2": ("axes", "keepdims"),
    "Squeeze": ("axes",),
    "Unsqueeze": ("axes",),
    "DepthToSpace": ("blocksize", "mode"),
    "SpaceToDepth": ("blocksize",),
    "Pad": ("mode",),
    "TopK": ("axis", "largest"),
    "QuantizeLinear": ("axis",),
    "DequantizeLinear": ("axis",),
    "GridSample": ("mode", "padding_mode", "align_corners"),
    "Einsum": ("equation",),
    "Attention": ("num_heads",),
    "MultiHeadAttention": ("num_heads",),
    "If": (),
    "Loop": (),
}
MAX_ATTRS = 3
# ONNX "kernel_shape" reads better short, as Netron writes it.
SHORT = {"kernel_shape": "kernel", "strides": "stride", "dilations": "dilation",
         "coordinate_transformation_mode": "coord", "nearest_mode": "nearest", "num_outputs": "outputs"}
# Names for weight inputs by position, where the op defines one; others are named by index.
INPUT_NAMES: dict[str, tuple[str, ...]] = {
    "Conv": ("X", "W", "B"), "ConvTranspose": ("X", "W", "B"), "Gemm": ("A", "B", "C"),
    "MatMul": ("A", "B"), "BatchNormalization": ("X", "scale", "B", "mean", "var"),
    "LayerNormalization": ("X", "scale", "B"), "InstanceNormalization": ("X", "scale", "B"),
    "Add": ("A", "B"), "Mul": ("A", "B"), "Sub": ("A", "B"), "Div": ("A", "B"),
    "Reshape": ("data", "shape"), "Resize": ("X", "roi", "scales", "sizes"), "Gather": ("data", "indices"),
    "Split": ("input", "split"), "Slice": ("data", "starts", "ends", "axes", "steps"),
    "Pad": ("data", "pads", "value"), "PRelu": ("X", "slope"), "Expand": ("input", "shape"),
    "QuantizeLinear": ("x", "scale", "zero_point"), "DequantizeLinear": ("x", "scale", "zero_point"),
    "TopK": ("X", "K"), "Clip": ("input", "min", "max"), "Tile": ("input", "repeats"),
    "Unsqueeze": ("data", "axes"), "Squeeze": ("data", "axes"), "ReduceSum": ("data", "axes"),
    "ReduceMean": ("data", "axes"), "ReduceMax": ("data", "axes"), "ReduceMin": ("data", "axes"),
    "Where": ("condition", "X", "Y"), "Pow": ("X", "Y"), "ConstantOfShape": ("shape",),
    "Range": ("start", "limit", "delta"),
    "NonMaxSuppression": ("boxes", "scores", "max_per_class", "iou_threshold", "score_threshold"),
    "CumSum": ("x", "axis"), "OneHot": ("indices", "depth", "values"), "Upsample": ("X", "scales"),
}
MAX_WEIGHTS = 4
_DTYPES = {v: k.lower() for k, v in AttributeProto.AttributeType.items()}


# A NamedTuple, not a frozen dataclass (as GNode): the viewer makes one per node, 10k-100k.
class Box(NamedTuple):
    title: str                       # op type (domain-qualified when not ONNX)
    name: str                        # the node's short name (last path component), may be ""
    attrs: tuple[str, ...]           # "kernel 3×3", "stride 2", "perm 0,2,1"
    weights: tuple[str, ...]         # "W ⟨16×8×3×3⟩"


def _dims(values: Sequence[int]) -> str:
    return "×".join(str(v) for v in values)


def _tensor_dtype(code: int) -> str:
    from onnx import TensorProto
    try:
        return TensorProto.DataType.Name(code).lower()
    except ValueError:
        return str(code)


def attr_value(a: AttributeProto, limit: int = 40) -> str:
    """An attribute's value as short text (lists joined, tensors by shape, graphs named)."""
    t = a.type
    if t == AttributeProto.INT:
        return str(a.i)
    if t == AttributeProto.FLOAT:
        return f"{a.f:g}"
    if t == AttributeProto.STRING:
        return display(a.s.decode("utf-8", "replace"), limit)
    if t == AttributeProto.INTS:
        vals = list(a.ints)
        return display(",".join(str(v) for v in vals), limit)
    if t == AttributeProto.FLOATS:
        return display(",".join(f"{v:g}" for v in a.floats), limit)
    if t == AttributeProto.STRINGS:
        return display(",".join(s.decode("utf-8", "replace") for s in a.strings), limit)
    if t == AttributeProto.TENSOR:
        return f"tensor ⟨{_dims(a.t.dims)}⟩"
    if t in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        return "graph"
    return _DTYPES.get(t, "?")


def _attr_line(op: str, a: AttributeProto) -> str | None:
    name = SHORT.get(a.name, a.name)
    if a.name == "to" and a.type == AttributeProto.INT:
        return f"to {_tensor_dtype(a.i)}"
    if a.name in ("kernel_shape",) and a.type == AttributeProto.INTS:
        return f"{name} {_dims(a.ints)}"
    if a.name in ("strides", "dilations") and a.type == AttributeProto.INTS:
        vals = set(a.ints)
        if a.name == "dilations" and vals <= {1}:
            return None                      # the default says nothing
        return f"{name} {next(iter(vals)) if len(vals) == 1 else _dims(a.ints)}"
    if a.name == "pads" and a.type == AttributeProto.INTS:
        vals = set(a.ints)
        if vals <= {0}:
            return None
        return f"pads {next(iter(vals)) if len(vals) == 1 else ','.join(str(v) for v in a.ints)}"
    if a.name == "group" and a.type == AttributeProto.INT and a.i == 1:
        return None
    return f"{name} {attr_value(a)}"


def key_attributes(node: NodeProto, limit: int = MAX_ATTRS) -> tuple[str, ...]:
    """The attributes that matter for this op, as short lines (at most ``limit``)."""
    if not node.attribute:      # most nodes have none (8 in 10 of a resnet): no name table to build
        return ()
    wanted = KEY_ATTRS.get(node.op_type)
    by_name = {a.name: a for a in node.attribute}
    lines: list[str] = []
    if wanted is None:          # an op we do not know: its first small scalar attributes
        for a in node.attribute:
            if a.type in (AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING, AttributeProto.INTS):
                lines.append(f"{a.name} {attr_value(a, 24)}")
            if len(lines) >= limit:
                break
        return tuple(lines)
    for key in wanted:
        a = by_name.get(key)
        if a is None:
            continue
        line = _attr_line(node.op_type, a)
        if line:
            lines.append(line)
        if len(lines) >= limit:
            break
    return tuple(lines)


def weight_lines(graph: GraphModel, k: int, limit: int = MAX_WEIGHTS) -> tuple[str, ...]:
    """``W ⟨16×8×3×3⟩`` for each input that is an initializer (a weight), by the op's input name."""
    node = graph.nodes[k]
    if graph.constants.isdisjoint(node.inputs):     # no weight (most activations): one test in C, not one per input
        return ()
    names = INPUT_NAMES.get(node.op_type, ())
    out: list[str] = []
    for pos, t in enumerate(node.inputs):
        if not t or t not in graph.constants:
            continue
        label = names[pos] if pos < len(names) else f"in{pos}"
        value = graph.values.get(t)
        if value is not None:                  # a small constant: its value says more than its shape
            out.append(f"{label} = {value}")
            if len(out) >= limit:
                break
            continue
        shape = graph.weights.get(t)
        if shape is None:
            info = graph.tensors.get(t)
            shape = info.shape if info is not None else None
        out.append(f"{label} ⟨{_dims_text(shape) if shape is not None else '?'}⟩")
        if len(out) >= limit:
            break
    return tuple(out)


def node_box(graph: GraphModel, k: int) -> Box:
    """The box of node ``k``: op type, short name, key attributes, weight shapes."""
    n = graph.nodes[k]
    short = n.name.rsplit("/", 1)[-1] if n.name else ""
    if n.kind != "op":
        return Box(n.op_type, n.name, (), ())
    title = f"{n.domain}::{n.op_type}" if n.domain else n.op_type
    proto = graph.protos[k] if graph.protos and k < len(graph.protos) else None
    attrs = key_attributes(proto) if proto is not None else ()
    return Box(title, "" if short == n.op_type else short, attrs, weight_lines(graph, k))


def edge_shape(graph: GraphModel, tensor: str) -> str:
    """The shape an edge carries, ``1×64×80×80`` (symbolic dims by name), or ""."""
    return edge_label(graph.tensors.get(tensor))


def edge_label(info: TensorInfo | None) -> str:
    """:func:`edge_shape` of a tensor's entry in ``graph.tensors`` (None: not listed)."""
    if info is None or info.shape is None:
        return ""
    return _dims_text(info.shape)


def _dims_text(shape: Sequence) -> str:
    return _shape_text(shape if isinstance(shape, tuple) else tuple(shape))


@functools.lru_cache(maxsize=4096)
def _shape_text(shape: tuple) -> str:
    """``_dims_text`` of each distinct shape once (a 10k-node model's edges carry a few dozen shapes)."""
    if len(shape) == 0:
        return "scalar"
    parts = []
    for d in shape:
        text = "?" if d is None else str(d)
        parts.append(text if len(text) <= 14 else text[:12] + "…")
    return "×".join(parts)
