"""eliminate-identity: nodes that forward their input unchanged  ⇒  removed.

Each rule is one small function that says whether a node is a no-op (why not,
otherwise); removal goes through ``ir_helpers.forward``, which keeps the
interface exactly (a graph output keeps its name, dtype and declared shape; a
graph input, an initializer or an outer-scope value is never renamed).

Hand-written rather than onnx-ir's IdentityEliminationPass or the onnxscript
no-op rules because those rename a value that is also another graph output
or comes from an outer scope (the If-subgraph breakage seen with onnxsim),
and take a declared output shape from the input.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.ir_helpers import (
    can_forward,
    const_array,
    dtype_of,
    forward,
    graphs_of,
    int_attr,
    ints_attr,
    is_onnx_op,
    opset_version,
    rank_of,
    unused,
)
from passes.base import register
from passes.ir_helpers import inferred_shapes

INT_MAX_ENDS = 2**31 - 1    # exporters write INT_MAX / INT64_MAX for "to the end"

# A rule: (node, opset) -> the reason it is a no-op, or None.
Rule = Callable[[ir.Node, int], "str | None"]


def _identity(node: ir.Node, opset: int) -> str | None:
    return "Identity"


def _dropout(node: ir.Node, opset: int) -> str | None:
    if opset < 7:
        return None                      # is_test semantics before opset 7
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        mode = const_array(node.inputs[2])
        if mode is None or bool(np.any(mode)):
            return None
    if len(node.outputs) > 1 and not unused(node.outputs[1]):
        return None                      # the mask is used
    return "Dropout in inference"


def _cast(node: ir.Node, opset: int) -> str | None:
    to = int_attr(node, "to")
    src = dtype_of(node.inputs[0])
    if to is None or src is None or int(src) != to:
        return None
    return f"Cast to the same type ({src.name.lower()})"


def _cast_like(node: ir.Node, opset: int) -> str | None:
    a, b = dtype_of(node.inputs[0]), dtype_of(node.inputs[1]) if len(node.inputs) > 1 else None
    return f"CastLike to the same type ({a.name.lower()})" if a is not None and a == b else None


def _reshape(node: ir.Node, opset: int) -> str | None:
    x = node.inputs[0]
    shape = const_array(node.inputs[1], 64) if len(node.inputs) > 1 else None
    if opset < 5:
        return None
    rank = rank_of(x)
    if shape is None or rank is None or shape.ndim != 1 or len(shape) != rank:
        return None
    allowzero = int_attr(node, "allowzero", 0) == 1
    dims = list(x.shape)
    free = 0
    for i, s in enumerate(int(v) for v in shape):
        if s == 0 and not allowzero:
            continue                     # copies the input dim
        if s == -1:
            free += 1
            continue
        if not (isinstance(dims[i], int) and dims[i] == s):
            return None
    if free > 1:
        return None
    if free == 1 and 0 in shape and allowzero:
        return None
    return "Reshape to the same shape"


def _transpose(node: ir.Node, opset: int) -> str | None:
    perm = ints_attr(node, "perm")
    rank = rank_of(node.inputs[0])
    if perm is None:
        return "Transpose of a rank-0/1 tensor" if rank is not None and rank <= 1 else None
    return "Transpose with the identity permutation" if perm == list(range(len(perm))) else None


def _pad(node: ir.Node, opset: int) -> str | None:
    pads = ints_attr(node, "pads") if opset < 11 else (
        const_array(node.inputs[1], 256) if len(node.inputs) > 1 else None)
    if pads is None or len(pads) == 0 or np.any(np.asarray(pads) != 0):
        return None
    return "Pad by zero"


def _slice(node: ir.Node, opset: int) -> str | None:
    x = node.inputs[0]
    rank = rank_of(x)
    if rank is None:
        return None
    if opset < 10:
        starts, ends, axes, steps = ints_attr(node, "starts"), ints_attr(node, "ends"), ints_attr(node, "axes"), None
    else:
        ins = list(node.inputs) + [None] * 5
        starts, ends = const_array(ins[1], 64), const_array(ins[2], 64)
        axes = const_array(ins[3], 64) if ins[3] is not None else None
        steps = const_array(ins[4], 64) if ins[4] is not None else None
        if (ins[3] is not None and axes is None) or (ins[4] is not None and steps is None):
            return None
    if starts is None or ends is None:
        return None
    starts, ends = [int(v) for v in np.ravel(starts)], [int(v) for v in np.ravel(ends)]
    axes_l = [int(v) for v in np.ravel(axes)] if axes is not None else list(range(len(starts)))
    steps_l = [int(v) for v in np.ravel(steps)] if steps is not None else [1] * len(starts)
    if not (len(starts) == len(ends) == len(axes_l) == len(steps_l)):
        return None
    for s, e, a, st in zip(starts, ends, axes_l, steps_l):
        if not -rank <= a < rank or st != 1:
            return None
        dim = x.shape[a % rank]
        known = isinstance(dim, int)
        if not (s == 0 or (known and s <= -dim)):
            return None
        if not (e >= INT_MAX_ENDS or (known and e >= dim)):
            return None
    return "Slice of the whole tensor"


def _expand(node: ir.Node, opset: int) -> str | None:
    x = node.inputs[0]
    shape = const_array(node.inputs[1], 64) if len(node.inputs) > 1 else None
    rank = rank_of(x)
    if shape is None or rank is None or shape.ndim != 1 or len(shape) > rank:
        return None
    dims = list(x.shape)[rank - len(shape):]
    for d, s in zip(dims, (int(v) for v in shape)):
        if s != 1 and not (isinstance(d, int) and d == s):
            return None
    return "Expand that broadcasts nothing"


def _no_broadcast(x: ir.Value, c: np.ndarray) -> bool:
    """Whether ``x op c`` has exactly x's shape (c adds no dims and stretches none)."""
    rank = rank_of(x)
    if rank is None or c.ndim > rank:
        return False
    dims = list(x.shape)[rank - c.ndim:]
    return all(cd == 1 or (isinstance(xd, int) and xd == cd) for xd, cd in zip(dims, c.shape))


