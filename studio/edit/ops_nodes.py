"""Node operations: bypass, delete (with what only it feeds), rename, attributes, insert on an
edge, rewire an input. Each is a small function over the onnx-ir model, like a pass."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
import onnx_ir as ir

from studio.core.protowalk import reachable, unique_name
from studio.edit import graph as g
from studio.edit.script import EditError, EditOp
from studio.edit.state import KEEPS, STRUCTURE, VALUES, EditState

# Ops that compute their input unchanged when input and output have the same type and shape.
IDENTITY_LIKE = frozenset({"Identity", "Dropout", "Cast", "CastLike", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                           "Expand"})


def _is_constant(v: ir.Value) -> bool:
    return v.is_initializer() or (v.producer() is not None and v.producer().op_type == "Constant")


def bypass(state: EditState, op: EditOp) -> None:
    """Delete a node, its one data input taking the place of its one used output (same type and shape)."""
    graph = state.model.graph
    n = g.node(graph, op.args["node"], op, main_only=True)
    data = [v for v in n.inputs if v is not None and not _is_constant(v)]
    present = [v for v in n.inputs if v is not None]
    if not data and len(present) == 1:
        # Identity/Cast of a weight (PyTorch exports share weights through Identity: corpus chython_rxnmap has 54):
        # its one input, constant or not, takes the output's place
        data = present
    used = [o for o in n.outputs if o.uses() or o.is_graph_output()]
    if len(data) != 1 or len(used) != 1:
        raise EditError(f"{op.where()}: node '{n.name[:80]}' ({n.op_type}) has {len(data)} data inputs and "
                        f"{len(used)} used outputs; a bypass needs one of each (use delete instead)")
    g.infer_types(state.model)
    x, y = data[0], used[0]
    same = x.dtype == y.dtype and g.same_shape(x, y)
    if not same or x.dtype is None:
        raise EditError(f"{op.where()}: cannot bypass node '{n.name[:80]}' ({n.op_type}): its input "
                        f"'{x.name[:60]}' is {g.type_text(x)} and its output '{y.name[:60]}' is {g.type_text(y)}; "
                        "a bypass needs the same type and shape")
    if y.is_graph_output():
        if x.is_graph_input() or x.is_initializer() or x.is_graph_output():
            what = "a weight" if x.is_initializer() else ("a graph input" if x.is_graph_input() else "another output")
            raise EditError(f"{op.where()}: node '{n.name[:80]}' connects {what} ('{x.name[:60]}') straight to the "
                            f"output '{y.name[:60]}'; keep it (an Identity) or remove the output instead")
        out_name = y.name
        y.replace_all_uses_with(x, replace_graph_outputs=True)
        graph.remove(n, safe=True)
        # the output keeps its name and its values: no rename to map back for verification
        if y.shape is not None:
            # the output keeps its declared shape: not a dim name inference made up inside (float[?,1] stays, not
            # float[unk__54,1]), nor no shape where inference left the inner tensor unshaped (If branches of two
            # ranks), which the full check refuses on a graph output; the shapes were checked to agree above
            x.shape = y.shape
        y.name = None
        x.name = out_name
    else:
        y.replace_all_uses_with(x)
        graph.remove(n, safe=True)
    g.remove_dead(graph)
    kind = KEEPS if n.op_type in IDENTITY_LIKE else VALUES
    state.did(kind, f"bypassed node '{n.name}' ({n.op_type})")


def delete(state: EditState, op: EditOp) -> None:
    """Delete a node and every node downstream of it; outputs they made are removed, dead code follows."""
    graph = state.model.graph
    n = g.node(graph, op.args["node"], op, main_only=True)

    def users(cur: ir.Node) -> Iterator[ir.Node]:
        for o in cur.outputs:
            for use in o.uses():
                user = use.node
                while user.graph is not graph and user.graph is not None:   # a use inside a subgraph
                    owner = getattr(user.graph, "parent", None) or _owner(graph, user.graph)
                    if owner is None:
                        break
                    user = owner
                yield user

    doomed = reachable([n], users)
    made = {o for d in doomed for o in d.outputs}
    lost = [o.name for o in graph.outputs if o in made]
    if len(lost) == len(graph.outputs):
        raise EditError(f"{op.where()}: deleting node '{n.name[:80]}' would remove every graph output; "
                        "extract the part you want instead")
    graph.outputs[:] = [o for o in graph.outputs if o not in made]
    before = len(graph)
    graph.remove(doomed, safe=True)
    g.remove_dead(graph)
    fed = before - len(doomed) - len(graph)    # nodes left with no reader: the count agrees with "Removes N nodes"
    state.did(STRUCTURE, f"deleted node '{n.name}' and {len(doomed) - 1} nodes after it"
              + (f", and {fed} nodes before it that only fed them" if fed > 0 else "")
              + (f"; outputs removed: {', '.join(lost)}" if lost else ""))


def _owner(graph: ir.Graph, sub: ir.Graph) -> ir.Node | None:
    for n in ir.traversal.RecursiveGraphIterator(graph):
        for attr in n.attributes.values():
            if attr.type == ir.AttributeType.GRAPH and attr.value is sub:
                return n
            if attr.type == ir.AttributeType.GRAPHS and any(s is sub for s in attr.value):
                return n
    return None


def rename(state: EditState, op: EditOp) -> None:
    """Rename tensors and/or nodes; every reference follows (onnx-ir values are shared by reference,
    subgraphs included)."""
    graph = state.model.graph
    values = g.all_values(graph)
    tensors: dict[str, str] = op.args.get("tensors", {})
    for old, new in tensors.items():
        if old not in values:
            raise EditError(f"{op.where()}: tensor '{old[:80]}' does not exist in the model"
                            f"{g.edit_hint(old, list(values))}")
        if (new in values and new not in tensors) or list(tensors.values()).count(new) > 1:
            raise EditError(f"{op.where()}: the new name '{new[:80]}' is already a tensor of the model")
    nodes: dict[str, str] = op.args.get("nodes", {})
    taken = g.node_names(graph)
    targets = [g.node(graph, old, op) for old in nodes]
    for new in nodes.values():
        if (new in taken and new not in nodes) or list(nodes.values()).count(new) > 1:
            raise EditError(f"{op.where()}: the new node name '{new[:80]}' is already taken")
    picked = [(values[old], new) for old, new in tensors.items()]
    for v, _ in picked:          # two steps: a swap (a->b, b->a) must not collide half-way
        v.name = f"\0{v.name}"
    for v, new in picked:
        v.name = new
    state.record_renames(dict(tensors))
    for node_, new in zip(targets, nodes.values()):
        node_.name = new
    io = [f"{old} -> {new}" for (v, new), old in zip(picked, tensors) if v.is_graph_input() or v.is_graph_output()]
    state.did(KEEPS, f"renamed {len(tensors)} tensors and {len(nodes)} nodes" + (
        f"; interface change, graph inputs/outputs renamed: {', '.join(io[:6])}" if io else ""))


def _attr(name: str, value, existing: ir.Attr | None, type_name: str | None, op: EditOp) -> ir.Attr:
    attr_type = None
    if type_name is not None:
        try:
            attr_type = ir.AttributeType[type_name.upper()]
        except KeyError:
            raise EditError(f"{op.where()}: attribute type '{type_name[:20]}' is not one of INT, FLOAT, STRING, "
                            "INTS, FLOATS, STRINGS") from None
    elif existing is not None:
        attr_type = existing.type
    if attr_type in (ir.AttributeType.FLOAT, ir.AttributeType.FLOATS):
        value = [float(x) for x in value] if isinstance(value, list) else float(value)
    try:
        return ir.convenience.convert_attribute(name, value, attr_type=attr_type)
    except (TypeError, ValueError) as exc:
        raise EditError(f"{op.where()}: value {str(value)[:60]} does not fit attribute '{name[:60]}' "
                        f"({exc})") from None


def set_attr(state: EditState, op: EditOp) -> None:
    """Set or add one attribute of a node (the existing attribute's type is kept)."""
    n = g.node(state.model.graph, op.args["node"], op)
    name = op.args["name"]
    n.attributes[name] = _attr(name, op.args["value"], n.attributes.get(name), op.args.get("type"), op)
    state.did(VALUES, f"set attribute {name} of node '{n.name}' ({n.op_type}) to {str(op.args['value'])[:60]}")


def remove_attr(state: EditState, op: EditOp) -> None:
    """Remove one attribute of a node (the op's default applies)."""
    n = g.node(state.model.graph, op.args["node"], op)
    name = op.args["name"]
    if name not in n.attributes:
        raise EditError(f"{op.where()}: node '{n.name[:80]}' has no attribute '{name[:60]}'"
                        f"{g.edit_hint(name, list(n.attributes))}")
    del n.attributes[name]
    state.did(VALUES, f"removed attribute {name} of node '{n.name}' ({n.op_type})")


def _cast_to(value, op: EditOp) -> int:
    if isinstance(value, int):
        return value
    try:
        return int(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(str(value))))
    except TypeError:
        raise EditError(f"{op.where()}: Cast 'to' must be a dtype name (float16, int64...)") from None


