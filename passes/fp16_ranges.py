"""Which nodes convert-fp16 keeps in float32: those whose float32 values, MEASURED on the pass's feeds, leave
float16's range.

float16 holds |x| <= 65504. A hand-written LayerNorm/RMSNorm (Pow(x - mean, 2), E[x^2] - E[x]^2), an Exp, a sum of
squares, an attention mask of -1e9 or a large activation goes past it and becomes inf, and inf - inf or 0 * inf
NaN, while every weight fits: the converter (``onnxruntime.transformers.float16``, onnxconverter-common's copy)
only clamps weights. (ONNX Runtime's CPU provider computes most float16 ops in float32 behind its own Casts, so
there the overflow shows only where a value is stored in float16, between ops it has float16 kernels for, such as
Slice and Reshape; a GPU computes every op in float16.) onnxconverter-common's ``auto_mixed_precision`` (not in
ORT's copy) bisects node sets by re-running the whole model against an output tolerance, many sessions and no
ranges, so the ranges are measured here in one run: every float tensor of the graph and of its If branches gets
``ReduceMax(Abs(x))`` as an extra output (scalars: no activation is held), and a node that reads or writes a
tensor whose measured |x| passes ``limit`` stays float32 (the converter's ``node_block_list``). The measured sets
are a sample, so ``limit`` leaves headroom below 65504.

Two repairs of the converter's Casts around blocked nodes: it appends them to the top graph even for a node in an
If branch (:func:`relocate_casts` moves each into the body that defines what it reads), and it casts each blocked
node's output to float16 and back even when the next node is blocked too, where the overflow happens anyway
(:func:`join_fp32_islands` lets float32 flow between them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from studio.core.feeds import Feeds
from studio.core.protowalk import subgraphs_of, unique_names, walk_graph

__all__ = ["FP16_MAX", "DEFAULT_LIMIT", "KeptFp32", "fp32_nodes", "measure_ranges", "out_of_range", "name_nodes",
           "relocate_casts", "join_fp32_islands", "nonfinite_outputs"]

FP16_MAX = 65504.0
# a quarter of fp16's largest: the feeds measured are a sample, real inputs may go a little further
DEFAULT_LIMIT = FP16_MAX / 4
_TAP = "fp16_range_tap_"


@dataclass(frozen=True)
class KeptFp32:
    """One node convert-fp16 keeps in float32, and why (the value it reads or writes, measured)."""

    node: str
    op: str
    reason: str

    def describe(self) -> str:
        return f"{self.node} ({self.op}): {self.reason}"


def _bodies(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for _, g in subgraphs_of(node)]


def _converted_graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """The main graph and its If/Loop/Scan bodies (what the converter converts; not the model's functions)."""
    return (ref.graph for ref in walk_graph(model.graph))


def name_nodes(model: onnx.ModelProto) -> int:
    """Name every unnamed node (``fp16_node_N``), in every graph: the converter blocks nodes by name, and
    an empty name in its list would block every unnamed node."""
    names = unique_names({n.name for g in _converted_graphs(model) for n in g.node if n.name}, "fp16_node", start=0)
    named = 0
    for g in _converted_graphs(model):
        for n in g.node:
            if not n.name:
                n.name = next(names)
                named += 1
    return named


def _float_names(graph: onnx.GraphProto) -> set[str]:
    return {vi.name for vi in (*graph.value_info, *graph.output, *graph.input)
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == TensorProto.FLOAT}


def _tap_graph(graph: onnx.GraphProto, counter: list[int]) -> list[tuple[str, str]]:
    """Add ``ReduceMax(Abs(x))`` for each float32 value ``graph`` computes, and carry its If branches' taps
    out as new If outputs; returns (scalar name here, tensor measured)."""
    floats = _float_names(graph)
    taps: list[tuple[str, str]] = []
    added: list[onnx.NodeProto] = []

    def fresh() -> str:
        counter[0] += 1
        return f"{_TAP}{counter[0]}"

    for node in list(graph.node):
        for out in node.output:
            if out and out in floats:
                a, t = fresh(), fresh()
                added += [helper.make_node("Abs", [out], [a], name=a),
                          helper.make_node("ReduceMax", [a], [t], name=t, keepdims=0)]
                taps.append((t, out))
        if node.op_type != "If":
            continue           # Loop/Scan bodies: a body output is per iteration; not measured
        branches = {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}
        if len(branches) != 2:
            continue
        inner = {k: _tap_graph(g, counter) for k, g in branches.items()}
        for side, other in (("then_branch", "else_branch"), ("else_branch", "then_branch")):
            for t, measured in inner[side]:
                zero = fresh()
                branches[other].node.append(helper.make_node(
                    "Constant", [], [zero], name=zero, value=helper.make_tensor(zero, TensorProto.FLOAT, [], [0.0])))
                branches[side].output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, []))
                branches[other].output.append(helper.make_tensor_value_info(zero, TensorProto.FLOAT, []))
                carried = fresh()
                node.output.append(carried)
                taps.append((carried, measured))
    graph.node.extend(added)
    return taps


