"""Small questions passes ask of the IR: is this value a constant (and which),
is its shape static, which opset does the model use, and how to drop a node
that forwards its input without changing the model's interface.

The interface rules live here once, because every "remove a no-op" pass must
get them right: a graph output keeps its name, dtype and declared shape; a
graph input or initializer is never renamed; a value from an outer scope is
never renamed from inside a subgraph.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import onnx_ir as ir

log = logging.getLogger(__name__)

ONNX_DOMAINS = ("", "ai.onnx")


def is_onnx_op(node: ir.Node, *op_types: str) -> bool:
    return node.domain in ONNX_DOMAINS and (not op_types or node.op_type in op_types)


def has_ops(model: ir.Model, *op_types: str) -> bool:
    """Whether any graph of the model (subgraphs and functions included) has one of
    these ONNX ops: rewrite passes skip models where their root op never occurs."""
    wanted = set(op_types)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type in wanted and node.domain in ONNX_DOMAINS:
            return True
    return any(n.op_type in wanted and n.domain in ONNX_DOMAINS
               for fn in model.functions.values() for n in ir.traversal.RecursiveGraphIterator(fn))


def opset_version(model: ir.Model, domain: str = "") -> int:
    """The model's opset for ``domain`` ("" and "ai.onnx" are the same domain); 0 when absent."""
    imports = model.opset_imports
    if domain in ONNX_DOMAINS:
        return int(imports.get("", imports.get("ai.onnx", 0)) or 0)
    return int(imports.get(domain, 0) or 0)


def graphs_of(model: ir.Model) -> Iterator[ir.Graph | ir.Function]:
    """The main graph, every subgraph, and every model-local function."""
    yield from model.graphs()
    for fn in model.functions.values():
        yield fn
        for node in ir.traversal.RecursiveGraphIterator(fn):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    yield attr.value
                elif attr.type == ir.AttributeType.GRAPHS:
                    yield from attr.value


