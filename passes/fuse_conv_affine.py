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
detector head). A BatchNormalization the chain reaches is folded too, with fuse-conv-bn's own checks (that pass
ran first and saw an Add, not the Conv, before it).
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
from passes.fuse_conv_bn import bn_problem, ieee_problem

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


def _batchnorm_factors(bn: ir.Node, w: ir.Value, b: ir.Value | None, channels: int
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) per output channel of an inference BatchNormalization, in float64, or None where
    fuse-conv-bn would refuse it (its own checks: training mode, used statistics, IEEE problems)."""
    if bn_problem(bn, w, channels) is not None:
        return None
    params = [const_tensor(v).numpy() for v in bn.inputs[1:5]]
    if b is not None and ieee_problem(bn, w.const_value, params, b.const_value) is not None:
        return None
    gamma, beta, mean, var = (p.astype(np.float64) for p in params)
    eps = bn.attributes["epsilon"].as_float() if "epsilon" in bn.attributes else 1e-5
    scale = gamma / np.sqrt(var + eps)
    return scale, beta - mean * scale


def _factors(nxt: ir.Node, out: ir.Value, w: ir.Value, b: ir.Value | None, warr: np.ndarray, channels: int
             ) -> tuple[np.ndarray | None, np.ndarray | None] | None:
    """(scale, shift) per output channel that ``nxt`` applies to the conv output ``out`` (None: that part is
    the identity), or None when it is not a per-output-channel affine of constants."""
    if is_onnx_op(nxt, "BatchNormalization") and nxt.inputs[0] is out:
        # after fuse-conv-bn has run: paddle2onnx writes a ConvTranspose's bias as an Add before its BN
        return _batchnorm_factors(nxt, w, b, channels)
    if not is_onnx_op(nxt, "Mul", "Add", "Sub") or len(nxt.inputs) != 2:
        return None
    if nxt.op_type == "Sub" and nxt.inputs[0] is not out:
        return None                                  # t - conv: a negation too; left alone
    other = nxt.inputs[1] if nxt.inputs[0] is out else nxt.inputs[0]
    tensor = const_tensor(other)
    if tensor is None:
        return None
    c = tensor.numpy()
    if c.dtype != warr.dtype or not np.all(np.isfinite(c)):
        return None
    per = per_out_channel(c, warr.ndim, channels)
    if per is None:
        return None
    per = per.astype(np.float64)       # exact: one float64 product or sum of two values, rounded once on store
    return (per, None) if nxt.op_type == "Mul" else (None, per if nxt.op_type == "Add" else -per)


def _step(conv: ir.Node) -> ir.Node | None:
    """Fold the one Mul/Add/Sub or BatchNormalization after ``conv`` into it when it can; the folded node, or None."""
    w = conv.inputs[1] if len(conv.inputs) > 1 else None
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    if not _own_initializer(w, conv) or (b is not None and not _own_initializer(b, conv)):
        return None
    out = conv.outputs[0]
    if out.is_graph_output() or len(out.uses()) != 1:
        return None
    nxt = out.uses()[0][0]
    if nxt.graph is not conv.graph:
        return None
    warr = w.const_value.numpy()
    if warr.dtype.type not in _FLOATS or warr.ndim < 3:
        return None
    transposed = conv.op_type == "ConvTranspose"     # W is [C_in, C_out / group, k...]
    group = int_attr(conv, "group", 1) or 1
    channels = warr.shape[1] * group if transposed else warr.shape[0]
    if transposed and warr.shape[0] % group:
        return None
    factors = _factors(nxt, out, w, b, warr, channels)
    if factors is None or can_forward(nxt, out, nxt.outputs[0]) is not None:
        return None
    scale, shift = factors
    barr = b.const_value.numpy() if b is not None else np.zeros(channels, warr.dtype)
    if barr.shape != (channels,):
        return None
    if not isinstance(conv.graph, ir.Graph) and b is None and shift is not None:
        return None                                  # a function body has no initializers to add a bias to
    new_b = barr.astype(np.float64)
    if scale is not None and transposed:
        kdims = warr.shape[2:]
        grouped = warr.reshape((group, warr.shape[0] // group, warr.shape[1]) + kdims).astype(np.float64)
        factor = scale.reshape((group, 1, warr.shape[1]) + (1,) * len(kdims))
        w.const_value = ir.tensor((grouped * factor).reshape(warr.shape).astype(warr.dtype), name=w.name)
    elif scale is not None:
        scaled = warr.astype(np.float64) * scale.reshape((-1,) + (1,) * (warr.ndim - 1))
        w.const_value = ir.tensor(scaled.astype(warr.dtype), name=w.name)
    if scale is not None:
        new_b = new_b * scale
    if shift is not None:
        new_b = new_b + shift
    if b is not None:
        b.const_value = ir.tensor(new_b.astype(warr.dtype), name=b.name)
    elif shift is not None:
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
    summary = ("Fold a constant per-output-channel Mul, Add or Sub (or a BatchNormalization that follows one) after a "
               "Conv or ConvTranspose into its weights and bias.")

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
        changes = [Change("fused", tuple(fused), "per-output-channel Mul/Add/BatchNormalization folded into the "
                          "Conv's weights and bias")] \
            if fused else []
        return result(model, changes, affine_fused=len(fused))
