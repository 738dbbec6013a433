"""Parameter counts from initializers, Constant nodes and constant-shape
ConstantOfShape nodes (some exporters store every weight as a Constant node,
and weight-stripped models generate them), by dtype."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto, ModelProto, NodeProto, TensorProto, numpy_helper

from studio.core.protowalk import iter_graphs
from studio.core.tensor_safety import packed_nbytes
from studio.core.types import dtype_name


@dataclass(frozen=True)
class DtypeBytes:
    dtype: str
    tensors: int
    elements: int
    bytes: int


@dataclass(frozen=True)
class ParamStats:
    elements: int
    bytes: int
    initializers: int           # tensors stored as initializers
    constant_nodes: int         # tensors stored as Constant nodes
    generated: int              # ConstantOfShape outputs with a constant shape
    by_dtype: tuple[DtypeBytes, ...]

    def to_dict(self) -> dict:
        return {"elements": self.elements, "bytes": self.bytes, "initializers": self.initializers,
                "constant_nodes": self.constant_nodes, "generated": self.generated,
                "by_dtype": [d.__dict__ for d in self.by_dtype]}


def _constant_tensor(node: NodeProto) -> tuple[int, int] | None:
    """(elem_type, elements) of a Constant node's value, without decoding it."""
    for a in node.attribute:
        if a.name == "value" and a.type == AttributeProto.TENSOR:
            return a.t.data_type, math.prod(a.t.dims)
        if a.name == "sparse_value":
            return a.sparse_tensor.values.data_type, math.prod(a.sparse_tensor.dims)
        if a.name == "value_float":
            return TensorProto.FLOAT, 1
        if a.name == "value_floats":
            return TensorProto.FLOAT, len(a.floats)
        if a.name == "value_int":
            return TensorProto.INT64, 1
        if a.name == "value_ints":
            return TensorProto.INT64, len(a.ints)
        if a.name in ("value_string", "value_strings"):
            return TensorProto.STRING, max(1, len(a.strings))
    return None


def _small_int_values(name: str, consts: dict[str, TensorProto]) -> list[int] | None:
    t = consts.get(name)
    if t is None or t.data_location == TensorProto.EXTERNAL or math.prod(t.dims) > 16:
        return None
    try:
        return [int(v) for v in np.asarray(numpy_helper.to_array(t)).reshape(-1)]
    except Exception:
        return None


def count_params(model: ModelProto) -> ParamStats:
    by: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    inits = consts = generated = 0

    def add(elem_type: int, elements: int) -> None:
        row = by[dtype_name(elem_type)]
        row[0] += 1
        row[1] += elements
        row[2] += packed_nbytes(elem_type, elements) or 0

    for ref in iter_graphs(model):
        g = ref.graph
        small: dict[str, TensorProto] = {t.name: t for t in g.initializer}
        for t in g.initializer:
            inits += 1
            add(t.data_type, math.prod(t.dims))
        for st in g.sparse_initializer:
            inits += 1
            add(st.values.data_type, math.prod(st.dims))
        for node in g.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                info = _constant_tensor(node)
                if info:
                    consts += 1
                    add(*info)
                    for a in node.attribute:
                        if a.name == "value" and node.output:
                            small[node.output[0]] = a.t
            elif node.op_type == "ConstantOfShape" and node.domain in ("", "ai.onnx") and node.input:
                dims = _small_int_values(node.input[0], small)
                if dims is not None and all(d >= 0 for d in dims):
                    value = next((a.t for a in node.attribute if a.name == "value"), None)
                    generated += 1
                    add(value.data_type if value is not None else TensorProto.FLOAT, math.prod(dims))
    rows = tuple(DtypeBytes(k, v[0], v[1], v[2]) for k, v in sorted(by.items(), key=lambda kv: -kv[1][2]))
    return ParamStats(sum(r.elements for r in rows), sum(r.bytes for r in rows), inits, consts, generated, rows)
