"""remove-dead-guards: ``Where(IsNaN(x), c, x)``  ⇒  ``x`` where ``x`` is provably finite.

torch's dynamo exporter writes scaled-dot-product attention as ``Softmax`` then ``Where(IsNaN(p), 0, p)``: a
fully masked row (every score ``-inf``) would give NaN, and the guard turns it into zeros. When the mask bias is
a finite number (transformers' ``finfo(float32).min``, corpus minilm_l6_v2_int8) no row is ever all ``-inf``,
the guard never fires, and it costs twice: OpenVINO's attention fusion does not match through it (MiniLM-L6,
f32: 66 -> 48 Transposes, six fused attention Subgraphs; INT8 7.5 -> 6.7 ms on a 2-core VNNI EPYC), and ONNX
Runtime runs an IsNaN and a Where per head block.

A value is *finite* here when, for finite model inputs, it cannot be NaN or infinite except by overflowing
float32 (a score of 1e31 or more). One forward sweep over the nodes in order gives each value a state
(``NOT_PROVEN < FINITE < NONNEGATIVE < POSITIVE``; positive means at least some constant above zero, so
dividing by it or taking its root is safe): integer and boolean values and float model inputs (assumed finite,
the premise of every float rewrite) are finite; constants by their elements; each op by the rules of
``_STATE_RULES`` (arithmetic, MatMul, Softmax, LayerNormalization with epsilon > 0, data movement, and the
pieces of a hand-written LayerNorm or RMSNorm: a square is non-negative, a mean over static non-empty axes keeps
its input's sign, adding epsilon makes it positive, its root is positive, dividing by it is finite). Anything
else (a Log, a Div by what may be zero, a reduction over axes that may be empty, a control-flow output, a
custom op) is not proven, and its guard stays. ``Where(Not(IsNaN(x)), x, c)`` and the ``IsInf`` forms are the
same guard.

Hand-written: onnxscript's rewriter and onnxsim/onnxslim remove no guard (they have no value-range analysis);
this is a forward sweep, one pass over the nodes in order, so it scales to 10,000-node graphs.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, register, result
from passes.ir_helpers import (can_forward, const_array, const_tensor, dtype_of, forward, graphs_of, inferred_shapes,
                               is_onnx_op)

D = ir.DataType
_FLOATS = frozenset({D.FLOAT, D.DOUBLE, D.FLOAT16, D.BFLOAT16})
_NON_NUMBERS = frozenset({D.UNDEFINED, D.STRING, D.COMPLEX64, D.COMPLEX128})
NOT_PROVEN, FINITE, NONNEGATIVE, POSITIVE = 0, 1, 2, 3
_GUARDS = ("IsNaN", "IsInf")
# ops that only move or pick values: as proven as the least proven of their data inputs
_MOVES = {"Identity": None, "Reshape": (0,), "Transpose": None, "Squeeze": (0,), "Unsqueeze": (0,), "Flatten": None,
          "Expand": (0,), "Concat": None, "Slice": (0,), "Split": (0,), "Gather": (0,), "GatherElements": (0,),
          "GatherND": (0,), "Tile": (0,), "DepthToSpace": None, "SpaceToDepth": None, "Where": (1, 2),
          "Cast": None, "CastLike": (0,), "Min": None}
# finite in, finite out (barring overflow); no sign claimed
_FINITE = frozenset({"Sub", "Neg", "MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "Sin", "Cos", "Tanh", "Erf",
                     "Gelu", "Softsign", "Round", "Floor", "Ceil", "Sign", "LeakyRelu", "PRelu", "Elu", "Selu",
                     "Celu", "HardSwish", "LogSoftmax", "LayerNormalization"})
# finite in, non-negative out
_NONNEGATIVE = frozenset({"Abs", "Relu", "Sigmoid", "HardSigmoid", "Softplus", "Exp", "Softmax"})
_REDUCES = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2"})


class ValueStates:
    """Each value's state (see the module docstring), computed in one forward sweep per graph."""

    def __init__(self, model: ir.Model) -> None:
        self.main_inputs = {id(v) for v in model.graph.inputs}
        self.known: dict[int, int] = {}
        self._tensors: dict[int, int] = {}
        for graph in graphs_of(model):       # outer graphs before their bodies: outer values are known
            for node in graph:
                state = self._node(node)
                for out in node.outputs:
                    self.known[id(out)] = max(state, FINITE if _integral(out) else NOT_PROVEN)

    def __call__(self, value: ir.Value | None) -> int:
        if value is None:
            return POSITIVE                   # an absent optional input constrains nothing
        if id(value) in self.known:
            return self.known[id(value)]
        tensor = const_tensor(value)
        if tensor is not None:
            return self.tensor_state(tensor)
        if _integral(value) or id(value) in self.main_inputs:
            return FINITE                     # a float model input: assumed finite
        return NOT_PROVEN                     # an outer value of a body, an overridable initializer

    def tensor_state(self, tensor: ir.TensorProtocol) -> int:
        """A constant's state by its elements (an initializer, a Constant's or ConstantOfShape's value)."""
        key = id(tensor)
        if key not in self._tensors:
            try:
                array = np.asarray(tensor.numpy())
                if not np.issubdtype(array.dtype, np.number) or np.issubdtype(array.dtype, np.complexfloating):
                    state = FINITE if array.dtype == np.bool_ else NOT_PROVEN
                elif not np.isfinite(array).all():
                    state = NOT_PROVEN
                elif array.size and array.min() > 0:
                    state = POSITIVE
                else:
                    state = NONNEGATIVE if array.size and array.min() >= 0 else FINITE
            except Exception:  # noqa: BLE001 - unreadable or unsupported: not proven
                state = NOT_PROVEN
            self._tensors[key] = state
        return self._tensors[key]

    def _node(self, node: ir.Node) -> int:
        if node.domain not in ("", "ai.onnx"):
            return NOT_PROVEN
        if node.op_type == "Constant":
            return min((self(o) for o in node.outputs), default=NOT_PROVEN)
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            return NOT_PROVEN
        rule = _STATE_RULES.get(node.op_type)
        if rule is not None:
            return rule(self, node)
        ins = [self(v) for v in node.inputs]
        op = node.op_type
        if op in _MOVES:
            picked = _MOVES[op]
            return min((s for i, s in enumerate(ins) if picked is None or i in picked), default=NOT_PROVEN)
        if not ins or min(ins) < FINITE:
            return NOT_PROVEN
        if op in _FINITE:
            if op == "LayerNormalization" and not float(_attr(node, "epsilon", 1e-5)) > 0.0:
                return NOT_PROVEN
            return FINITE
        if op in _NONNEGATIVE:
            return NONNEGATIVE
        if op in _REDUCES and _reduces_over_nonempty(node, self):
            if op in ("ReduceSumSquare", "ReduceL2"):
                return NONNEGATIVE
            return ins[0] if op != "ReduceSum" else min(ins[0], NONNEGATIVE)
        return NOT_PROVEN


