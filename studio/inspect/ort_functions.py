"""Nodes ONNX Runtime runs as their ONNX function body, for the memory plan.

Why: ORT has no CPU kernel for some standard ops that ONNX defines as a function
(HardSwish, Mish, Swish, GroupNormalization... at the opsets it registers). When
it loads such a model it inlines the body in place of the node, the new nodes
appended after the graph's (so ORT's order visits them as the highest-index
producers), and the body's intermediates (HardSwish's HardSigmoid) become planned
tensors of their own. Measured: mobilenet_like's 5 HardSwish nodes make ORT's
pattern 10 % larger than a plan of the file's nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from onnx import FunctionProto, NodeProto

Shape = tuple[int | str | None, ...]


@dataclass(frozen=True)
class Expansion:
    """One node's inlined body: its nodes (intermediates named ``<node>/<value>``) and their types."""

    nodes: tuple[NodeProto, ...]
    shapes: dict[str, Shape]          # intermediates at the resolved input shapes
    static: dict[str, Shape]          # intermediates at the shapes ORT sees when it loads the file
    elem_types: dict[str, int]


@lru_cache(maxsize=1)
def _cpu_kernels() -> dict[str, tuple[tuple[int, int], ...]]:
    try:
        from onnxruntime.capi import _pybind_state as C
    except Exception:  # noqa: BLE001 - without ORT nothing is expanded
        return {}
    out: dict[str, list[tuple[int, int]]] = {}
    for k in C.get_all_opkernel_def():
        if k.provider == "CPUExecutionProvider" and k.domain in ("", "ai.onnx"):
            out.setdefault(k.op_name, []).append(tuple(k.version_range))
    return {op: tuple(v) for op, v in out.items()}


def _body(op_type: str, opset: int) -> FunctionProto | None:
    """The function body ORT would inline for ``op_type`` at ``opset``; None when ORT has a CPU kernel
    (or the op has no context-free function, or ORT is not installed)."""
    import onnx.defs

    kernels = _cpu_kernels()
    if not kernels:
        return None
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except Exception:  # noqa: BLE001 - not a standard op at this opset
        return None
    if any(lo <= schema.since_version <= hi for lo, hi in kernels.get(op_type, ())) or not schema.has_function:
        return None
    f = FunctionProto()
    f.ParseFromString(schema.get_function_with_opset_version(opset))
    return f


def expand(node: NodeProto, opset: int, label: str, shape_of: Callable[[str], Shape | None],
           static_of: Callable[[str], Shape | None], elem_of: Callable[[str], int | None]) -> Expansion | None:
    """The body ORT runs for ``node`` (a default-domain op without a CPU kernel), or None."""
    import onnx
    import onnx.inliner
    from onnx import helper as oh

    if node.domain not in ("", "ai.onnx") or not opset:
        return None
    body = _body(node.op_type, opset)
    if body is None:
        return None
    ins = [x for x in node.input if x]
    if any(elem_of(x) is None for x in ins):
        return None

    def inferred(shape: Callable[[str], Shape | None]) -> tuple[list[NodeProto], dict[str, tuple]]:
        vis = [oh.make_tensor_value_info(x, elem_of(x), None if shape(x) is None
                                         else [d if isinstance(d, (int, str)) else None for d in shape(x)])
               for x in ins]
        outs = [oh.make_tensor_value_info(o, 0, None) for o in node.output if o]
        m = oh.make_model(oh.make_graph([node], "g", vis, outs), opset_imports=[oh.make_opsetid("", opset)])
        f = FunctionProto()
        f.CopyFrom(body)
        f.domain, f.name = "", node.op_type
        del f.opset_import[:]
        f.opset_import.extend([oh.make_opsetid("", opset)])
        m.functions.append(f)
        m = onnx.inliner.inline_selected_functions(m, [("", node.op_type)], exclude=False)
        m = onnx.shape_inference.infer_shapes(m, strict_mode=False)
        types = {vi.name: (vi.type.tensor_type.elem_type,
                           tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                 for d in vi.type.tensor_type.shape.dim)
                           if vi.type.tensor_type.HasField("shape") else None) for vi in m.graph.value_info}
        return list(m.graph.node), types

    try:
        nodes, concrete = inferred(shape_of)
        _, static = inferred(static_of)
    except Exception:  # noqa: BLE001 - a body that does not inline or infer: the node stays as written
        return None
    keep = set(node.input) | set(node.output)
    rename = {o: f"{label}/{o}" for n in nodes for o in n.output if o and o not in keep}
    out: list[NodeProto] = []
    for n in nodes:
        c = NodeProto()
        c.CopyFrom(n)
        c.input[:] = [rename.get(x, x) for x in n.input]
        c.output[:] = [rename.get(x, x) for x in n.output]
        out.append(c)
    return Expansion(tuple(out), {rename[k]: v[1] for k, v in concrete.items() if k in rename},
                     {rename[k]: v[1] for k, v in static.items() if k in rename},
                     {rename[k]: v[0] for k, v in concrete.items() if k in rename})


def expansions(nodes: Sequence[NodeProto], opset: int | None, shape_of: Callable[[str], Shape | None],
               static_of: Callable[[str], Shape | None], elem_of: Callable[[str], int | None]
               ) -> dict[int, Expansion]:
    """Every node of a graph ORT runs as its function body, by index."""
    if not opset:
        return {}
    out: dict[int, Expansion] = {}
    for i, n in enumerate(nodes):
        e = expand(n, opset, n.name or f"{n.op_type}_{i}", shape_of, static_of, elem_of)
        if e is not None:
            out[i] = e
    return out
