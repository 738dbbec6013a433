"""Shape vectors with dynamic dims  ⇒  constants a Reshape/Expand can read (``0`` copies a dim, ``1`` keeps one).

Exporters compute a Reshape's target from the input's own shape:
``Shape(x) → Gather → Unsqueeze → Concat → Reshape(x, ·)``. With a dynamic batch the
vector is not constant, so a constant folder keeps the whole chain. But a Reshape
(``allowzero=0``) reads ``0`` as "copy this dim of the input" and an Expand reads ``1``
as "keep this dim", so a vector whose entries are static dims (read from the
value-info / inferred shapes) or the very dims of the consumer's input at the same
position is a constant after all, and the chain becomes dead code.

Hand-written: onnxscript's folder tracks symbolic shape values but not a Gather with
a scalar index, nor Unsqueeze, and never turns a partly dynamic vector into
``0``/``1`` entries; its ``MaterializeReshapeShape`` rule and onnxslim read the
*declared output* shape instead (a wrong value_info there is baked in, and
ONNX's own inference leaves ``[batch, unk]`` for the common ``view(b, -1)``).

The tracked values are 1-D int vectors (and scalars) of at most ``MAX_ITEMS`` entries,
each a known int or a ``Dim`` (axis ``axis`` of ``value``, not static). A ``-1`` is
written only where it is the one unknown entry and every other is a static positive
int (a zero-size tensor could not resolve it otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from passes.ir_helpers import const_array, free_initializer_name, int_attr, ints_attr, is_onnx_op
from passes.base import node_label
from passes.ir_helpers import graphs_of

MAX_ITEMS = 64


@dataclass(frozen=True)
class Dim:
    """A dim that is not static: axis ``axis`` of ``value`` (``name``: its symbol, when it has one)."""

    value: ir.Value
    axis: int
    name: str | None

    def same(self, other: object) -> bool:
        if not isinstance(other, Dim):
            return False
        if other.value is self.value and other.axis == self.axis:
            return True
        return self.name is not None and self.name == other.name


@dataclass(frozen=True)
class Vector:
    items: tuple          # of Item
    scalar: bool = False  # a 0-D tensor (one item)


def dims_of(value: ir.Value | None) -> tuple | None:
    """The value's dims as items (ints where static), or None when its rank is unknown."""
    if value is None or value.shape is None:
        return None
    out = []
    for axis, d in enumerate(value.shape):
        if isinstance(d, int):
            out.append(d)
        else:
            name = getattr(d, "value", None)
            out.append(Dim(value, axis, name if isinstance(name, str) and name else None))
    return tuple(out)


def _const_vector(value: ir.Value | None) -> Vector | None:
    arr = const_array(value, MAX_ITEMS)
    if arr is None or arr.dtype.kind not in "iu" or arr.ndim > 1:
        return None
    return Vector(tuple(int(a) for a in np.ravel(arr)), scalar=arr.ndim == 0)