def const_tensor(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The value's tensor when it is a true constant: a non-overridable initializer
    or a Constant node's output. An initializer that is also a graph input can be
    fed at run time, so it is not a constant."""
    if value is None:
        return None
    if value.is_graph_input():
        return None
    if value.const_value is not None and (value.is_initializer() or value.producer() is None
                                          or is_onnx_op(value.producer(), "Constant")):
        return value.const_value
    producer = value.producer()
    if producer is not None and is_onnx_op(producer, "Constant"):
        return ir.convenience.get_const_tensor(value)
    return None


def const_array(value: ir.Value | None, max_elements: int | None = None) -> np.ndarray | None:
    """numpy value of a constant (see ``const_tensor``); None when not constant or too large."""
    tensor = const_tensor(value)
    if tensor is None:
        return None
    if max_elements is not None and tensor.size > max_elements:
        return None
    try:
        return tensor.numpy()
    except Exception:   # unsupported dtype, unreadable external data
        return None


def static_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    """The value's shape when every dim is a known integer."""
    if value is None or value.shape is None:
        return None
    dims = []
    for d in value.shape:
        if not isinstance(d, int):
            return None
        dims.append(d)
    return tuple(dims)


def dtype_of(value: ir.Value | None) -> ir.DataType | None:
    if value is None or value.type is None:
        return None
    try:
        return value.type.dtype
    except Exception:
        return None


def rank_of(value: ir.Value | None) -> int | None:
    if value is None or value.shape is None:
        return None
    return len(value.shape)


def int_attr(node: ir.Node, name: str, default: int | None = None) -> int | None:
    attr = node.attributes.get(name)
    if attr is None:
        return default
    try:
        return attr.as_int()
    except Exception:
        return default


def ints_attr(node: ir.Node, name: str) -> list[int] | None:
    attr = node.attributes.get(name)
    if attr is None:
        return None
    try:
        return list(attr.as_ints())
    except Exception:
        return None


def owning_graph(value: ir.Value) -> ir.Graph | ir.Function | None:
    producer = value.producer()
    return producer.graph if producer is not None else value.graph


def unused(value: ir.Value | None) -> bool:
    return value is None or (not value.uses() and not value.is_graph_output())


def can_replace(keep: ir.Value, drop: ir.Value, graph: ir.Graph | ir.Function | None) -> str | None:
    """Why every use of ``drop`` (a value of ``graph``) cannot go to ``keep``; None when it can.

    ``drop`` may be a graph output only when ``keep`` can take its name: produced by a
    node of the same graph and not itself a graph input, initializer or output.
    """
    if not drop.is_graph_output():
        return None
    producer = keep.producer()
    if keep.is_graph_input() or keep.is_initializer():
        return "it links a graph input or initializer to a graph output"
    if keep.is_graph_output():
        return "both values are graph outputs"
    if producer is None or producer.graph is not graph:
        return "the input comes from an outer scope"
    return None


def replace_value(keep: ir.Value, drop: ir.Value) -> None:
    """Send every use of ``drop`` to ``keep`` (check ``can_replace`` first). When
    ``drop`` is a graph output, ``keep`` takes over its name, dtype and declared
    shape, so the interface stays exactly as declared."""
    if drop.is_graph_output():
        name, type_, shape = drop.name, drop.type, drop.shape
        ir.convenience.replace_all_uses_with(drop, keep, replace_graph_outputs=True)
        drop.name = None
        keep.name = name
        keep.type = type_
        keep.shape = shape
    else:
        if keep.shape is None and drop.shape is not None:
            keep.shape = drop.shape
        ir.convenience.replace_all_uses_with(drop, keep)


def rewire_inputs(node: ir.Node, new_inputs: list[ir.Value | None]) -> None:
    """Set ``node``'s inputs to ``new_inputs`` (same length) in one step.

    onnx-ir's ``replace_input_with`` rebuilds the whole input tuple for every input it
    replaces, so re-pointing all inputs of a 50,000-input Concat one by one is quadratic.
    For a few changed inputs the public call is used; for many, the tuple is rebuilt once
    and the use lists are updated the way ``replace_input_with`` updates them."""
    old = tuple(node.inputs)
    changed = [i for i, (a, b) in enumerate(zip(old, new_inputs)) if a is not b]
    if len(changed) <= 16 or not hasattr(node, "_inputs") or not all(
            hasattr(v, "_remove_usage") for v in (*old, *new_inputs) if v is not None):
        for i in changed:
            node.replace_input_with(i, new_inputs[i])
        return
    node._inputs = tuple(new_inputs)                  # noqa: SLF001 - see docstring
    for i in changed:
        if old[i] is not None:
            old[i]._remove_usage(node, i)             # noqa: SLF001
        if new_inputs[i] is not None:
            new_inputs[i]._add_usage(node, i)         # noqa: SLF001


def can_forward(node: ir.Node, keep: ir.Value, drop: ir.Value) -> str | None:
    """Why ``node`` cannot be removed by sending its output ``drop`` to ``keep``."""
    if any(o is not drop and not unused(o) for o in node.outputs):
        return "another output of the node is used"
    return can_replace(keep, drop, node.graph)


def forward(node: ir.Node, keep: ir.Value, drop: ir.Value) -> None:
    """Replace every use of ``drop`` by ``keep`` and remove ``node`` (check ``can_forward`` first)."""
    graph = node.graph
    assert graph is not None
    inputs = [v for v in node.inputs if v is not None]
    replace_value(keep, drop)
    graph.remove(node, safe=True)
    drop_orphaned_initializers(inputs)


def drop_orphaned_initializers(values: list[ir.Value]) -> int:
    """Remove initializers among ``values`` that nothing uses any more (the shape or
    pads constant of a removed no-op); returns how many."""
    n = 0
    for v in values:
        graph = v.graph
        if (v.is_initializer() and not v.uses() and not v.is_graph_output() and not v.is_graph_input()
                and isinstance(graph, ir.Graph) and graph.initializers.get(v.name) is v):
            graph.initializers.pop(v.name)
            n += 1
    return n


def all_values(model: ir.Model) -> Iterator[ir.Value]:
    for g in graphs_of(model):
        yield from g.inputs
        if isinstance(g, ir.Graph):
            yield from g.initializers.values()
        for node in g:
            yield from node.outputs


@contextmanager
def preserved_annotations(model: ir.Model) -> Iterator[None]:
    """Put declared dtypes/shapes back as they were after the block, so analysis
    helpers (shape inference, onnxscript's constant propagation) never add or
    change value_info as a side effect: a wrong inferred shape must not reach the
    file, and the file does not grow. Values that became graph outputs in the
    block keep what the pass gave them."""
    before = {v: (v.type, v.shape, v.is_graph_output()) for v in all_values(model)}
    try:
        yield
    finally:
        for v, (type_, shape, was_output) in before.items():
            if v.is_graph_output() and not was_output:
                continue
            v.type = type_
            v.shape = shape


@contextmanager
def inferred_shapes(model: ir.Model) -> Iterator[None]:
    """ONNX shape inference for the duration of a pass's analysis (see ``preserved_annotations``)."""
    from onnx_ir.passes.common import ShapeInferencePass

    def infer() -> None:
        try:
            ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model)
        except Exception as exc:  # inference is a help, never a requirement
            log.debug("shape inference failed: %s", exc)

    with preserved_annotations(model):
        infer()
        try:
            given = _reshape_ranks(model)
        except Exception as exc:  # the same: a help
            log.debug("reshape ranks failed: %s", exc)
            given = 0
        if given:                      # then once more, so the ranks reach the nodes after those Reshapes
            infer()
        yield


MAX_RANK = 64          # beyond any real tensor; a Reshape target longer than this is not given a rank