def _attr(node: ir.Node, name: str, default):
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def _add(states: ValueStates, node: ir.Node) -> int:
    """A sum of finite values is finite; of non-negatives non-negative; with one positive term positive."""
    ins = [states(v) for v in node.inputs]
    if not ins or min(ins) < FINITE:
        return NOT_PROVEN
    if min(ins) >= NONNEGATIVE:
        return POSITIVE if max(ins) == POSITIVE else NONNEGATIVE
    return FINITE


def _mul(states: ValueStates, node: ir.Node) -> int:
    """A product of finite values is finite; a square, or of non-negatives, non-negative (not positive:
    two small positives can underflow to zero)."""
    ins = [states(v) for v in node.inputs]
    if not ins or min(ins) < FINITE:
        return NOT_PROVEN
    square = len(node.inputs) == 2 and node.inputs[0] is node.inputs[1]
    return NONNEGATIVE if square or min(ins) >= NONNEGATIVE else FINITE


def _max(states: ValueStates, node: ir.Node) -> int:
    ins = [states(v) for v in node.inputs]
    return NOT_PROVEN if not ins or min(ins) < FINITE else max(ins)


def _clip(states: ValueStates, node: ir.Node) -> int:
    """At least its lower bound: positive with a positive one."""
    x = states(node.inputs[0]) if node.inputs else NOT_PROVEN
    bounds = [states(v) for v in node.inputs[1:3] if v is not None]
    if x < FINITE or any(b < FINITE for b in bounds):
        return NOT_PROVEN
    low = node.inputs[1] if len(node.inputs) > 1 else None
    return max(x, states(low)) if low is not None else x