def tapped_model(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of ``model`` with one scalar output per float32 tensor (top graph and If branches): its largest
    |x|. Types come from ONNX shape inference; a tensor it cannot type is not measured."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    try:
        copy = onnx.shape_inference.infer_shapes(copy)
    except Exception:  # noqa: BLE001 - what inference typed before it stopped is still measured
        pass
    taps = _tap_graph(copy.graph, [0])
    existing = {o.name for o in copy.graph.output}
    for t, _ in taps:
        if t not in existing:
            copy.graph.output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, []))
    return copy, dict(taps)


def measure_ranges(model: onnx.ModelProto, sets: Sequence[Feeds],
                   run: Callable[[onnx.ModelProto, Sequence[Feeds]], list[Mapping]]) -> dict[str, float]:
    """Largest |x| of each float32 tensor of ``model`` over ``sets`` (fp32, ``run``: the model's outputs on
    each set, by name). A NaN or inf the original itself computes is left out: float16 adds nothing to it
    (an attention mask of -inf), though it hides a large finite value in the same tensor."""
    tapped, taps = tapped_model(model)
    if not taps:
        raise ValueError("ONNX shape inference typed no float32 tensor of the model")
    ranges: dict[str, float] = {}
    for outputs in run(tapped, sets):
        for t, measured in taps.items():
            value = outputs.get(t)
            if value is None:
                continue
            v = float(value)
            if math.isfinite(v):
                ranges[measured] = max(ranges.get(measured, 0.0), v)
    return ranges


def out_of_range(model: onnx.ModelProto, ranges: Mapping[str, float], limit: float = DEFAULT_LIMIT) -> list[KeptFp32]:
    """Nodes (any graph) that read or write a tensor whose measured |x| passes ``limit``: in float16 it would
    be inf (or close to it, on other inputs), so they compute in float32. A value above 65504 that an If hands
    out of its branch still crosses in float16 (the pass then refuses an inf/NaN result)."""
    kept: list[KeptFp32] = []
    for g in _converted_graphs(model):
        for n in g.node:
            if _bodies(n):
                # an If/Loop only hands its bodies' values on, and the converter leaves a blocked one's bodies
                # unconverted while what they read from outside turns float16: its body nodes are judged instead
                continue
            worst = max(((ranges[v], v) for v in (*n.input, *n.output) if v in ranges), default=None)
            if worst is not None and worst[0] > limit:
                side = "writes" if worst[1] in n.output else "reads"
                kept.append(KeptFp32(n.name, n.op_type, f"{side} '{worst[1][:60]}' with |x| up to {worst[0]:.3g} "
                                                        f"(fp16 max {FP16_MAX:g})"))
    return kept


def fp32_nodes(model: onnx.ModelProto, sets: Sequence[Feeds],
               run: Callable[[onnx.ModelProto, Sequence[Feeds]], list[Mapping]],
               limit: float = DEFAULT_LIMIT) -> tuple[KeptFp32, ...]:
    """The nodes of ``model`` to keep float32 (for the converter's ``node_block_list``): every node is named
    first, in place (:func:`name_nodes`), then ranges are measured on ``sets`` and compared with ``limit``."""
    name_nodes(model)
    return tuple(out_of_range(model, measure_ranges(model, sets, run), limit)) if sets else ()