def binary_neutral_side(node: ir.Node, exact_zero_sign: bool = False) -> tuple[str, int] | None:
    """x*1, 1*x, x/1 (exact for every value); x+0, 0+x, x-0. For floats, x + (+0.0)
    turns a -0.0 into +0.0 (they compare equal; only 1/x or atan2 could tell), so
    with ``exact_zero_sign`` only the zero whose sign keeps every value is removed."""
    if len(node.inputs) != 2 or node.op_type not in ("Mul", "Div", "Add", "Sub"):
        return None
    op = node.op_type
    for const_side in (1, 0) if op in ("Mul", "Add") else (1,):
        c = const_array(node.inputs[const_side], 4096)
        x = node.inputs[1 - const_side]
        if c is None or x is None or dtype_of(x) is None or c.dtype != dtype_of(x).numpy():
            continue
        if not _no_broadcast(x, c):
            continue
        keep = 1 - const_side
        if op in ("Mul", "Div") and np.all(c == 1):
            return f"{op} by one", keep
        if op in ("Add", "Sub") and np.all(c == 0):
            if not np.issubdtype(c.dtype, np.floating):
                return f"{op} of zero", keep
            exact = np.all(np.signbit(c)) if op == "Add" else not np.any(np.signbit(c))
            if exact:
                return f"{op} of a zero that keeps every value exactly", keep
            if not exact_zero_sign:
                return f"{op} of zero (a -0.0 result becomes +0.0, which compares equal)", keep
    return None


def _binary_neutral(node: ir.Node, opset: int, exact_zero_sign: bool = False) -> str | None:
    found = binary_neutral_side(node, exact_zero_sign)
    return found[0] if found else None


