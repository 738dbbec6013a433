"""fuse-conv-scale: Conv(Mul(x, s), W) with a per-input-channel constant ``s``  ⇒  Conv(x, W·s).

A scale on the Conv's input (a model's ``x / std`` preprocessing, a learned channel
scale) multiplies each input channel; the Conv is linear in each channel, so the
scale moves into the weights: ``W'[m, j] = W[m, j] · s[c(m, j)]`` (``c`` the input
channel of weight slot ``j`` in output ``m``'s group). Zero padding stays zero either
way, so padding is no obstacle; a ``Div`` by ``s`` is a ``Mul`` by ``1/s``.

Hand-written: onnxscript's ``AffineConvFusion`` takes only a scalar scale and only
unpadded 1×1 Convs. Applies only where the weights are used by this Conv alone (no
copy, so the file does not grow), ``s`` is finite and non-zero, of the weights'
float dtype, and the Mul feeds nothing else.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.ir_helpers import const_tensor, graphs_of, int_attr, is_onnx_op, rank_of
from passes.base import register
from passes.ir_helpers import has_ops, inferred_shapes, drop_orphaned_initializers

_FLOATS = (np.float32, np.float64, np.float16)


def _channel_scale(scale: np.ndarray, x_rank: int | None, channels: int) -> np.ndarray | None:
    """The scale as one value per input channel, or None when it is not per-channel."""
    if scale.ndim == 0 or scale.size == 1:
        return np.full(channels, scale.reshape(()), scale.dtype)
    if x_rank is None or scale.ndim > x_rank:
        return None
    full = (1,) * (x_rank - scale.ndim) + scale.shape
    if any(d != 1 for i, d in enumerate(full) if i != 1) or full[1] != channels:
        return None
    return scale.reshape(channels)


def _ends_gelu(data: ir.Value | None) -> bool:
    """``data`` is x·(1 + erf(x/√2)), the GELU body whose final ·0.5 ORT's GeluFusion anchors on: moving that
    0.5 into the Conv costs ORT its Gelu kernel (PP-OCRv6 tiny rec: 10 Gelu fusions lost, 97 -> 147 nodes)."""
    prod = data.producer() if data is not None else None
    if prod is None or not is_onnx_op(prod, "Mul"):
        return False
    for v in prod.inputs:
        add = v.producer() if v is not None else None
        if add is not None and is_onnx_op(add, "Add") and any(
                u is not None and u.producer() is not None and is_onnx_op(u.producer(), "Erf") for u in add.inputs):
            return True
    return False


def _candidate(conv: ir.Node) -> tuple[ir.Node, ir.Value, np.ndarray] | None:
    """(Mul/Div node, its non-constant input, per-channel factor) for a Conv that can take it."""
    x = conv.inputs[0]
    prod = x.producer() if x is not None else None
    if prod is None or not is_onnx_op(prod, "Mul", "Div") or prod.graph is not conv.graph:
        return None
    if len(x.uses()) != 1 or x.is_graph_output():
        return None
    sides = (1, 0) if prod.op_type == "Mul" else (1,)
    w = const_tensor(conv.inputs[1]) if len(conv.inputs) > 1 else None
    wv = conv.inputs[1] if len(conv.inputs) > 1 else None
    if w is None or not wv.is_initializer() or len(wv.uses()) != 1 or wv.is_graph_output() or len(w.shape) < 3:
        return None
    warr = w.numpy()
    group = int_attr(conv, "group", 1) or 1
    channels = warr.shape[1] * group
    for side in sides:
        t = const_tensor(prod.inputs[side])
        data = prod.inputs[1 - side]
        if t is None or data is None:
            continue
        if _ends_gelu(data):
            return None
        s = t.numpy()
        if s.dtype != warr.dtype or s.dtype.type not in _FLOATS or not np.all(np.isfinite(s)) or np.any(s == 0):
            return None
        if s.size > 1 and not (rank_of(data) is not None and rank_of(data) == rank_of(x)
                               and data.shape[1] == channels):
            return None                   # the scale could broadcast data's channels: not a plain rescale
        per = _channel_scale(s, rank_of(x), channels)
        if per is None:
            return None
        if prod.op_type == "Div":
            per = (1 / per.astype(np.float64)).astype(s.dtype)
        return prod, data, per
    return None


def _scaled_weights(w: np.ndarray, per: np.ndarray, group: int) -> np.ndarray:
    out_ch, in_per_group = w.shape[0], w.shape[1]
    per_group_out = out_ch // group
    factor = np.empty((out_ch, in_per_group), w.dtype)
    for m in range(out_ch):
        g = m // per_group_out
        factor[m] = per[g * in_per_group:(g + 1) * in_per_group]
    return (w * factor.reshape(factor.shape + (1,) * (w.ndim - 2))).astype(w.dtype)


@register
class FuseConvScale(StudioPass):
    """Conv(Mul(x, s)) / Conv(Div(x, s)) with s per input channel  ⇒  Conv(x) with rescaled weights."""

    name = "fuse-conv-scale"
    summary = "Move a constant per-channel scale (Mul or Div) on a Conv's input into the Conv's weights."

    def call(self, model: ir.Model) -> PassResult:
        fused: list[str] = []
        if not has_ops(model, "Conv"):
            return result(model, [])
        with inferred_shapes(model):
            for graph in list(graphs_of(model)):
                fused += _fuse_graph(graph)
        changes = [Change("fused", tuple(fused), "per-channel input scale moved into the Conv weights")] if fused \
            else []
        return result(model, changes, scales_fused=len(fused))


def _fuse_graph(graph) -> list[str]:
    """Fuse every candidate Conv of one graph; the labels of the removed Mul/Div nodes."""
    fused: list[str] = []
    for conv in list(graph):
        if not is_onnx_op(conv, "Conv") or not conv.inputs or conv.inputs[0] is None:
            continue
        try:
            found = _candidate(conv)
        except Exception:          # a malformed node is simply left alone
            found = None
        if found is None:
            continue
        prod, data, per = found
        wv = conv.inputs[1]
        group = int_attr(conv, "group", 1) or 1
        if wv.const_value.shape[0] % group:
            continue
        wv.const_value = ir.tensor(_scaled_weights(wv.const_value.numpy(), per, group), name=wv.name)
        label = node_label(prod)
        inputs = [v for v in prod.inputs if v is not None]
        conv.replace_input_with(0, data)
        graph.remove(prod, safe=True)
        drop_orphaned_initializers(inputs)
        fused.append(label)
    return fused