def _axes(node: ir.Node) -> list[int] | None:
    axes = ints_attr(node, "axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        arr = const_array(node.inputs[1], 8)
        axes = None if arr is None else [int(a) for a in np.ravel(arr)]
    return axes


def _shape(node: ir.Node, get) -> Vector | None:
    dims = dims_of(node.inputs[0])
    if dims is None:
        return None
    start, end = int_attr(node, "start", 0), int_attr(node, "end", None)
    return Vector(tuple(dims[start:end]))


def _gather(node: ir.Node, get) -> Vector | None:
    data, idx = get(node.inputs[0]), _const_vector(node.inputs[1] if len(node.inputs) > 1 else None)
    if data is None or data.scalar or idx is None or int_attr(node, "axis", 0) != 0:
        return None
    n = len(data.items)
    if any(not -n <= i < n for i in idx.items):
        return None
    return Vector(tuple(data.items[i] for i in idx.items), scalar=idx.scalar)


def _unsqueeze(node: ir.Node, get) -> Vector | None:
    data = get(node.inputs[0])
    if data is None or not data.scalar or _axes(node) not in ([0], [-1]):
        return None
    return Vector(data.items)


def _squeeze(node: ir.Node, get) -> Vector | None:
    data = get(node.inputs[0])
    if data is None or data.scalar or len(data.items) != 1 or _axes(node) not in (None, [0], [-1]):
        return None
    return Vector(data.items, scalar=True)


def _concat(node: ir.Node, get) -> Vector | None:
    if int_attr(node, "axis", None) not in (0, -1):
        return None
    parts = [get(v) for v in node.inputs]
    if any(p is None or p.scalar for p in parts):
        return None
    items = tuple(i for p in parts for i in p.items)
    return Vector(items) if len(items) <= MAX_ITEMS else None


def _same_value(node: ir.Node, get) -> Vector | None:
    """Identity, and Cast between integer types (shape values fit int32)."""
    if node.op_type == "Cast":
        to = int_attr(node, "to")
        if to not in (int(ir.DataType.INT64), int(ir.DataType.INT32)):
            return None
    return get(node.inputs[0])


def _int_op(op: str, a: int, b: int) -> int | None:
    if op == "Mul":
        return a * b
    if op == "Add":
        return a + b
    if op == "Sub":
        return a - b
    # Div: only where truncation and floor agree and nothing divides by zero
    return a // b if a >= 0 and b > 0 else None


def _arith(node: ir.Node, get) -> Vector | None:
    """Mul/Add/Sub/Div of shape values (``x.view(b, c * h, w)``): static entries are computed; a
    dynamic dim times 1 (plus or minus 0) stays that dim; any other entry with a dynamic dim is
    an opaque dim (never a copy), so the target can still take a ``-1`` there."""
    if len(node.inputs) != 2:
        return None
    a, b = get(node.inputs[0]), get(node.inputs[1])
    if a is None or b is None:
        return None
    la, lb = len(a.items), len(b.items)
    if la != lb and 1 not in (la, lb):
        return None
    n = max(la, lb)
    op = node.op_type
    items: list = []
    for i in range(n):
        x, y = a.items[i if la > 1 else 0], b.items[i if lb > 1 else 0]
        if isinstance(x, int) and isinstance(y, int):
            v = _int_op(op, x, y)
        elif isinstance(x, Dim) and isinstance(y, int) and (y == 1 if op in ("Mul", "Div") else y == 0):
            v = x
        elif isinstance(y, Dim) and isinstance(x, int) and op in ("Mul", "Add") and x == (1 if op == "Mul" else 0):
            v = y
        else:
            v = None
        items.append(Dim(node.outputs[0], i, None) if v is None else v)
    return Vector(tuple(items), scalar=a.scalar and b.scalar)


PROPAGATE: dict[str, Callable] = {
    "Shape": _shape,            # the input's dims
    "Gather": _gather,          # picked entries (scalar or 1-D constant indices, axis 0)
    "Unsqueeze": _unsqueeze,    # scalar -> [scalar]
    "Squeeze": _squeeze,        # [scalar] -> scalar
    "Concat": _concat,          # joined vectors
    "Identity": _same_value,
    "Cast": _same_value,        # to int64/int32
    "Mul": _arith, "Add": _arith, "Sub": _arith, "Div": _arith,   # shape arithmetic
}


def _reshape_target(node: ir.Node, vec: Vector) -> list[int] | None:
    """Reshape(x, vec) as a constant shape: static ints, 0 for x's own dim at the same position."""
    if int_attr(node, "allowzero", 0) != 0:
        return None
    x = dims_of(node.inputs[0])
    out: list[int | None] = []
    for i, item in enumerate(vec.items):
        mine = x[i] if x is not None and i < len(x) else None
        if isinstance(item, int):
            # a static 0 would read as "copy": only right when x's dim there is 0 too
            out.append(item if item != 0 or mine == 0 else None)
        elif isinstance(mine, Dim) and item.same(mine):
            out.append(0)
        else:
            out.append(None)
    unknown = [i for i, v in enumerate(out) if v is None]
    if len(unknown) == 1 and all(v is not None and v > 0 for i, v in enumerate(out) if i != unknown[0]):
        out[unknown[0]] = -1
    return None if any(v is None for v in out) else [int(v) for v in out]


def _expand_target(node: ir.Node, vec: Vector) -> list[int] | None:
    """Expand(x, vec) as a constant shape: static ints, 1 where the entry is x's own (aligned) dim."""
    x = dims_of(node.inputs[0])
    if x is None:
        return None
    lead = len(vec.items) - len(x)
    out = []
    for j, item in enumerate(vec.items):
        if isinstance(item, int):
            out.append(item)
            continue
        mine = x[j - lead] if j - lead >= 0 else None
        if isinstance(mine, Dim) and item.same(mine):
            out.append(1)
        else:
            return None
    return out


CONSUMERS: dict[str, Callable] = {"Reshape": _reshape_target, "Expand": _expand_target}


def _constant_input(graph, node: ir.Node, values: list[int], main: bool) -> ir.Value:
    """An int64 constant for ``node``'s shape input: an initializer in the main graph, a Constant
    node inside a subgraph (some engines refuse subgraph initializers)."""
    tensor = ir.tensor(np.asarray(values, np.int64))
    base = f"{node.inputs[1].name or node.name or 'shape'}_resolved"
    if main:
        value = ir.Value(name=free_initializer_name(node.inputs[0], base), shape=ir.Shape(tensor.shape),
                         type=ir.TensorType(ir.DataType.INT64), const_value=tensor)
        graph.register_initializer(value)
        return value
    const = ir.Node("", "Constant", [], [ir.AttrTensor("value", tensor)], num_outputs=1)   # names: the graph's
    const.outputs[0].type = ir.TensorType(ir.DataType.INT64)
    const.outputs[0].shape = ir.Shape(tensor.shape)
    graph.insert_before(node, const)
    return const.outputs[0]


def resolve_shape_vectors(model: ir.Model, allow: Callable[[ir.Node, int], bool] = lambda n, b: True) -> list[str]:
    """Rewrite every Reshape/Expand whose shape input resolves to a constant (see the module docstring);
    ``allow(node, nbytes)`` may refuse one (the size budget). Returns the rewritten nodes' labels. Run with
    shapes inferred (``ir_helpers.inferred_shapes``); leaves the dead shape chains for dead-code removal."""
    done: list[str] = []
    for graph in list(graphs_of(model)):
        known: dict[ir.Value, Vector] = {}

        def get(v: ir.Value | None) -> Vector | None:
            if v is None:
                return None
            if v in known:
                return known[v]
            return _const_vector(v)

        for node in list(graph):
            if not is_onnx_op(node) or not node.inputs or node.inputs[0] is None:
                continue
            prop = PROPAGATE.get(node.op_type)
            if prop is not None and node.outputs:
                try:
                    vec = prop(node, get)
                except Exception:     # a malformed node carries no shape value
                    vec = None
                if vec is not None:
                    known[node.outputs[0]] = vec
            consume = CONSUMERS.get(node.op_type)
            if consume is None or len(node.inputs) < 2 or node.inputs[1] is None:
                continue
            if const_array(node.inputs[1]) is not None:
                continue                      # already constant
            vec = known.get(node.inputs[1])
            if vec is None or vec.scalar:
                continue
            target = consume(node, vec)
            if target is None or not allow(node, 8 * len(target)):
                continue
            node.replace_input_with(1, _constant_input(graph, node, target, graph is model.graph))
            done.append(node_label(node))
    return done