def empty_concat_inputs(node: ir.Node) -> list[int]:
    """Inputs of a Concat that are statically empty along its axis (a dim 0 there, as exporters
    write for a zero-length padding: ``ConstantOfShape([b, 0, 1])``); they add nothing."""
    axis = int_attr(node, "axis", None)
    out = []
    for i, v in enumerate(node.inputs):
        rank = rank_of(v)
        if v is None or rank is None or axis is None or not -rank <= axis < rank:
            continue
        d = v.shape[axis % rank]
        if isinstance(d, int) and d == 0:
            out.append(i)
    return out


def _concat_keep(node: ir.Node) -> int | None:
    """The one input a Concat forwards when every other is empty along the axis."""
    empty = empty_concat_inputs(node)
    if not empty or len(node.inputs) - len(empty) != 1:
        return None
    return next(i for i in range(len(node.inputs)) if i not in empty)


def _concat(node: ir.Node, opset: int) -> str | None:
    return "Concat with empty tensors beside one input" if _concat_keep(node) is not None else None


def _drop_empty_concat_inputs(node: ir.Node) -> bool:
    """Concat(a, empty, b)  ⇒  Concat(a, b): the empty inputs' producers become dead code."""
    if not is_onnx_op(node) or node.op_type != "Concat":
        return False
    empty = empty_concat_inputs(node)
    keep = [v for i, v in enumerate(node.inputs) if i not in empty]
    if not empty or len(keep) < 2:
        return False
    for i, v in enumerate(keep):
        node.replace_input_with(i, v)
    node.resize_inputs(len(keep))
    return True


# Optional inputs whose omitted default is all zeros: recurrent ops' initial state
# (initial_h, LSTM's initial_c) and LSTM's peepholes. PyTorch writes the zero state
# as Shape -> Gather -> Concat -> ConstantOfShape(0) -> Slice per layer.
ZERO_DEFAULT_INPUTS: dict[str, tuple[int, ...]] = {"RNN": (5,), "GRU": (5,), "LSTM": (5, 6, 7)}
# ONNX Runtime's dynamic quantizer writes LSTM as com.microsoft DynamicQuantizeLSTM: LSTM's first eight
# inputs (the same zero defaults), then the weights' scales and zero points, which stay where they are.
CONTRIB_ZERO_DEFAULT_INPUTS: dict[str, tuple[int, ...]] = {"DynamicQuantizeLSTM": (5, 6, 7)}
# Ops that keep an all-zero tensor all zero whatever their other inputs (shape/index only).
_ZERO_KEEPING = frozenset({"Slice", "Expand", "Reshape", "Unsqueeze", "Squeeze", "Identity", "Transpose",
                           "Cast", "Tile", "Gather", "Flatten"})


def known_zero(value: ir.Value | None, depth: int = 8) -> bool:
    """Whether every element of ``value`` is zero by construction: a zero constant, a
    ConstantOfShape of zero (its shape may be dynamic) or a shape-only op of one."""
    if value is None or depth <= 0 or value.is_graph_input():
        return False
    c = const_array(value, 1 << 16)
    if c is not None:
        return c.size > 0 and not np.any(c)
    node = value.producer()
    if node is None or not is_onnx_op(node):
        return False
    if node.op_type == "ConstantOfShape":
        attr = node.attributes.get("value")
        if attr is None:
            return True                          # the default fill is float 0
        try:
            return not np.any(attr.value.numpy())
        except Exception:
            return False
    if node.op_type == "Concat":
        return all(known_zero(v, depth - 1) for v in node.inputs)
    if node.op_type in _ZERO_KEEPING and node.inputs:
        return known_zero(node.inputs[0], depth - 1)
    return False


def _drop_zero_default_inputs(node: ir.Node) -> bool:
    """LSTM(x, W, R, B, seq, zeros, zeros)  ⇒  LSTM(x, W, R, B, seq): the omitted state is zero
    by the spec (and by com.microsoft DynamicQuantizeLSTM's); the zero state's producers become dead code."""
    if is_onnx_op(node):
        optional = ZERO_DEFAULT_INPUTS.get(node.op_type, ())
    else:
        optional = CONTRIB_ZERO_DEFAULT_INPUTS.get(node.op_type, ()) if node.domain == "com.microsoft" else ()
    if not optional:
        return False
    inputs = list(node.inputs)
    drop = [i for i in optional if i < len(inputs) and known_zero(inputs[i])]
    if not drop:
        return False
    for i in drop:
        node.replace_input_with(i, None)
    keep = len(inputs)
    while keep and node.inputs[keep - 1] is None:
        keep -= 1
    node.resize_inputs(keep)
    return True


