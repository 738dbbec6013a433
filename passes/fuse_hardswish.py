"""fuse-hardswish: x · Clip(x + 3, 0, 6) / 6  ⇒  HardSwish(x) (opset ≥ 14) or x · HardSigmoid(x) (below).

Paddle2onnx writes MobileNetV3's hard-swish as four nodes, Add(x, 3) → Clip(0, 6) → Mul(x, ·) →
Div(·, 6) (PP-OCR's detector has 24 of them, its recogniser 28), and neither onnxsim nor onnxslim
touches them. Since Clip(x + 3, 0, 6) / 6 = Clip(x / 6 + 1/2, 0, 1) = HardSigmoid(x; α = 1/6, β = 1/2)
(ONNX opset 6), the four nodes are one HardSwish where the opset has it (14) and two nodes
(HardSigmoid, Mul) below: one kernel where there were three, but on ONNX Runtime only. OpenVINO fuses
the four nodes (and HardSwish) into the Conv before them itself, and not HardSigmoid·x: PP-OCRv4's
detector compiled 409 -> 550 ops and ran 1.4x slower. So below opset 14 the pattern is left as it is
unless ``below_opset_14=hardsigmoid`` (the ort preset sets it). The Div may also come before the Mul
(x · (Clip(x + 3, 0, 6) / 6)), or be a Mul by 1/6. Applies only where every constant is one float value
(so broadcasting changes no shape), each intermediate feeds only the next node of the pattern and
none is a graph output.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.ir_helpers import const_array, drop_orphaned_initializers, graphs_of, is_onnx_op, opset_version, rank_of
from passes.base import register
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

_FLOATS = (np.float16, np.float32, np.float64)


def _is_scalar(value: ir.Value | None, target: float, like: ir.Value) -> bool:
    """``value`` is a constant holding one float equal to ``target`` whose shape broadcasts away."""
    arr = const_array(value, max_elements=1)
    if arr is None or arr.size != 1 or arr.dtype.type not in _FLOATS:
        return False
    rank = rank_of(like)
    if arr.ndim and (rank is None or arr.ndim > rank):
        return False
    return bool(np.isclose(float(arr.reshape(())), target, rtol=1e-6, atol=0.0))


def _single_use(value: ir.Value, by: ir.Node) -> bool:
    return not value.is_graph_output() and len(value.uses()) == 1 and value.uses()[0][0] is by


def _other(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """The other input of a two-input node, given one."""
    a, b = node.inputs[0], node.inputs[1]
    return b if a is value else a if b is value else None


def _clip_0_6(clip: ir.Node, opset: int) -> bool:
    if opset < 11:
        lo, hi = clip.attributes.get("min"), clip.attributes.get("max")
        return lo is not None and hi is not None and lo.value == 0.0 and hi.value == 6.0
    ins = list(clip.inputs) + [None] * (3 - len(clip.inputs))
    x = ins[0]
    return x is not None and _is_scalar(ins[1], 0.0, x) and _is_scalar(ins[2], 6.0, x)


def _divides_by_6(node: ir.Node, value: ir.Value) -> bool:
    """``node`` is Div(value, 6) or Mul(value, 1/6) (either side)."""
    if is_onnx_op(node, "Div"):
        return node.inputs[0] is value and _is_scalar(node.inputs[1], 6.0, value)
    if is_onnx_op(node, "Mul"):
        return _is_scalar(_other(node, value), 1.0 / 6.0, value)
    return False


def _match(clip: ir.Node, opset: int) -> tuple[ir.Value, list[ir.Node], ir.Node] | None:
    """(x, the pattern's nodes, its last node) around one Clip, or None."""
    if not _clip_0_6(clip, opset) or clip.inputs[0] is None:
        return None
    add = clip.inputs[0].producer()
    if add is None or not is_onnx_op(add, "Add") or add.graph is not clip.graph or len(add.inputs) != 2:
        return None
    x = next((v for v, c in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0]))
              if v is not None and _is_scalar(c, 3.0, v)), None)
    if x is None or x.dtype is None or x.dtype.numpy().type not in _FLOATS:
        return None
    if not _single_use(add.outputs[0], clip) or len(clip.outputs[0].uses()) != 1 or clip.outputs[0].is_graph_output():
        return None
    nxt = clip.outputs[0].uses()[0][0]
    if is_onnx_op(nxt, "Mul") and _other(nxt, clip.outputs[0]) is x:      # x · clip, then / 6
        mul = nxt
        if len(mul.outputs[0].uses()) != 1 or mul.outputs[0].is_graph_output():
            return None
        tail = mul.outputs[0].uses()[0][0]
        if not _divides_by_6(tail, mul.outputs[0]):
            return None
        return x, [add, clip, mul, tail], tail
    if _divides_by_6(nxt, clip.outputs[0]):                               # clip / 6, then x ·
        div = nxt
        if len(div.outputs[0].uses()) != 1 or div.outputs[0].is_graph_output():
            return None
        tail = div.outputs[0].uses()[0][0]
        if not (is_onnx_op(tail, "Mul") and _other(tail, div.outputs[0]) is x):
            return None
        return x, [add, clip, div, tail], tail
    return None


