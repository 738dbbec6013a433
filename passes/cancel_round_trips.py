"""cancel-round-trips: a pair of ops that undo each other  ⇒  removed; a lossless Cast in a chain  ⇒  skipped.

* ``Cast(Cast(x: T0, to=T1), to=T0)`` where every T0 value is exact in T1 (float→double,
  int8→int32, bool→anything...) is ``x``; ``Cast(Cast(x, T1), T2)`` with T0→T1 and T0→T2
  both exact is ``Cast(x, T2)``.
* ``Squeeze(Unsqueeze(x, a), a)`` is ``x``; so is ``Unsqueeze(Squeeze(x, a), a)`` (the
  Squeeze only runs when those dims are 1), and ``Unsqueeze(ReduceMean(x, a, keepdims=0), a)`` where the
  dims ``a`` are statically 1 (Mean/Max/Min/Sum/Prod of one value is that value). Axes are compared after normalizing
  negative ones, each against the rank it refers to.
* ``Squeeze``/``Unsqueeze`` of a ``Reshape`` to a constant shape (no ``0`` entries) is
  one Reshape to the shape with those 1-dims removed/inserted.

Hand-written: onnxscript's ``CastCast`` checks only the last two types (wrong for a
double input, which would be rounded twice) and never removes a round trip; neither
it nor onnx-ir pairs Squeeze with Unsqueeze. Removal goes through
``ir_helpers.forward``, which keeps the interface exactly.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.ir_helpers import (can_forward, const_array, dtype_of, forward, free_initializer_name, graphs_of,
                               int_attr, ints_attr, is_onnx_op, rank_of)
from passes.base import register
from passes.ir_helpers import inferred_shapes, drop_orphaned_initializers

D = ir.DataType
_FLOATS_FROM_SMALL_INTS = {D.FLOAT16, D.BFLOAT16, D.FLOAT, D.DOUBLE}
# T0 -> the types that hold every T0 value exactly.
EXACT: dict[D, frozenset] = {
    D.BOOL: frozenset({D.INT8, D.UINT8, D.INT16, D.UINT16, D.INT32, D.UINT32, D.INT64, D.UINT64,
                       *_FLOATS_FROM_SMALL_INTS}),
    D.UINT8: frozenset({D.UINT16, D.UINT32, D.UINT64, D.INT16, D.INT32, D.INT64, *_FLOATS_FROM_SMALL_INTS}),
    D.INT8: frozenset({D.INT16, D.INT32, D.INT64, *_FLOATS_FROM_SMALL_INTS}),
    D.UINT16: frozenset({D.UINT32, D.UINT64, D.INT32, D.INT64, D.FLOAT, D.DOUBLE}),
    D.INT16: frozenset({D.INT32, D.INT64, D.FLOAT, D.DOUBLE}),
    D.UINT32: frozenset({D.UINT64, D.INT64, D.DOUBLE}),
    D.INT32: frozenset({D.INT64, D.DOUBLE}),
    D.FLOAT16: frozenset({D.FLOAT, D.DOUBLE}),
    D.BFLOAT16: frozenset({D.FLOAT, D.DOUBLE}),
    D.FLOAT: frozenset({D.DOUBLE}),
}


def exact(src: D | None, dst: D | None) -> bool:
    """Whether every value of ``src`` converts to ``dst`` exactly."""
    return src is not None and dst is not None and dst in EXACT.get(src, frozenset())


def _producer(node: ir.Node, op: str) -> ir.Node | None:
    x = node.inputs[0] if node.inputs else None
    p = x.producer() if x is not None else None
    return p if p is not None and is_onnx_op(p, op) and p.graph is node.graph else None


def _axes(node: ir.Node) -> list[int] | None:
    axes = ints_attr(node, "axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        arr = const_array(node.inputs[1], 64)
        axes = None if arr is None else [int(a) for a in np.ravel(arr)]
    return axes


def _norm(axes: list[int], rank: int | None) -> frozenset | None:
    if any(a < 0 for a in axes) and rank is None:
        return None
    out = {a + rank if a < 0 else a for a in axes}
    return frozenset(out) if len(out) == len(axes) else None


def _cast_pair(node: ir.Node) -> tuple[str, ir.Value] | None:
    """(why, x) when Cast(Cast(x)) is x or Cast(x, to)."""
    inner = _producer(node, "Cast")
    if inner is None:
        return None
    x = inner.inputs[0]
    t0, t1 = dtype_of(x), D(int_attr(inner, "to", 0) or 0)
    t2 = D(int_attr(node, "to", 0) or 0)
    if not exact(t0, t1):
        return None
    if t2 == t0:
        return f"Cast {t0.name.lower()} -> {t1.name.lower()} -> back (lossless)", x
    if exact(t0, t2):
        return f"Cast {t0.name.lower()} -> {t1.name.lower()} -> {t2.name.lower()} (middle Cast lossless)", x
    return None


# A reduction over axes of length 1 returns each value itself: with keepdims=0 it is a Squeeze of them.
_SIZE_ONE_REDUCES = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd")


def _reduce_as_squeeze(node: ir.Node) -> ir.Node | None:
    """The producer of ``node``'s input when it is a keepdims=0 reduction over explicit axes that are all
    statically 1 long (an exporter's mean over a 1-wide axis: Silero VAD's output), i.e. a Squeeze."""
    inner = next((p for op in _SIZE_ONE_REDUCES if (p := _producer(node, op)) is not None), None)
    if inner is None or int_attr(inner, "keepdims", 1) != 0:
        return None
    x, axes = inner.inputs[0], _axes(inner)
    rank = rank_of(x)
    if not axes or rank is None:
        return None                      # no axes: every axis (or none, with noop_with_empty_axes)
    n = _norm(axes, rank)
    if n is None or any(not 0 <= a < rank or x.shape[a] != 1 for a in n):
        return None
    return inner


def _squeeze_pair(node: ir.Node) -> tuple[str, ir.Value] | None:
    """Squeeze(Unsqueeze(x, a), a) or Unsqueeze(Squeeze(x, a), a)  ->  x; a reduction over 1-long axes
    without keepdims counts as the Squeeze."""
    first_op = "Unsqueeze" if node.op_type == "Squeeze" else "Squeeze"
    inner = _producer(node, first_op)
    if inner is None and node.op_type == "Unsqueeze":
        inner = _reduce_as_squeeze(node)
        first_op = inner.op_type if inner is not None else first_op
    if inner is None:
        return None
    x, mid = inner.inputs[0], inner.outputs[0]
    a1, a2 = _axes(inner), _axes(node)
    if a1 is None or a2 is None:
        return None
    rank = rank_of(x)
    if node.op_type == "Squeeze":        # both refer to the unsqueezed tensor
        mid_rank = rank + len(a1) if rank is not None else rank_of(mid)
        n1, n2 = _norm(a1, mid_rank), _norm(a2, mid_rank)
    else:                                # both refer to x's rank
        n1, n2 = _norm(a1, rank), _norm(a2, rank)
    if n1 is None or n1 != n2:
        return None
    return f"{first_op} then {node.op_type} on the same axes", x


def _reshape_then_squeeze(node: ir.Node) -> list[int] | None:
    """The one Reshape target for (Un)Squeeze(Reshape(x, s), axes) with constant s without 0."""
    inner = _producer(node, "Reshape")
    if inner is None or len(inner.inputs) < 2 or int_attr(inner, "allowzero", 0):
        return None
    s = const_array(inner.inputs[1], 64)
    axes = _axes(node)
    if s is None or s.ndim != 1 or axes is None or (s == 0).any():
        return None
    dims = [int(v) for v in s]
    if node.op_type == "Squeeze":
        n = _norm(axes, len(dims))
        if n is None or any(not 0 <= a < len(dims) or dims[a] != 1 for a in n):
            return None              # a -1 there could be a 1 or not: leave it
        return [d for i, d in enumerate(dims) if i not in n]
    n = _norm(axes, len(dims) + len(axes))
    if n is None or any(not 0 <= a < len(dims) + len(axes) for a in n):
        return None
    it = iter(dims)
    return [1 if i in n else next(it) for i in range(len(dims) + len(axes))]


@register
class CancelRoundTrips(StudioPass):
    """Lossless Cast there and back, Squeeze∘Unsqueeze on the same axes  ⇒  removed; Reshape+Squeeze  ⇒  Reshape."""

    name = "cancel-round-trips"
    summary = "Remove op pairs that undo each other (lossless Cast round trips, Unsqueeze/Squeeze) and merge " \
              "a Squeeze/Unsqueeze into the Reshape before it."

    def call(self, model: ir.Model) -> PassResult:
        by_reason: dict[tuple[str, str], list[str]] = {}     # (kind, why) -> node labels
        notes: list[str] = []
        with inferred_shapes(model):
            for _ in range(4):                   # one removal can complete the next pair
                changed = False
                for graph in list(graphs_of(model)):
                    for node in list(graph):
                        if node.graph is None or not is_onnx_op(node, "Cast", "Squeeze", "Unsqueeze"):
                            continue
                        changed |= self._one(node, by_reason, notes, graph is model.graph)
                if not changed:
                    break
        changes = [Change(kind, tuple(n), why) for (kind, why), n in by_reason.items()]
        return result(model, changes, notes=notes[:10],
                      nodes_removed=sum(len(n) for (kind, _), n in by_reason.items() if kind == "removed"))

    @staticmethod
    def _one(node: ir.Node, by_reason: dict[tuple[str, str], list[str]], notes: list[str], main: bool) -> bool:
        try:
            found = _cast_pair(node) if node.op_type == "Cast" else _squeeze_pair(node)
            target = None if found or node.op_type == "Cast" else _reshape_then_squeeze(node)
        except Exception:                        # a malformed node is simply left alone
            return False
        inner = node.inputs[0].producer()
        if found is not None:
            why, x = found
            if node.op_type == "Cast" and dtype_of(x) != D(int_attr(node, "to", 0) or 0):
                node.replace_input_with(0, x)     # Cast(x, T2) directly
                if _drop_if_unused(inner):
                    by_reason.setdefault(("removed", why), []).append(node_label(inner))
                else:
                    by_reason.setdefault(("changed", why + "; the first Cast has other users"), []).append(
                        node_label(node))
                return True
            drop = node.outputs[0]
            why_not = can_forward(node, x, drop)
            if why_not:
                notes.append(f"{why} kept at {node_label(node)}: {why_not}")
                return False
            labels = [node_label(node)]
            forward(node, x, drop)
            if _drop_if_unused(inner):
                labels.append(node_label(inner))
            by_reason.setdefault(("removed", why), []).extend(labels)
            return True
        if target is not None:
            shape = ir.tensor(np.asarray(target, np.int64))
            reshape = ir.Node("", "Reshape", [inner.inputs[0], _shape_value(node, inner, shape, main)], num_outputs=1,
                              name=node.name)
            out = node.outputs[0]
            node.graph.insert_before(node, reshape)
            reshape.outputs[0].type, reshape.outputs[0].shape = out.type, out.shape
            why_not = can_forward(node, reshape.outputs[0], out)
            if why_not:
                node.graph.remove(reshape, safe=True)
                return False
            labels = [node_label(node)]
            forward(node, reshape.outputs[0], out)
            if _drop_if_unused(inner):
                labels.append(node_label(inner))
            by_reason.setdefault(("removed", f"Reshape then {node.op_type} -> one Reshape"), []).extend(labels)
            return True
        return False


def _shape_value(node: ir.Node, inner: ir.Node, shape: ir.TensorProtocol, main: bool) -> ir.Value:
    """The new shape: an initializer in the main graph, a Constant node in a subgraph."""
    graph = node.graph
    name = free_initializer_name(inner.outputs[0], f"{inner.outputs[0].name or 'reshape'}_shape")
    value = ir.Value(name=name, shape=ir.Shape(shape.shape), type=ir.TensorType(D.INT64), const_value=shape)
    if main:
        graph.register_initializer(value)
        return value
    const = ir.Node("", "Constant", [], [ir.AttrTensor("value", shape)], num_outputs=1)   # names: the graph's
    graph.insert_before(node, const)
    return const.outputs[0]


def _drop_if_unused(node: ir.Node | None) -> bool:
    if node is None or node.graph is None or any(o.uses() or o.is_graph_output() for o in node.outputs):
        return False

    inputs = [v for v in node.inputs if v is not None]
    node.graph.remove(node, safe=True)
    drop_orphaned_initializers(inputs)
    return True