def nonfinite_outputs(reference: Sequence[Mapping], got: Sequence[Mapping]) -> str:
    """'' when ``got`` has inf/NaN only where ``reference`` has; else which outputs and how many values."""
    counts: dict[str, int] = {}
    for ref, out in zip(reference, got):
        for name, r in ref.items():
            g = out.get(name)
            r, g = np.asarray(r), np.asarray(g) if g is not None else None
            if g is None or r.dtype.kind != "f" or g.dtype.kind != "f" or g.shape != r.shape:
                continue
            n = int((~np.isfinite(g) & np.isfinite(r)).sum())
            if n:
                counts[name] = counts.get(name, 0) + n
    return ", ".join(f"'{k[:40]}': {v} value(s)" for k, v in counts.items())


def relocate_casts(model: onnx.ModelProto) -> int:
    """Move the Casts the converter appended to the top graph into the If/Loop body that defines what they
    read (it adds them there even for a blocked node inside a body); returns how many moved."""
    defined: dict[str, onnx.GraphProto] = {}
    top = model.graph

    def collect(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            for body in _bodies(node):
                for vi in body.input:
                    defined[vi.name] = body
                for t in body.initializer:
                    defined[t.name] = body
                for b in body.node:
                    for o in b.output:
                        if o:
                            defined[o] = body
                collect(body)

    collect(top)
    # Which Casts move is settled first (a Cast may read another moved Cast's output: two blocked nodes in a
    # row), then the protos change once: deleting from the top graph would detach the bodies ``defined`` holds.
    outer = {vi.name for vi in top.input} | {t.name for t in top.initializer}
    moving: dict[int, onnx.GraphProto] = {}
    while True:
        own = outer | {o for i, n in enumerate(top.node) if i not in moving for o in n.output}
        before = len(moving)
        for i, node in enumerate(top.node):
            src = node.input[0] if node.op_type == "Cast" and node.input and i not in moving else None
            if src is not None and src not in own and src in defined:
                moving[i] = defined[src]
                for o in node.output:
                    defined[o] = moving[i]
        if len(moving) == before:
            break
    own = outer | {o for i, n in enumerate(top.node) if i not in moving for o in n.output}
    gone = [k for k, vi in enumerate(top.value_info) if vi.name in defined and vi.name not in own]
    for k in gone:                 # the types the converter wrote for the moved Casts' values go with them
        defined[top.value_info[k].name].value_info.append(top.value_info[k])
    for i in sorted(moving):
        moving[i].node.append(top.node[i])
    for k in reversed(gone):
        del top.value_info[k]
    for i in sorted(moving, reverse=True):
        del top.node[i]
    moved = len(moving)
    return moved


def join_fp32_islands(model: onnx.ModelProto) -> int:
    """Let float32 values flow between two blocked nodes: the converter casts every blocked node's output to
    float16 and back to float32 for the next blocked node, so an overflowing value between two float32 nodes
    (a LayerNorm's sum of squares feeding its division) still became inf. Each of the converter's own
    ``Cast(Cast(x: float32, to=float16), to=float32)`` pairs reads ``x`` instead; returns how many."""
    graphs = list(_converted_graphs(model))
    producer = {o: n for g in graphs for n in g.node for o in n.output if o}

    def to(node: onnx.NodeProto) -> int | None:
        return next((a.i for a in node.attribute if a.name == "to"), None)

    replace: dict[str, str] = {}
    for g in graphs:
        for n in g.node:
            if n.op_type != "Cast" or not n.name.endswith("_cast_to_fp32_node") or to(n) != TensorProto.FLOAT:
                continue
            first = producer.get(n.input[0])
            if (first is not None and first.op_type == "Cast" and first.name.endswith("_cast_to_fp16_node")
                    and to(first) == TensorProto.FLOAT16):
                replace[n.output[0]] = first.input[0]
    outputs = {vi.name for g in graphs for vi in g.output}
    replace = {k: v for k, v in replace.items() if k not in outputs}
    if not replace:
        return 0
    for g in graphs:
        for n in g.node:
            for i, name in enumerate(n.input):
                if name in replace:
                    n.input[i] = replace[name]
    used = {i for g in graphs for n in g.node for i in n.input} | outputs
    for g in graphs:      # the float32 Casts now read by nothing, and float16 ones left with no reader
        dead = [k for k, n in enumerate(g.node) if n.op_type == "Cast" and n.output[0] not in used
                and n.name.endswith(("_cast_to_fp32_node", "_cast_to_fp16_node"))]
        for k in reversed(dead):
            del g.node[k]
    return len(replace)
