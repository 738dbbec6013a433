"""fuse-conv-affine: Mul(Conv(x, W, b), s) / Add(Conv(x, W, b), t) per output channel  ⇒  Conv(x, W', b').

Paddle2onnx writes a folded BatchNormalization as a Mul and an Add after the Conv (PP-OCR's recogniser
has 28 Conv → Mul → Add chains); neither onnxsim nor onnxslim folds them. A Conv is linear in its
weights, per output channel ``m``: ``s[m]·(W[m]∗x + b[m]) = (s[m]·W[m])∗x + s[m]·b[m]`` and
``(W[m]∗x + b[m]) + t[m] = W[m]∗x + (b[m] + t[m])``, so both move into the weights and the bias (a
Sub of a constant is an Add of its negation). Applies only where the constant is one value per output
channel (or one value) of the weights' float dtype and finite, the weights (and bias) are used by this
Conv alone (no copy, so the file does not grow), and the Conv's output feeds only that Mul/Add/Sub.
A ConvTranspose is linear the same way; its output channel ``m`` of group ``g`` is ``W[g·C_in/G:(g+1)·C_in/G,
m mod (C_out/G)]`` (W is [C_in, C_out/G, k...]): paddle2onnx writes its bias as an Add after it (PP-OCRv6's
detector head).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.ir_helpers import (
    can_forward,
    const_tensor,
    forward,
    free_initializer_name,
    graphs_of,
    int_attr,
    is_onnx_op,
)
from passes.base import register

_FLOATS = (np.float32, np.float64, np.float16)


def per_out_channel(arr: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """``arr`` as one value per output channel of a rank-``rank`` Conv output, or None when it would
    broadcast any other way (or change the output's shape)."""
    if arr.ndim > rank:
        return None
    if arr.size == 1:
        return np.full(channels, arr.reshape(()), arr.dtype)
    full = (1,) * (rank - arr.ndim) + arr.shape
    if full[1] != channels or any(d != 1 for i, d in enumerate(full) if i != 1):
        return None
    return arr.reshape(channels)


def _own_initializer(value: ir.Value | None, conv: ir.Node) -> bool:
    return (value is not None and value.is_initializer() and not value.is_graph_input() and not value.is_graph_output()
            and value.const_value is not None and len(value.uses()) == 1 and value.uses()[0][0] is conv)


def _step(conv: ir.Node) -> ir.Node | None:
    """Fold the one Mul/Add/Sub after ``conv`` into it when it can; the folded node, or None."""
    w = conv.inputs[1] if len(conv.inputs) > 1 else None
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    if not _own_initializer(w, conv) or (b is not None and not _own_initializer(b, conv)):
        return None
    out = conv.outputs[0]
    if out.is_graph_output() or len(out.uses()) != 1:
        return None
    nxt = out.uses()[0][0]
    if not is_onnx_op(nxt, "Mul", "Add", "Sub") or nxt.graph is not conv.graph or len(nxt.inputs) != 2:
        return None
    if nxt.op_type == "Sub" and nxt.inputs[0] is not out:
        return None                                  # t - conv: a negation too; left alone
    other = nxt.inputs[1] if nxt.inputs[0] is out else nxt.inputs[0]
    tensor = const_tensor(other)
    warr = w.const_value.numpy()
    if tensor is None or warr.dtype.type not in _FLOATS or warr.ndim < 3:
        return None
    c = tensor.numpy()
    if c.dtype != warr.dtype or not np.all(np.isfinite(c)):
        return None
    transposed = conv.op_type == "ConvTranspose"     # W is [C_in, C_out / group, k...]
    group = int_attr(conv, "group", 1) or 1
    channels = warr.shape[1] * group if transposed else warr.shape[0]
    if transposed and warr.shape[0] % group:
        return None
    per = per_out_channel(c, warr.ndim, channels)
    if per is None or can_forward(nxt, out, nxt.outputs[0]) is not None:
        return None
    barr = b.const_value.numpy() if b is not None else np.zeros(channels, warr.dtype)
    if barr.shape != (channels,):
        return None
    if not isinstance(conv.graph, ir.Graph) and b is None and nxt.op_type != "Mul":
        return None                                  # a function body has no initializers to add a bias to
    if nxt.op_type == "Mul" and transposed:
        kdims = warr.shape[2:]
        grouped = warr.reshape((group, warr.shape[0] // group, warr.shape[1]) + kdims)
        scale = per.reshape((group, 1, warr.shape[1]) + (1,) * len(kdims))
        w.const_value = ir.tensor((grouped * scale).reshape(warr.shape).astype(warr.dtype), name=w.name)
        new_b = barr * per
    elif nxt.op_type == "Mul":
        w.const_value = ir.tensor((warr * per.reshape((-1,) + (1,) * (warr.ndim - 1))).astype(warr.dtype), name=w.name)
        new_b = barr * per
    else:
        new_b = barr + (per if nxt.op_type == "Add" else -per)
    if b is not None:
        b.const_value = ir.tensor(new_b.astype(warr.dtype), name=b.name)
    elif nxt.op_type != "Mul":
        name = free_initializer_name(w, f"{w.name}_bias")
        bias = ir.Value(name=name, type=w.type, shape=ir.Shape([channels]),
                        const_value=ir.tensor(new_b.astype(warr.dtype), name=name))
        conv.graph.register_initializer(bias)
        if len(conv.inputs) < 3:
            conv.resize_inputs(3)
        conv.replace_input_with(2, bias)
    if out.shape is None and nxt.outputs[0].shape is not None:
        out.shape = nxt.outputs[0].shape
    forward(nxt, out, nxt.outputs[0])
    return nxt


@register
class FuseConvAffine(StudioPass):
    """Conv/ConvTranspose → Mul/Add/Sub by a per-output-channel constant  ⇒  one node with rescaled weights and bias."""

    name = "fuse-conv-affine"
    summary = "Fold a constant per-output-channel Mul, Add or Sub after a Conv or ConvTranspose into its weights and bias."

    def call(self, model: ir.Model) -> PassResult:
        fused: list[str] = []
        for graph in list(graphs_of(model)):
            for conv in list(graph):
                if not is_onnx_op(conv, "Conv", "ConvTranspose") or conv.graph is not graph:
                    continue
                while True:
                    label = None
                    try:
                        nxt = conv.outputs[0].uses()[0][0] if len(conv.outputs[0].uses()) == 1 else None
                        label = node_label(nxt) if nxt is not None else None
                        done = _step(conv)
                    except Exception:          # a malformed node is simply left alone
                        done = None
                    if done is None:
                        break
                    fused.append(label)
        changes = [Change("fused", tuple(fused), "per-output-channel Mul/Add folded into the Conv's weights and bias")] \
            if fused else []
        return result(model, changes, affine_fused=len(fused))