RULES: dict[str, Rule] = {
    "Identity": _identity,            # y = x
    "Dropout": _dropout,              # inference: y = x, mask unused
    "Cast": _cast,                    # Cast(x: T, to=T) = x
    "CastLike": _cast_like,
    "Reshape": _reshape,              # to the shape x already has
    "Transpose": _transpose,          # perm = 0..n-1
    "Pad": _pad,                      # pads all zero
    "Slice": _slice,                  # start 0, end >= dim, step 1 on every sliced axis
    "Concat": _concat,                # one input beside tensors empty along the axis
    "Expand": _expand,                # broadcast changes nothing
    "Mul": _binary_neutral,           # x * 1
    "Div": _binary_neutral,           # x / 1
    "Add": _binary_neutral,           # x + 0 (option exact_zero_sign: floats only x + -0.0)
    "Sub": _binary_neutral,           # x - 0
}


@register
class EliminateIdentity(StudioPass):
    """Identity, inference Dropout, same-type Cast, Reshape/Transpose/Pad/Slice/Expand that do nothing, x*1,
    Concat inputs empty along the axis  ⇒  removed."""

    name = "eliminate-identity"
    summary = "Remove nodes that pass their input through unchanged (Identity, Dropout, no-op Cast/Reshape/...)."

    def call(self, model: ir.Model) -> PassResult:
        by_reason: dict[str, list[str]] = {}
        kept: dict[str, str] = {}          # node label -> why it stays
        exact = bool(self.options.get("exact_zero_sign", False))
        with inferred_shapes(model):
            for _ in range(4):            # removing one node can make the next one a no-op
                changed = False
                for graph in list(graphs_of(model)):
                    opset = opset_version(model)
                    for node in list(graph):
                        if _drop_empty_concat_inputs(node):
                            by_reason.setdefault("empty Concat inputs dropped", []).append(node_label(node))
                            changed = True
                        if _drop_zero_default_inputs(node):
                            by_reason.setdefault("zero initial state dropped (the default)", []).append(
                                node_label(node))
                            changed = True
                        reason = self._reason(node, opset, exact)
                        if reason is None:
                            continue
                        side = binary_neutral_side(node, exact) if RULES[node.op_type] is _binary_neutral else None
                        index = _concat_keep(node) if node.op_type == "Concat" else (side[1] if side else 0)
                        keep = node.inputs[index] if index is not None else None
                        drop = node.outputs[0]
                        why_not = can_forward(node, keep, drop) if keep is not None else "no input"
                        if why_not:
                            kept[node_label(node)] = f"{reason} kept: {why_not}"
                            continue
                        label = node_label(node)
                        forward(node, keep, drop)
                        by_reason.setdefault(reason, []).append(label)
                        changed = True
                if not changed:
                    break
        changes = [Change("removed", tuple(nodes), reason) for reason, nodes in by_reason.items()]
        reasons: dict[str, int] = {}
        for why in kept.values():
            reasons[why] = reasons.get(why, 0) + 1
        notes = tuple(f"{why} (×{n})" for why, n in reasons.items())
        return result(model, changes, notes=notes, nodes_removed=sum(len(n) for n in by_reason.values()))

    @staticmethod
    def _reason(node: ir.Node, opset: int, exact_zero_sign: bool = False) -> str | None:
        if not is_onnx_op(node) or node.op_type not in RULES or not node.inputs or node.inputs[0] is None:
            return None
        if not node.outputs or node.outputs[0] is None:
            return None
        try:
            if RULES[node.op_type] is _binary_neutral:
                return _binary_neutral(node, opset, exact_zero_sign)
            return RULES[node.op_type](node, opset)
        except Exception:   # a malformed node is simply not a no-op
            return None
