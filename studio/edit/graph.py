"""Graph look-ups and upkeep shared by the edit operations: names to values and nodes (with
a hint when a name is wrong), type inference written back onto the onnx-ir values, cycle and
dead-code upkeep. Nothing here reads a weight: inference sees external tensors as typed inputs."""

from __future__ import annotations

import difflib

import onnx
import onnx_ir as ir

from studio.core.ort_symbolic import symbolic_shapes
from studio.edit.script import EditError, EditOp
from studio.verification.verifier import externals_as_inputs
from studio.core.model_io import to_proto


def all_values(graph: ir.Graph) -> dict[str, ir.Value]:
    """Every named value of the graph and its subgraphs (inputs, initializers, node outputs)."""
    return ir.convenience.create_value_mapping(graph, include_subgraphs=True)


def main_values(graph: ir.Graph) -> dict[str, ir.Value]:
    return ir.convenience.create_value_mapping(graph, include_subgraphs=False)


def edit_hint(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3)
    return f"; did you mean {', '.join(repr(c[:60]) for c in close)}?" if close else ""


def value(graph: ir.Graph, name: str, op: EditOp, *, what: str = "tensor",
          values: dict[str, ir.Value] | None = None) -> ir.Value:
    """The main graph's value ``name``, or a one-line error naming the edit and a near name (``values``:
    the graph's mapping when the caller looks up many names, so each is not a scan of the graph)."""
    values = main_values(graph) if values is None else values
    v = values.get(name)
    if v is None:
        raise EditError(f"{op.where()}: {what} '{name[:80]}' does not exist in the model"
                        f"{edit_hint(name, list(values))}")
    return v


def node(graph: ir.Graph, name: str, op: EditOp, *, main_only: bool = False) -> ir.Node:
    """The node called ``name`` (subgraphs too unless ``main_only``), or a one-line error."""
    nodes = list(graph) if main_only else list(ir.traversal.RecursiveGraphIterator(graph))
    found = [n for n in nodes if n.name == name]
    if not found:
        raise EditError(f"{op.where()}: node '{name[:80]}' does not exist in the model"
                        f"{edit_hint(name, [n.name for n in nodes if n.name])}")
    if len(found) > 1:
        raise EditError(f"{op.where()}: {len(found)} nodes are called '{name[:80]}'; rename them first "
                        "(optimize --passes rename-duplicate-nodes)")
    return found[0]


def type_text(v: ir.Value) -> str:
    dtype = v.dtype.name.lower() if v.dtype is not None else "?"
    if v.shape is None:
        return f"{dtype}[?]"
    return f"{dtype}[{','.join(str(d) for d in v.shape)}]"


def same_shape(a: ir.Value, b: ir.Value) -> bool:
    """Whether two values' shapes can be the same tensor's: equal rank, equal fixed dims, and a dynamic dim
    matching a dynamic one unless both are named differently. Shape inference names dims (``unk__54``) that an
    exporter left unnamed on the graph output, so an unnamed dim agrees with any dynamic dim; a fixed dim never
    agrees with a dynamic one (an Expand from 1 to N is not an identity)."""
    if a.shape is None or b.shape is None:
        return True
    if len(a.shape) != len(b.shape):
        return False
    for x, y in zip(a.shape, b.shape):
        if isinstance(x, int) or isinstance(y, int):
            if x != y:
                return False
        elif x.value is not None and y.value is not None and x.value != y.value:
            return False
    return True


def inferred_proto(model: ir.Model, *, strict: bool) -> onnx.ModelProto:
    """The model as a proto after ONNX shape inference (external weights seen as typed inputs)."""
    proto = externals_as_inputs(to_proto(model))
    return onnx.shape_inference.infer_shapes(proto, check_type=strict, strict_mode=strict, data_prop=True)


def _symbolic_infos(model: ir.Model) -> dict[str, onnx.ValueInfoProto]:
    """Types from ONNX Runtime's symbolic shape inference, which knows the com.microsoft ops (attention,
    skip-norms) that ONNX inference leaves untyped; {} where it cannot run."""
    proto = symbolic_shapes(externals_as_inputs(to_proto(model)), auto_merge=True)
    if proto is None:            # an optional second opinion; the strict check still decides
        return {}
    return {vi.name: vi for vi in (*proto.graph.value_info, *proto.graph.output)}


def infer_types(model: ir.Model) -> None:
    """Fill missing types and shapes of the main graph's values from ONNX shape inference (and, for
    values it leaves untyped behind ops outside the ONNX domain, ONNX Runtime's symbolic inference). With
    nothing to fill (every value typed and shaped, as after a first operation) no inference runs: on a
    large graph it is most of an operation's time (a 32k-node extract: 6 of 10.6 s)."""
    if all(v.type is not None and v.shape is not None for v in main_values(model.graph).values()):
        return
    try:
        proto = inferred_proto(model, strict=False)
    except Exception:  # inference failing here is reported by the final strict check
        return
    infos = {vi.name: vi for vi in (*proto.graph.value_info, *proto.graph.output, *proto.graph.input)}
    values = main_values(model.graph)
    untyped = [n for n, v in values.items() if v.type is None and not _typed(infos.get(n))]
    if untyped and any(n.domain not in ("", "ai.onnx") for n in model.graph):
        extra = _symbolic_infos(model)
        infos.update({n: extra[n] for n in untyped if _typed(extra.get(n))})
    for name, v in values.items():
        vi = infos.get(name)
        if vi is None or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if v.type is None and tt.elem_type:
            v.type = ir.TensorType(ir.DataType(tt.elem_type))
        if v.shape is None and tt.HasField("shape"):
            v.shape = ir.Shape([d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                for d in tt.shape.dim])


def _typed(vi: onnx.ValueInfoProto | None) -> bool:
    return vi is not None and vi.type.HasField("tensor_type") and bool(vi.type.tensor_type.elem_type)


def check_acyclic(model: ir.Model, op: EditOp) -> None:
    """A graph edit must leave a DAG: the sort fails on a cycle, and the edit is refused."""
    try:
        model.graph.sort()
    except ValueError:
        raise EditError(f"{op.where()} creates a cycle in the graph (a node would depend on its own output); "
                        "nothing was written") from None


def remove_dead(graph: ir.Graph) -> int:
    """Remove nodes no graph output needs and initializers nothing reads (main graph); how many nodes went.

    One scan of the graph finds the nodes nothing reads; removing one can only make its producers dead,
    so only they are looked at again (a worklist): linear in the graph, where a rescan per removed layer
    made removing a long chain quadratic (8,000 nodes: 73 s)."""
    outputs = set(graph.outputs)

    def dead(n: ir.Node) -> bool:
        return all(not o.uses() and o not in outputs for o in n.outputs)

    todo = [n for n in graph if dead(n)]
    gone: set[ir.Node] = set()
    while todo:
        n = todo.pop()
        if n in gone or n.graph is not graph:
            continue
        producers = {v.producer() for v in n.inputs if v is not None and v.producer() is not None}
        graph.remove(n, safe=True)
        gone.add(n)
        todo.extend(p for p in producers if p.graph is graph and p not in gone and dead(p))
    for name, v in list(graph.initializers.items()):
        if not v.uses() and not v.is_graph_output() and not v.is_graph_input():
            del graph.initializers[name]
    return len(gone)


def node_names(graph: ir.Graph) -> set[str]:
    return {n.name for n in ir.traversal.RecursiveGraphIterator(graph) if n.name}