def insert(state: EditState, op: EditOp) -> None:
    """Insert an Identity, Cast or Transpose on a tensor, before all (or the named) consumers."""
    graph = state.model.graph
    t = g.value(graph, op.args["tensor"], op)
    op_type = op.args["op_type"]
    attrs = dict(op.args.get("attrs", {}))
    if op_type == "Cast":
        if "to" not in attrs:
            raise EditError(f"{op.where()}: a Cast needs attrs {{\"to\": \"float16\"}} (a dtype)")
        attrs["to"] = _cast_to(attrs["to"], op)
    names = op.args.get("consumers")
    if names is None:
        uses = list(t.uses())
    else:
        readers = [g.node(graph, nm, op) for nm in names]
        uses = [u for u in t.uses() if u.node in readers]
        missing = [r.name for r in readers if all(u.node is not r for u in uses)]
        if missing:
            raise EditError(f"{op.where()}: node '{missing[0][:80]}' does not read tensor '{t.name[:80]}'")
    taken = set(g.all_values(graph))
    out_name = op.args.get("output") or unique_name(taken, f"{t.name}_{op_type.lower()}")
    if op.args.get("output") and out_name in taken:
        raise EditError(f"{op.where()}: the output name '{out_name[:80]}' is already a tensor of the model")
    new = ir.Node("", op_type, [t], [_attr(k, v, None, None, op) for k, v in attrs.items()],
                  name=op.args.get("name") or unique_name(g.node_names(graph), f"{op_type}_{t.name}"))
    if op.args.get("name") and op.args["name"] in g.node_names(graph):
        raise EditError(f"{op.where()}: the node name '{op.args['name'][:80]}' is already taken")
    y = new.outputs[0]
    for u in uses:
        u.node.replace_input_with(u.idx, y)
    moved = names is None and t.is_graph_output()
    if moved:          # the graph output keeps its name, now after the new node
        for i, o in enumerate(graph.outputs):
            if o is t:
                graph.outputs[i] = y
        inner = unique_name(taken, f"{t.name}_before_{op_type.lower()}")
        old_name = t.name
        state.record_rename(old_name, inner)      # the inner tensor holds the original's values
        t.name = inner
        y.name = old_name
    else:
        y.name = out_name
    producer = t.producer()
    if producer is not None and producer.graph is graph:
        graph.insert_after(producer, new)
    else:
        graph.insert_before(next(iter(graph)), new) if len(graph) else graph.append(new)
    if t.type is not None and op_type == "Identity":
        y.type, y.shape = t.type, t.shape
    g.check_acyclic(state.model, op)
    state.did(KEEPS if op_type == "Identity" else VALUES, f"inserted {op_type} '{new.name}' on tensor '{op.args['tensor']}'")


def rewire(state: EditState, op: EditOp) -> None:
    """Connect input ``input`` of a node to another tensor (refused when that makes a cycle)."""
    graph = state.model.graph
    n = g.node(graph, op.args["node"], op)
    index = op.args["input"]
    if not 0 <= index < len(n.inputs):
        raise EditError(f"{op.where()}: node '{n.name[:80]}' ({n.op_type}) has {len(n.inputs)} inputs; "
                        f"input {index} does not exist")
    t = g.value(graph, op.args["tensor"], op)
    n.replace_input_with(index, t)
    g.check_acyclic(state.model, op)
    g.remove_dead(graph)
    state.did(VALUES, f"input {index} of node '{n.name}' now reads '{t.name}'")