def _reshape_ranks(model: ir.Model) -> int:
    """Give a Reshape whose output ONNX inference left without a rank the rank its shape input's length says
    (the spec: the output has as many dims as the shape tensor has values); how many were given.

    ONNX's inference gives up on a Reshape whose computed target holds an unknown and a -1 (paddle2onnx's
    ``Concat(Slice(Shape(x)), [-1])`` after a -1 batch dim): every op after it, LayerNorm's axes included,
    then has no rank (PP-OCRv3's SVTR recognizer: 5 LayerNorms left unfused)."""
    given = 0
    for g in graphs_of(model):
        for node in g:
            if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
                continue
            out, target = node.outputs[0], node.inputs[1]
            if out.shape is not None or target is None or target.shape is None or len(target.shape) != 1:
                continue
            n = target.shape[0]
            if isinstance(n, int) and 0 <= n <= MAX_RANK:          # a hostile file may declare any length
                dims = _reshape_dims(node, n)
                out.shape = ir.Shape(dims if dims is not None else [None] * n)
                given += 1
    return given


def _ints(value: ir.Value | None) -> list[int] | None:
    """A constant 1-D int tensor's values (an initializer or a Constant node's), else None."""
    if value is None:
        return None
    tensor = value.const_value
    if tensor is None and value.producer() is not None and value.producer().op_type == "Constant":
        attr = value.producer().attributes.get("value")
        tensor = attr.as_tensor() if attr is not None else None
    if tensor is None:
        return None
    return [int(v) for v in np.asarray(tensor.numpy()).reshape(-1)]


def _shape_values(value: ir.Value) -> list | None:
    """The values of a shape tensor built the way exporters build a Reshape's target, each an int, a
    SymbolicDim or None: constants, ``Shape(v)`` (with start/end), ``Slice(Shape(v), starts, ends, [0])``
    with step 1, and ``Concat`` of those along axis 0. None for anything else."""
    const = _ints(value)
    if const is not None:
        return list(const)
    node = value.producer()
    if node is None:
        return None
    if node.op_type == "Concat" and node.attributes.get_int("axis", 0) == 0:
        parts = [_shape_values(v) for v in node.inputs if v is not None]
        return None if any(p is None for p in parts) else [d for p in parts for d in p]
    if node.op_type == "Shape" and node.inputs[0].shape is not None:
        dims = [None if isinstance(d, int) and d < 0 else d for d in node.inputs[0].shape.dims]   # paddle2onnx's -1
        return dims[node.attributes.get_int("start", 0):node.attributes.get_int("end", len(dims))]
    if node.op_type == "Slice" and node.inputs and node.inputs[0] is not None:
        whole = _shape_values(node.inputs[0])
        if len(node.inputs) == 1:              # Slice-1 (opset < 10): attributes
            starts, ends = node.attributes.get_ints("starts", None), node.attributes.get_ints("ends", None)
            axes, steps = list(node.attributes.get_ints("axes", [0])), [1]
        else:
            starts, ends = _ints(node.inputs[1]), _ints(node.inputs[2] if len(node.inputs) > 2 else None)
            axes = _ints(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None else [0]
            steps = _ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else [1]
        if whole is None or not starts or not ends or axes != [0] or steps != [1]:
            return None
        return whole[slice(starts[0], ends[0])]
    return None


def _reshape_dims(node: ir.Node, rank: int) -> list | None:
    """A Reshape's output dims from its target's values where they are known: a positive value as is, 0 as
    the input's dim (without allowzero), a SymbolicDim as the dim it was read from, -1 solved when every
    other dim and the input are static; None for a dim not known. None when the target cannot be read."""
    wanted = _shape_values(node.inputs[1])
    if wanted is None or len(wanted) != rank:
        return None
    source = node.inputs[0].shape
    allowzero = node.attributes.get_int("allowzero", 0)
    dims: list = []
    for i, d in enumerate(wanted):
        if isinstance(d, int) and d == 0 and not allowzero:
            d = source[i] if source is not None and i < len(source) else None
        dims.append(None if isinstance(d, int) and d < 0 else d)
    if -1 in wanted and source is not None and all(isinstance(d, int) and d > 0 for d in source.dims):
        known = [d for d, w in zip(dims, wanted) if not (isinstance(w, int) and w == -1)]
        if all(isinstance(d, int) and d > 0 for d in known):
            total, rest = math.prod(source.dims), math.prod(known)             # Python ints: no overflow
            dims[wanted.index(-1)] = total // rest if rest and total % rest == 0 else None
    return [d if isinstance(d, (int, ir.SymbolicDim)) or d is None else None for d in dims]


def free_initializer_name(anchor: ir.Value, base: str) -> str:
    """``base`` or ``base_1``, ``base_2``... : a name no initializer or value of the anchor's graph uses."""
    graph = owning_graph(anchor)
    taken: set[str] = set()
    if isinstance(graph, ir.Graph):
        taken = set(graph.initializers) | {v.name for n in graph for v in n.outputs if v.name}
        taken |= {v.name for v in graph.inputs if v.name}
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    return name