def _rewrite(graph, x: ir.Value, nodes: list[ir.Node], tail: ir.Node, opset: int) -> None:
    out = tail.outputs[0]
    if opset >= 14:
        new = [ir.Node("", "HardSwish", [x], num_outputs=1, name=tail.name)]
    else:
        hs = ir.Node("", "HardSigmoid", [x], [ir.AttrFloat32("alpha", 1.0 / 6.0), ir.AttrFloat32("beta", 0.5)],
                     num_outputs=1, name=f"{tail.name or 'hardswish'}_hardsigmoid")
        hs.outputs[0].type, hs.outputs[0].shape = x.type, x.shape
        new = [hs, ir.Node("", "Mul", [x, hs.outputs[0]], num_outputs=1, name=tail.name)]
    graph.insert_before(tail, new)
    last = new[-1].outputs[0]
    last.type, last.shape = out.type, out.shape
    if out.is_graph_output():
        name = out.name
        ir.convenience.replace_all_uses_with(out, last, replace_graph_outputs=True)
        out.name = None
        last.name = name
    else:
        ir.convenience.replace_all_uses_with(out, last)
    consts = [v for n in nodes for v in n.inputs if v is not None and v is not x]
    for n in reversed(nodes):
        graph.remove(n, safe=True)
    drop_orphaned_initializers(consts)


@register
class FuseHardSwish(StudioPass):
    """Add(x,3) → Clip(0,6) → Mul(x) → Div(6)  ⇒  HardSwish(x) (opset ≥ 14) / Mul(x, HardSigmoid(x)) below
    when asked (``below_opset_14=hardsigmoid``: faster on ONNX Runtime, slower on OpenVINO)."""

    name = "fuse-hardswish"
    summary = ("Fuse the four-node hard-swish x·Clip(x+3,0,6)/6 (paddle2onnx's MobileNetV3) into HardSwish, or "
               "HardSigmoid·x below opset 14 (option below_opset_14=hardsigmoid, ONNX Runtime only).")

    def call(self, model: ir.Model) -> PassResult:
        opset = opset_version(model)
        form = str(self.options.get("below_opset_14", "keep"))
        if form not in ("keep", "hardsigmoid"):
            raise StudioError(f"fuse-hardswish.below_opset_14 must be keep or hardsigmoid, not {form[:40]!r}",
                              code=ErrorCode.BAD_OPTION)
        fused: list[str] = []
        left = 0
        for graph in list(graphs_of(model)):
            for clip in list(graph):
                if clip.graph is not graph or not is_onnx_op(clip, "Clip"):
                    continue
                try:
                    found = _match(clip, opset)
                except Exception:      # a malformed node is simply left alone
                    found = None
                if found is None:
                    continue
                x, nodes, tail = found
                if opset < 14 and form == "keep":
                    left += 1
                    continue
                labels = [node_label(n) for n in nodes]
                _rewrite(graph, x, nodes, tail, opset)
                fused.extend(labels)
        what = "HardSwish" if opset >= 14 else "HardSigmoid(alpha=1/6, beta=1/2) * x"
        changes = [Change("fused", tuple(fused), f"x*Clip(x+3,0,6)/6 -> {what}")] if fused else []
        notes = [f"{left} hard-swish pattern(s) left as they are below opset 14: HardSigmoid*x runs faster on ONNX "
                 "Runtime only (OpenVINO fuses the four nodes into the Conv itself, not HardSigmoid*x); for ONNX "
                 "Runtime use the ort preset or fuse-hardswish.below_opset_14=hardsigmoid"] if left else []
        return result(model, changes, notes=notes, hardswish_fused=len(fused) // 4)