def _pow(states: ValueStates, node: ir.Node) -> int:
    """x ** e for a constant e: an even integer power is non-negative; 0 < e <= 1 keeps a positive base
    positive (it moves values toward 1: no underflow); a fractional power needs x >= 0, a negative one x > 0."""
    x = states(node.inputs[0])
    e = const_array(node.inputs[1], 1) if len(node.inputs) > 1 else None
    if x < FINITE or e is None or e.size != 1 or not np.isfinite(e).all():
        return NOT_PROVEN
    e = float(np.ravel(e)[0])
    if e == 0:
        return POSITIVE
    if e < 0:
        return NONNEGATIVE if x == POSITIVE else NOT_PROVEN
    if e <= 1 and x == POSITIVE:
        return POSITIVE
    if e == int(e):
        return NONNEGATIVE if int(e) % 2 == 0 or x >= NONNEGATIVE else FINITE
    return NONNEGATIVE if x >= NONNEGATIVE else NOT_PROVEN


def _sqrt(states: ValueStates, node: ir.Node) -> int:
    x = states(node.inputs[0])
    return x if x >= NONNEGATIVE else NOT_PROVEN


def _reciprocal(states: ValueStates, node: ir.Node) -> int:
    return NONNEGATIVE if states(node.inputs[0]) == POSITIVE else NOT_PROVEN


def _div(states: ValueStates, node: ir.Node) -> int:
    """Finite over positive (or over a constant holding no zero) is finite."""
    a, b = states(node.inputs[0]), states(node.inputs[1])
    if a < FINITE or b < FINITE:
        return NOT_PROVEN
    if b == POSITIVE:
        return NONNEGATIVE if a >= NONNEGATIVE else FINITE
    divisor = const_array(node.inputs[1])
    return FINITE if divisor is not None and not (divisor == 0).any() else NOT_PROVEN


def _constant_of_shape(states: ValueStates, node: ir.Node) -> int:
    """Its ``value`` (one element; zeros by default) everywhere: a mask or a bias built to a computed shape."""
    value = node.attributes.get("value")
    return NONNEGATIVE if value is None else states.tensor_state(value.value)


def _trilu(states: ValueStates, node: ir.Node) -> int:
    """Its input's values and zeros (a causal mask cut from a constant matrix)."""
    return min(states(node.inputs[0]), NONNEGATIVE)


_STATE_RULES = {"ConstantOfShape": _constant_of_shape, "Trilu": _trilu, "Add": _add, "Sum": _add, "Mul": _mul, "Max": _max, "Mean": _add, "Clip": _clip, "Pow": _pow,
                "Sqrt": _sqrt, "Reciprocal": _reciprocal, "Div": _div}


def _reduces_over_nonempty(node: ir.Node, states: ValueStates) -> bool:
    """Whether every axis the reduction reads has a static length above zero (an empty mean is NaN)."""
    x = node.inputs[0]
    shape = x.shape if x is not None else None
    if shape is None:
        return False
    axes = _attr(node, "axes", None)
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        arr = const_array(node.inputs[1], 64)
        if arr is None:
            return False
        axes = [int(a) for a in np.ravel(arr)]
    rank = len(shape)
    picked = range(rank) if not axes else [a + rank if a < 0 else a for a in axes]
    return all(0 <= a < rank and isinstance(shape[a], int) and shape[a] > 0 for a in picked)


