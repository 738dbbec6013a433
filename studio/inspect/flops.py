"""FLOPs and MACs per node from shapes, with user values for dynamic dims.

Conventions (stated so numbers can be compared with other tools): one MAC is
a multiply-add and counts as 2 FLOPs; Conv/ConvTranspose/Gemm/MatMul/RNNs are
counted as MACs (bias adds as FLOPs); pooling counts one FLOP per window
element; elementwise ops count FLOPs per output element from a small table;
data-movement ops (Reshape, Transpose, Gather, Concat...) count zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from onnx import NodeProto, helper

from studio.core.types import Dim, TensorInfo


@dataclass(frozen=True)
class Cost:
    flops: int
    macs: int = 0


UNKNOWN: Cost | None = None

# FLOPs per output element for elementwise and activation ops (approximate, see module doc).
ELEMENTWISE_FLOPS: dict[str, int] = {
    **dict.fromkeys(["Add", "Sub", "Mul", "Div", "Max", "Min", "Mean", "Sum", "Neg", "Abs", "Relu",
                     "LeakyRelu", "PRelu", "Sign", "Ceil", "Floor", "Round", "Reciprocal", "Clip",
                     "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor",
                     "Not", "Where", "Mod", "BitShift", "ThresholdedRelu", "Shrink"], 1),
    **dict.fromkeys(["Sqrt", "Exp", "Log", "Pow", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
                     "Cosh", "Asinh", "Acosh", "Atanh", "Erf", "Softplus", "Softsign", "Selu", "Elu",
                     "Celu"], 2),
    **dict.fromkeys(["Sigmoid", "HardSigmoid", "Tanh"], 4),
    **dict.fromkeys(["HardSwish", "Mish"], 5),
    "Gelu": 8, "FastGelu": 8, "BiasGelu": 9, "QuickGelu": 5,
    **dict.fromkeys(["BatchNormalization", "InstanceNormalization"], 2),
    **dict.fromkeys(["LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
                     "GroupNormalization", "RMSNormalization", "LpNormalization"], 5),
    **dict.fromkeys(["Softmax", "LogSoftmax", "Hardmax"], 5),
    **dict.fromkeys(["QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Cast"], 1),
}
REDUCE_OPS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
              "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
POOL_OPS = {"MaxPool", "AveragePool", "LpPool"}


def resolve(shape: tuple[Dim, ...] | None, dims: Mapping[str, int], assumed: set[str],
            default: int = 1) -> tuple[int, ...] | None:
    """Concrete dims: user values for symbolic names, ``default`` otherwise (recorded)."""
    if shape is None:
        return None
    out = []
    for d in shape:
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, str) and d in dims:
            out.append(int(dims[d]))
        else:
            assumed.add(d if isinstance(d, str) else "?")
            out.append(default)
    return tuple(out)


def numel(shape: tuple[int, ...] | None) -> int | None:
    return None if shape is None else math.prod(shape)


def _attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


ShapeOf = Callable[[str], tuple[int, ...] | None]


def _conv(node: NodeProto, shape_of: ShapeOf) -> Cost | None:
    w = shape_of(node.input[1]) if len(node.input) > 1 else None
    y = shape_of(node.output[0])
    if w is None or y is None or len(w) < 2:
        return None
    # w is [C_out, C_in/group, *kernel]: each output element is one such dot product.
    macs = numel(y) * w[1] * math.prod(w[2:])
    bias = numel(y) if len(node.input) > 2 and node.input[2] else 0
    return Cost(2 * macs + bias, macs)


def _conv_transpose(node: NodeProto, shape_of: ShapeOf) -> Cost | None:
    x = shape_of(node.input[0])
    w = shape_of(node.input[1]) if len(node.input) > 1 else None
    y = shape_of(node.output[0])
    if x is None or w is None or len(w) < 2:
        return None
    # w is [C_in, C_out/group, *kernel]: each input element scatters into that many outputs.
    macs = numel(x) * w[1] * math.prod(w[2:])
    bias = numel(y) if y is not None and len(node.input) > 2 and node.input[2] else 0
    return Cost(2 * macs + bias, macs)


def _gemm(node: NodeProto, shape_of: ShapeOf) -> Cost | None:
    a, b = shape_of(node.input[0]), shape_of(node.input[1])
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    m, k = (a[1], a[0]) if _attr(node, "transA", 0) else (a[0], a[1])
    n = b[0] if _attr(node, "transB", 0) else b[1]
    macs = m * n * k
    bias = m * n if len(node.input) > 2 and node.input[2] else 0
    return Cost(2 * macs + bias, macs)


def _matmul(node: NodeProto, shape_of: ShapeOf) -> Cost | None:
    a, b = shape_of(node.input[0]), shape_of(node.input[1])
    y = shape_of(node.output[0])
    if a is None or b is None or not a or not b:
        return None
    k = a[-1]
    n = b[-1] if len(b) >= 2 else 1
    if y is not None:
        # Output holds batch x M x N elements, each a K-long dot product.
        macs = numel(y) * k
    else:
        m = a[-2] if len(a) >= 2 else 1
        batch = math.prod(a[:-2]) if len(a) > 2 else 1
        macs = batch * m * n * k
    return Cost(2 * macs, macs)


def _rnn(node: NodeProto, shape_of: ShapeOf, transposed: bool = False) -> Cost | None:
    """LSTM/GRU/RNN: W [dirs, gates*hidden, input], R [dirs, gates*hidden, hidden]; ``transposed``: ORT's
    com.microsoft DynamicQuantizeLSTM, whose W is [dirs, input, 4*hidden] and R [dirs, hidden, 4*hidden]."""
    x, w, r = shape_of(node.input[0]), shape_of(node.input[1]), shape_of(node.input[2])
    if x is None or w is None or r is None or len(x) != 3 or len(w) != 3 or len(r) != 3:
        return None
    seq, batch = (x[0], x[1]) if not _attr(node, "layout", 0) else (x[1], x[0])
    if transposed:
        dirs, input_size, gates_hidden = w
        hidden = r[1]
    else:
        dirs, gates_hidden, input_size = w
        hidden = r[2]
    macs = dirs * seq * batch * gates_hidden * (input_size + hidden)
    return Cost(2 * macs + dirs * seq * batch * gates_hidden * 4, macs)


def _pool(node: NodeProto, shape_of: ShapeOf) -> Cost | None:
    y = shape_of(node.output[0])
    kernel = _attr(node, "kernel_shape")
    if y is None or not kernel:
        return None
    return Cost(numel(y) * math.prod(kernel))


def node_cost(node: NodeProto, shape_of: ShapeOf) -> Cost | None:
    """Cost of one node; None when the shapes it needs are unknown (or the node
    is malformed: missing inputs, absurd attributes)."""
    try:
        return _node_cost(node, shape_of)
    except (IndexError, ValueError, TypeError, OverflowError):
        return None


def _node_cost(node: NodeProto, shape_of: ShapeOf) -> Cost | None:
    op = node.op_type
    if node.domain not in ("", "ai.onnx", "com.microsoft"):
        return None
    if op in ("Conv", "ConvInteger", "QLinearConv", "FusedConv", "NhwcConv"):
        if op == "QLinearConv":
            node = _shifted(node, (0, 3, 8), (0,))
        return _conv(node, shape_of)
    if op == "ConvTranspose":
        return _conv_transpose(node, shape_of)
    if op == "Gemm":
        return _gemm(node, shape_of)
    if op in ("MatMul", "MatMulInteger", "FusedMatMul", "MatMulInteger16", "MatMulIntegerToFloat",
              "DynamicQuantizeMatMul"):
        return _matmul(node, shape_of)
    if op == "QLinearMatMul":
        return _matmul(_shifted(node, (0, 3), (0,)), shape_of)
    if op in ("LSTM", "GRU", "RNN"):
        return _rnn(node, shape_of)
    if op == "DynamicQuantizeLSTM":         # onnxruntime's dynamic INT8 quantization of an LSTM (ddddocr)
        return _rnn(node, shape_of, transposed=True)
    if op in POOL_OPS:
        return _pool(node, shape_of)
    if op in REDUCE_OPS:
        x = shape_of(node.input[0]) if node.input else None
        return None if x is None else Cost(numel(x))
    per = ELEMENTWISE_FLOPS.get(op)
    if per is not None:
        y = shape_of(node.output[0]) if node.output else None
        return None if y is None else Cost(per * numel(y))
    return Cost(0)


def _shifted(node: NodeProto, inputs: tuple[int, ...], outputs: tuple[int, ...]) -> NodeProto:
    """A view of a QLinear* node with only its data inputs, so the float formulas apply."""
    view = NodeProto()
    view.CopyFrom(node)
    del view.input[:]
    view.input.extend(node.input[i] for i in inputs if i < len(node.input))
    del view.output[:]
    view.output.extend(node.output[i] for i in outputs)
    return view


def shape_lookup(table: Mapping[str, TensorInfo], dims: Mapping[str, int], assumed: set[str]) -> ShapeOf:
    def shape_of(name: str) -> tuple[int, ...] | None:
        info = table.get(name)
        return None if info is None else resolve(info.shape, dims, assumed)
    return shape_of
