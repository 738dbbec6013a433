"""Per-node facts every engine check needs, computed once per model: id, op,
domain, the opset in force (the function's own opsets inside model-local
functions), the schema's since-version, input dtypes/ranks from shape
inference, which inputs are constants (and their values when small), and
attributes.

Model-local functions are expanded: a call node is marked ``is_function_call``
and the function's body nodes are listed (scope ``<function domain::name>``),
so checks look at what engines really run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

from diagnostics.custom_ops import node_id
from studio.core.protowalk import iter_graphs
from studio.core.types import TensorInfo

__all__ = ["NodeCtx", "SMALL_CONST_ELEMENTS", "collect_nodes", "onnx_type_name", "since_version"]

SMALL_CONST_ELEMENTS = 4096


@dataclass(frozen=True)
class NodeCtx:
    id: str
    name: str
    op_type: str
    domain: str                              # "" for ai.onnx
    opset: int                               # the opset in force for this domain (0 if not imported)
    since: int | None                        # schema since-version (None: not a known schema)
    scope: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    input_types: tuple[str | None, ...]      # "float", "int64"... (None unknown / absent)
    input_ranks: tuple[int | None, ...]
    attributes: Mapping[str, Any] = field(default_factory=dict)
    const_inputs: Mapping[int, np.ndarray | None] = field(default_factory=dict)  # index -> value (None: large)
    is_function_call: bool = False
    in_function: str | None = None
    node: NodeProto | None = field(default=None, repr=False, compare=False)

    @property
    def qualified(self) -> str:
        return f"{self.domain}::{self.op_type}" if self.domain else self.op_type

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attributes.get(name, default)

    def is_const(self, index: int) -> bool:
        return index in self.const_inputs

    def has_input(self, index: int) -> bool:
        return index < len(self.inputs) and bool(self.inputs[index])


def onnx_type_name(elem_type: int) -> str | None:
    """ONNX's own type names ("float", "double", "int64", "float16"), as kernels and tables use them."""
    if not elem_type or elem_type not in TensorProto.DataType.values():
        return None
    return TensorProto.DataType.Name(elem_type).lower()


def since_version(domain: str, op_type: str, opset: int) -> int | None:
    if domain not in ("", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training") or opset <= 0:
        return None
    try:
        return onnx.defs.get_schema(op_type, opset, domain).since_version
    except Exception:  # noqa: BLE001 - not an ONNX op at this opset
        return None


def _attr_value(attr: onnx.AttributeProto) -> Any:
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return "<graph>"
    if attr.type in (onnx.AttributeProto.TENSOR, onnx.AttributeProto.SPARSE_TENSOR):
        return "<tensor>"
    try:
        value = helper.get_attribute_value(attr)
    except Exception:  # noqa: BLE001
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
    return value


def _small_value(t: TensorProto) -> np.ndarray | None:
    if t.data_location == TensorProto.EXTERNAL:
        return None
    n = 1
    for d in t.dims:
        n *= max(int(d), 0)
    if n > SMALL_CONST_ELEMENTS:
        return None
    try:
        return numpy_helper.to_array(t)
    except Exception:  # noqa: BLE001 - odd dtypes, malformed data
        return None


def _constants(graph: onnx.GraphProto, outer: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray | None]:
    consts: dict[str, np.ndarray | None] = dict(outer)
    for t in graph.initializer:
        consts[t.name] = _small_value(t)
    for n in graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and len(n.output) == 1:
            value = None
            for a in n.attribute:
                if a.name == "value" and a.HasField("t"):
                    value = _small_value(a.t)
                elif a.name in ("value_int", "value_float", "value_ints", "value_floats"):
                    value = np.asarray(helper.get_attribute_value(a))
            consts[n.output[0]] = value
    # Graph inputs shadow same-named initializers only in old IR (inputs listing initializers).
    for vi in graph.input:
        if vi.name in consts and vi.name not in {t.name for t in graph.initializer}:
            consts.pop(vi.name, None)
    return consts


def collect_nodes(model: ModelProto, shapes: Mapping[str, TensorInfo] | None = None) -> list[NodeCtx]:
    """Every node of the main graph, If/Loop/Scan bodies and model-local functions."""
    shapes = shapes or {}
    model_opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    function_opsets = {f"{f.domain}::{f.name}": {("" if o.domain == "ai.onnx" else o.domain): o.version
                                                 for o in f.opset_import} for f in model.functions}
    local = {(f.domain, f.name) for f in model.functions}
    main_consts = _constants(model.graph, {})
    out: list[NodeCtx] = []
    seen: set[str] = set()
    for ref in iter_graphs(model):
        opsets = {**model_opsets, **function_opsets.get(ref.function or "", {})}
        consts = main_consts if ref.depth == 0 else _constants(ref.graph, main_consts)
        for i, n in enumerate(ref.graph.node):
            dom = "" if n.domain == "ai.onnx" else n.domain
            opset = opsets.get(dom, 0)
            types: list[str | None] = []
            ranks: list[int | None] = []
            const_inputs: dict[int, np.ndarray | None] = {}
            for k, name in enumerate(n.input):
                info = shapes.get(name) if name else None
                types.append(onnx_type_name(info.elem_type) if info is not None and info.kind == "tensor" else None)
                ranks.append(len(info.shape) if info is not None and info.shape is not None else None)
                if name and name in consts:
                    const_inputs[k] = consts[name]
            out.append(NodeCtx(
                id=node_id(ref.scope, n, i, seen), name=n.name, op_type=n.op_type, domain=dom, opset=opset,
                since=since_version(dom, n.op_type, opset), scope=ref.scope, inputs=tuple(n.input),
                outputs=tuple(n.output), input_types=tuple(types), input_ranks=tuple(ranks),
                attributes={a.name: _attr_value(a) for a in n.attribute}, const_inputs=const_inputs,
                is_function_call=(n.domain, n.op_type) in local or (dom, n.op_type) in local,
                in_function=ref.function, node=n))
    return out
