"""Graph surgery the plugin jobs need, on ``onnx`` protos (worker side mostly).

* find the nodes of one op type (node ids as everywhere in the studio);
* a one-node model around a node, to test an op on captured inputs;
* the model cut just before an op, its inputs exposed as outputs, to capture
  what the op really receives (only when every node upstream is standard);
* the model with the op moved to another domain/name (onnxruntime-extensions
  Python ops live in ``ai.onnx.contrib``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, helper

from diagnostics.custom_ops import STANDARD_DOMAINS, is_standard_op, node_id
from studio.core.protowalk import iter_graphs

__all__ = ["attr_values", "find_nodes", "ident", "norm_domain", "retarget_op", "single_node_model", "truncate_before"]


def norm_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def find_nodes(model: ModelProto, domain: str, op_type: str) -> Iterator[tuple[str, NodeProto, bool]]:
    """(node id, node, in the main graph) for every node of ``domain::op_type``, all graphs included."""
    seen: set[str] = set()
    dom = norm_domain(domain)
    for ref in iter_graphs(model):
        for i, n in enumerate(ref.graph.node):
            nid = node_id(ref.scope, n, i, seen)
            if norm_domain(n.domain) == dom and n.op_type == op_type:
                yield nid, n, ref.scope == "" and ref.function is None


def attr_values(node: NodeProto) -> dict[str, object]:
    """JSON-able attribute values (bytes decoded, tensors/graphs summarised)."""
    out: dict[str, object] = {}
    for a in node.attribute:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            out[a.name] = "<graph>"
            continue
        if a.type in (onnx.AttributeProto.TENSOR, onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.TENSORS,
                      onnx.AttributeProto.TYPE_PROTO, onnx.AttributeProto.TYPE_PROTOS):
            out[a.name] = "<tensor>"
            continue
        value = helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list):
            value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
        out[a.name] = value
    return out


def _opsets(model: ModelProto) -> list[onnx.OperatorSetIdProto]:
    return [copy.deepcopy(o) for o in model.opset_import]


def single_node_model(model: ModelProto, node: NodeProto, inputs: list[tuple[str, list[int]] | None],
                      output_dtypes: list[str | None]) -> ModelProto:
    """A model holding only ``node`` (attributes kept); ``inputs[i]`` is (numpy dtype, shape) or None (absent)."""
    new = NodeProto()
    new.CopyFrom(node)
    del new.input[:]
    del new.output[:]
    graph_inputs = []
    for i, spec in enumerate(inputs):
        if spec is None:
            new.input.append("")
            continue
        dtype, shape = spec
        name = f"in{i}"
        new.input.append(name)
        graph_inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                                          shape))
    graph_outputs = []
    for i, dtype in enumerate(output_dtypes):
        name = f"out{i}"
        new.output.append(name)
        if dtype:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            graph_outputs.append(helper.make_tensor_value_info(name, elem, None))
        else:
            graph_outputs.append(helper.make_empty_tensor_value_info(name))
    graph = helper.make_graph([new], "single_op", graph_inputs, graph_outputs)
    out = helper.make_model(graph, opset_imports=_opsets(model), ir_version=model.ir_version)
    return out


def _is_custom(node: NodeProto, opsets: dict[str, int]) -> bool:
    dom = norm_domain(node.domain)
    return dom not in STANDARD_DOMAINS or not is_standard_op(dom, node.op_type, opsets.get(dom, 0))


def _subgraph_names(node: NodeProto) -> set[str]:
    names: set[str] = set()
    for a in node.attribute:
        graphs = [a.g] if a.HasField("g") else []
        graphs += list(a.graphs)
        for g in graphs:
            for n in g.node:
                names.update(x for x in n.input if x)
                for sub in n.attribute:
                    if sub.HasField("g") or len(sub.graphs):
                        names |= _subgraph_names(n)
    return names


def truncate_before(model: ModelProto, targets: list[NodeProto]) -> tuple[ModelProto, list[str], list[str]]:
    """The main graph cut to what the ``targets``' inputs need, those inputs as outputs.

    Returns (model, exposed value names, notes). Targets whose ancestors
    include another custom op are left out (ONNX Runtime could not run them),
    with a note each.
    """
    g = model.graph
    opsets = {norm_domain(o.domain): o.version for o in model.opset_import}
    producer = {out: i for i, n in enumerate(g.node) for out in n.output if out}
    keep: set[int] = set()
    exposed: list[str] = []
    notes: list[str] = []
    for target in targets:
        needed: set[int] = set()
        stack = [x for x in target.input if x]
        blocked = None
        seen_names: set[str] = set()
        while stack:
            name = stack.pop()
            if name in seen_names:
                continue
            seen_names.add(name)
            idx = producer.get(name)
            if idx is None or idx in needed:
                continue
            node = g.node[idx]
            if node is target:
                continue
            if _is_custom(node, opsets):
                blocked = f"{node.domain}::{node.op_type}"
                break
            needed.add(idx)
            stack.extend(x for x in node.input if x)
            stack.extend(_subgraph_names(node))
        label = target.name or target.op_type
        if blocked:
            notes.append(f"node {label[:60]}: not captured, its inputs come through another custom op ({blocked})")
            continue
        keep |= needed
        for x in target.input:
            if x and x not in exposed:
                exposed.append(x)
    out = ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(copy.deepcopy(g.node[i]) for i in sorted(keep))
    del out.graph.output[:]
    inits = {t.name for t in g.initializer}
    graph_inputs = {vi.name for vi in g.input}
    for name in exposed:
        if name in inits and name not in graph_inputs:
            continue  # read straight from the initializer
        out.graph.output.append(helper.make_empty_tensor_value_info(name))
    return out, exposed, notes


_IDENT = re.compile(r"[^A-Za-z0-9_]")


def retarget_op(model: ModelProto, domain: str, op_type: str, new_domain: str,
                new_op_type: str | Callable[[NodeProto], str],
                attr_defaults: dict[str, object] | None = None) -> ModelProto:
    """A copy with every ``domain::op_type`` node (all graphs, functions) moved to ``new_domain::new_op_type``
    (a name, or a function of the node); attributes missing on a node get ``attr_defaults``."""
    out = ModelProto()
    out.CopyFrom(model)
    dom = norm_domain(domain)

    def fix(nodes) -> None:
        for n in nodes:
            if norm_domain(n.domain) == dom and n.op_type == op_type:
                n.domain, n.op_type = new_domain, new_op_type(n) if callable(new_op_type) else new_op_type
                present = {a.name for a in n.attribute}
                for name, value in (attr_defaults or {}).items():
                    if name not in present:
                        n.attribute.append(helper.make_attribute(name, value))

    for ref in iter_graphs(out):
        fix(ref.graph.node)
    for f in out.functions:
        fix(f.node)
        if not any(o.domain == new_domain for o in f.opset_import):
            f.opset_import.append(helper.make_opsetid(new_domain, 1))
    if not any(o.domain == new_domain for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(new_domain, 1))
    return out


MAX_IDENT = 48


def ident(text: str, default: str = "op") -> str:
    """A C/Python identifier from an op type ('grid_sampler', 'Foo-Bar' -> 'Foo_Bar'): ASCII letters, digits and
    '_' only, never a leading digit, at most ``MAX_IDENT`` characters (a longer name keeps its start and gets a
    hash of the whole name, so it stays a usable file and symbol name and distinct names stay distinct)."""
    cleaned = _IDENT.sub("_", text).strip("_") or default
    out = f"op_{cleaned}" if cleaned[0].isdigit() else cleaned
    if len(out) > MAX_IDENT:
        import hashlib

        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        out = f"{out[:MAX_IDENT - 9].rstrip('_')}_{digest}"
    return out
