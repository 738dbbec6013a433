"""Model mutators for fuzzing: byte-level (bit flips, truncation) and
protobuf-level (attribute values, dims, dropped inputs, op types, dtypes,
opsets). Deterministic per seed, so a failing case can be replayed."""

from __future__ import annotations

import random
from collections.abc import Callable

import onnx
from onnx import AttributeProto, ModelProto, TensorProto

EXTREME_INTS = [0, -1, 1, 2, 3, 2**31 - 1, 2**31, 2**40, -(2**40), 2**62, -(2**63)]
OPS = ["Relu", "Conv", "Gather", "Reshape", "Loop", "If", "Expand", "ConstantOfShape", "Split", "Concat",
       "MaxPool", "Softmax", "TopK", "Range", "Tile", "Pad", "Resize", "NonZero", "NotAnOp", "Einsum"]


def flip_bits(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(buf))
        buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(1, len(data))]


def _nodes(m: ModelProto):
    return list(m.graph.node)


def mutate_attribute(m: ModelProto, rng: random.Random) -> str:
    candidates = [(n, a) for n in _nodes(m) for a in n.attribute if a.type in (AttributeProto.INT, AttributeProto.INTS,
                                                                               AttributeProto.FLOAT)]
    if not candidates:
        return "no attribute"
    node, attr = rng.choice(candidates)
    if attr.type == AttributeProto.INT:
        attr.i = rng.choice(EXTREME_INTS)
    elif attr.type == AttributeProto.INTS and len(attr.ints):
        attr.ints[rng.randrange(len(attr.ints))] = rng.choice(EXTREME_INTS)
    else:
        attr.f = rng.choice([0.0, -1.0, float("inf"), float("nan"), 1e38])
    return f"attr {node.op_type}.{attr.name}"


def mutate_input_dims(m: ModelProto, rng: random.Random) -> str:
    vis = [vi for vi in m.graph.input if vi.type.tensor_type.shape.dim]
    if not vis:
        return "no dims"
    vi = rng.choice(vis)
    dims = vi.type.tensor_type.shape.dim
    d = dims[rng.randrange(len(dims))]
    d.dim_value = rng.choice([0, 1, 2**31 - 1, 2**40, 7])
    return f"dims of {vi.name}"


def _pick_node(m: ModelProto, rng: random.Random, *, with_inputs: bool = False):
    """One node (one draw; only nodes that have inputs when ``with_inputs``), or None when there is none."""
    nodes = [n for n in _nodes(m) if n.input or not with_inputs]
    return rng.choice(nodes) if nodes else None


def drop_input(m: ModelProto, rng: random.Random) -> str:
    n = _pick_node(m, rng, with_inputs=True)
    if n is None:
        return "no inputs"
    del n.input[rng.randrange(len(n.input))]
    return f"dropped input of {n.op_type}"


def rename_input(m: ModelProto, rng: random.Random) -> str:
    n = _pick_node(m, rng, with_inputs=True)
    if n is None:
        return "no inputs"
    n.input[rng.randrange(len(n.input))] = rng.choice(["missing", n.output[0] if n.output else "x", ""])
    return f"renamed input of {n.op_type}"


def change_op(m: ModelProto, rng: random.Random) -> str:
    n = _pick_node(m, rng)
    if n is None:
        return "no nodes"
    old = n.op_type
    n.op_type = rng.choice(OPS)
    return f"op {old}->{n.op_type}"


def change_dtype(m: ModelProto, rng: random.Random) -> str:
    if m.graph.initializer and rng.random() < 0.5:
        t = rng.choice(list(m.graph.initializer))
        t.data_type = rng.choice([TensorProto.DOUBLE, TensorProto.INT8, TensorProto.STRING, TensorProto.FLOAT16, 0, 99])
        return f"initializer dtype {t.name}"
    vi = rng.choice(list(m.graph.input))
    vi.type.tensor_type.elem_type = rng.choice([TensorProto.DOUBLE, TensorProto.INT64, TensorProto.BOOL, 0, 99])
    return f"input dtype {vi.name}"


def change_tensor_dims(m: ModelProto, rng: random.Random) -> str:
    if not m.graph.initializer:
        return "no initializers"
    t = rng.choice(list(m.graph.initializer))
    if t.dims:
        t.dims[rng.randrange(len(t.dims))] = rng.choice(EXTREME_INTS)
    return f"initializer dims {t.name}"


def change_opset(m: ModelProto, rng: random.Random) -> str:
    if not m.opset_import:
        return "no opset"
    o = rng.choice(list(m.opset_import))
    o.version = rng.choice([1, 6, 11, 13, 18, 21, 9999, 0, -5])
    return f"opset {o.domain or 'ai.onnx'}={o.version}"


def duplicate_node(m: ModelProto, rng: random.Random) -> str:
    n = _pick_node(m, rng)
    if n is None:
        return "no nodes"
    m.graph.node.insert(rng.randrange(len(m.graph.node) + 1), n)
    return f"duplicated {n.op_type}"


def drop_output(m: ModelProto, rng: random.Random) -> str:
    if len(m.graph.node) < 2:
        return "too small"
    del m.graph.node[rng.randrange(len(m.graph.node))]
    return "dropped a node"


FIELD_MUTATORS: list[Callable[[ModelProto, random.Random], str]] = [
    mutate_attribute, mutate_input_dims, drop_input, rename_input, change_op, change_dtype, change_tensor_dims,
    change_opset, duplicate_node, drop_output,
]


def mutate(data: bytes, seed: int) -> tuple[bytes, str]:
    """One mutated model from ``data`` and a description; deterministic in ``seed``."""
    rng = random.Random(seed)
    roll = rng.random()
    if roll < 0.2:
        return flip_bits(data, rng), "bit flips"
    if roll < 0.27:
        return truncate(data, rng), "truncation"
    m = onnx.load_from_string(data)
    done = [rng.choice(FIELD_MUTATORS)(m, rng) for _ in range(rng.randint(1, 3))]
    return m.SerializeToString(), "; ".join(done)