def _integral(value: ir.Value) -> bool:
    dtype = dtype_of(value)
    return dtype is not None and dtype not in _FLOATS and dtype not in _NON_NUMBERS


def guarded_value(where: ir.Node) -> tuple[str, ir.Value] | None:
    """(guard op, x) for ``Where(IsNaN(x), c, x)``, ``Where(Not(IsNaN(x)), x, c)`` or their IsInf forms."""
    if not is_onnx_op(where, "Where") or len(where.inputs) != 3:
        return None
    cond = where.inputs[0].producer() if where.inputs[0] is not None else None
    negated = cond is not None and is_onnx_op(cond, "Not")
    if negated:
        cond = cond.inputs[0].producer() if cond.inputs[0] is not None else None
    if cond is None or not is_onnx_op(cond, *_GUARDS):
        return None
    x = cond.inputs[0]
    kept = where.inputs[1] if negated else where.inputs[2]
    if x is None or kept is not x:
        return None
    return cond.op_type, x


@register
class RemoveDeadGuards(StudioPass):
    """``Where(IsNaN(x), c, x)`` (or IsInf) on a provably finite ``x``  ⇒  ``x``."""

    name = "remove-dead-guards"
    summary = ("Remove NaN/Inf guards that can never fire (torch's Where(IsNaN(Softmax)) after attention with a "
               "finite mask): they block OpenVINO's attention fusion and cost ONNX Runtime two ops per head block.")

    def call(self, model: ir.Model) -> PassResult:
        wheres = [n for g in graphs_of(model) for n in g if is_onnx_op(n, "Where")]
        found = [(n, g) for n in wheres if (g := guarded_value(n)) is not None]
        if not found:
            return result(model, [])
        with inferred_shapes(model):        # a mean's axes must be known non-empty; Where's shapes compared
            states = ValueStates(model)
            widens = {id(where): _widens(where, x) for where, (_, x) in found}
        removed: list[str] = []
        notes: list[str] = []
        for where, (guard, x) in found:
            if states(x) < FINITE:
                notes.append(f"{node_label(where)} kept: its {guard} guard's input is not proven finite")
                continue
            if widens[id(where)]:
                notes.append(f"{node_label(where)} kept: its other value may broadcast the result beyond the "
                             "guarded value's shape")
                continue
            why_not = can_forward(where, x, where.outputs[0])
            if why_not:
                notes.append(f"{node_label(where)} kept: {why_not}")
                continue
            cond = where.inputs[0].producer()
            forward(where, x, where.outputs[0])
            removed.append(node_label(where))
            removed += _drop_unused_chain(cond)
        changes = [Change("removed", tuple(removed), "NaN/Inf guard on a value proven finite")] if removed else []
        return result(model, changes, notes=notes, nodes_removed=len(removed))


def _widens(where: ir.Node, x: ir.Value) -> bool:
    """Whether the Where's output may be larger than ``x`` (its other value broadcasting it): then it is not ``x``.
    A one-element constant of no higher rank (torch's scalar 0) never widens; otherwise the inferred shapes of the
    output and of ``x`` must be known and equal."""
    other = next(v for v in where.inputs[1:] if v is not x)
    tensor = const_tensor(other)
    x_rank = len(x.shape) if x.shape is not None else None
    if tensor is not None and tensor.size == 1 and len(tensor.shape) <= (x_rank if x_rank is not None else 0):
        return False
    out = where.outputs[0].shape
    return out is None or x.shape is None or out != x.shape or any(d is None for d in out)


def _drop_unused_chain(node: ir.Node | None) -> list[str]:
    """The guard's condition (Not, then IsNaN/IsInf) once nothing reads it."""
    dropped = []
    while node is not None and node.graph is not None and not any(o.uses() or o.is_graph_output()
                                                                   for o in node.outputs):
        upstream = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
        dropped.append(node_label(node))
        node.graph.remove(node, safe=True)
        node = upstream if upstream is not None and is_onnx_op(upstream, "Not", *_GUARDS) else None
    return dropped
