"""fuse-conv-bn: Conv/ConvTranspose/Gemm/MatMul → BatchNormalization  ⇒  one node with rescaled weights.

The Conv, ConvTranspose and Gemm rules are onnxscript's
(``rules.common._fuse_batchnorm``); this module adds the checks a deployment
tool needs on top of them (training-mode or multi-output BatchNormalization,
``spatial=0``, mixed dtypes, channel-count mismatches are left alone, with the
reason), refuses where the folded weights cannot give the same IEEE results
(scale 0, variance + epsilon <= 0, NaN/Inf parameters, overflow; see
``ieee_problem``) and a MatMul rule (2-D MatMul → Gemm with folded weights and bias).
Every removed BatchNormalization is reported with kind "fused".
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._rewrite_rule import RewriteRuleClassBase
from onnxscript.rewriter.rules.common._fuse_batchnorm import (
    FuseBatchNormIntoConv,
    FuseBatchNormIntoConvTranspose,
    FuseBatchNormIntoGemm,
)

from passes.base import PassResult, StudioPass, result
from passes.ir_helpers import const_tensor, free_initializer_name, int_attr, rank_of, unused
from passes.base import register
from passes.rewriting import changes_for, refusal_notes, rewrite_if_present

FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16)


def bn_problem(bn: ir.Node, weight: ir.Value, channels: int | None) -> str | None:
    """Why this BatchNormalization cannot be folded into the weight ``weight``."""
    if int_attr(bn, "training_mode", 0) == 1:
        return "BatchNormalization is in training mode"
    if int_attr(bn, "spatial", 1) == 0:
        return "BatchNormalization with spatial=0"
    if any(not unused(o) for o in bn.outputs[1:]):
        return "BatchNormalization's running statistics are used"
    w = const_tensor(weight)
    if w is None:
        return "the weight is not a constant initializer"
    if w.dtype not in FLOAT_TYPES:
        return f"weights of type {w.dtype.name.lower()} (only float16/32/64 are folded)"
    params = [const_tensor(v) for v in bn.inputs[1:5]]
    if any(p is None for p in params):
        return "BatchNormalization parameters are not constant"
    if any(p.dtype != w.dtype for p in params):
        return "BatchNormalization parameters and weights have different dtypes"
    if any(len(p.shape) != 1 for p in params) or len({p.shape[0] for p in params}) != 1:
        return "BatchNormalization parameters are not per-channel vectors"
    if channels is not None and params[0].shape[0] != channels:
        return f"{params[0].shape[0]} BatchNormalization channels for {channels} output channels"
    return ieee_problem(bn, w, [p.numpy() for p in params])


def ieee_problem(bn: ir.Node, w: ir.TensorProtocol, params: list[np.ndarray],
                 bias: ir.TensorProtocol | None = None) -> str | None:
    """Why folding would not give the same IEEE results, or None.

    BatchNormalization computes ``(c - mean) * s + beta`` with ``s = gamma / sqrt(var + eps)``
    on the Conv output ``c``; the fused node computes ``conv(x, W*s) + b'``. Those agree for
    every finite ``c`` and propagate NaN alike, except: ``s == 0`` (``inf * 0`` is NaN in the
    original, ``W*0`` gives a finite value once the Conv overflows), ``var + eps <= 0`` (a NaN
    scale), non-finite parameters, and scaled weights or bias that overflow the dtype."""
    eps = bn.attributes["epsilon"].as_float() if "epsilon" in bn.attributes else 1e-5
    gamma, beta, mean, var = (np.asarray(p, np.float64) for p in params)
    if not np.isfinite(eps):
        return f"BatchNormalization epsilon is {eps}"
    for label, arr in (("scale", gamma), ("bias", beta), ("mean", mean), ("variance", var)):
        if not np.all(np.isfinite(arr)):
            return f"BatchNormalization {label} holds NaN/Inf (the fused weights could not keep its results)"
    weights = w.numpy()
    if not np.all(np.isfinite(weights)):
        return "the weights hold NaN/Inf"
    if bias is not None and not np.all(np.isfinite(bias.numpy())):
        return "the bias holds NaN/Inf"
    denom = var + eps
    if np.any(denom <= 0):
        return (f"variance + epsilon <= 0 in {int(np.sum(denom <= 0))} channel(s) "
                "(BatchNormalization gives NaN there; folded weights would not)")
    if np.any(gamma == 0):
        return (f"BatchNormalization scale is 0 in {int(np.sum(gamma == 0))} channel(s): inf * 0 is NaN "
                "in the original, the folded zero weights would give a finite value")
    scale = gamma / np.sqrt(denom)
    info = np.finfo(weights.dtype)
    b = np.abs(bias.numpy().astype(np.float64)) if bias is not None else 0.0
    with np.errstate(all="ignore"):
        w_max = float(np.max(np.abs(weights.astype(np.float64)), initial=0.0)) * float(np.max(np.abs(scale)))
        b_max = float(np.max((b + np.abs(mean)) * np.abs(scale) + np.abs(beta), initial=0.0))
    if not (w_max <= float(info.max) and b_max <= float(info.max)):
        return f"the folded weights or bias would overflow {weights.dtype} (scale up to {np.max(np.abs(scale)):.3g})"
    return None


class _Checked:
    """Studio checks on top of onnxscript's BatchNormalization fusion rules."""

    def _channels(self, inbound: ir.Node, w: ir.TensorProtocol) -> int | None:
        return None

    def check(self, context, x, inbound_out, batchnorm_out) -> MatchResult:
        res = super().check(context, x, inbound_out, batchnorm_out)
        if not res:
            return res
        inbound, bn = inbound_out.producer(), batchnorm_out.producer()
        w = const_tensor(inbound.inputs[1])
        why = bn_problem(bn, inbound.inputs[1], self._channels(inbound, w) if w is not None else None)
        if why is None and len(inbound.inputs) > 2 and inbound.inputs[2] is not None:
            b = const_tensor(inbound.inputs[2])
            if b is None or b.dtype != w.dtype:
                why = "the bias is not a constant of the weights' dtype"
            else:
                why = ieee_problem(bn, w, [const_tensor(v).numpy() for v in bn.inputs[1:5]], b)
        return MatchResult().fail(why) if why else res

    def rewrite(self, op, x, inbound_out, batchnorm_out):
        """onnxscript's rewrite, computed in float64 and stored in the weights' dtype."""
        inbound, bn = inbound_out.producer(), batchnorm_out.producer()
        gamma, beta, mean, var = (v.const_value.numpy().astype(np.float64) for v in bn.inputs[1:5])
        eps = bn.attributes["epsilon"].as_float() if "epsilon" in bn.attributes else 1e-5
        w_value = inbound.inputs[1]
        weights = w_value.const_value.numpy()
        with np.errstate(all="ignore"):
            scale = gamma / np.sqrt(var + eps)
            new_w = self._scale_weights(weights.astype(np.float64), scale, inbound.attributes).astype(weights.dtype)
            attrs = dict(inbound.attributes)
            gemm_beta = attrs.pop("beta").as_float() if "beta" in attrs else 1.0
            if len(inbound.inputs) > 2 and inbound.inputs[2] is not None:
                bias, bias_name = inbound.inputs[2].const_value.numpy().astype(np.float64), inbound.inputs[2].name
            else:
                bias, bias_name = np.zeros_like(mean), _free_name(w_value, f"{w_value.name}_bias")
            new_b = ((gemm_beta * bias - mean) * scale + beta).astype(weights.dtype)
        return op.op(self.op_type, x, op.initializer(ir.tensor(new_w), name=w_value.name),
                     op.initializer(ir.tensor(new_b), name=bias_name), **attrs)


def _free_name(anchor: ir.Value, name: str) -> str:
    return free_initializer_name(anchor, name)


class ConvBN(_Checked, FuseBatchNormIntoConv):
    def _channels(self, inbound, w):
        return int(w.shape[0])


class ConvTransposeBN(_Checked, FuseBatchNormIntoConvTranspose):
    def _channels(self, inbound, w):
        return int(w.shape[1]) * (int_attr(inbound, "group", 1) or 1)


class GemmBN(_Checked, FuseBatchNormIntoGemm):
    def _channels(self, inbound, w):
        return int(w.shape[0] if int_attr(inbound, "transB", 0) else w.shape[1])


class MatMulBN(RewriteRuleClassBase):
    """BatchNormalization(MatMul(x, W)) with 2-D x and constant W  ⇒  Gemm(x, W*s, beta - mean*s)."""

    def pattern(self, op, x, w):
        return op.BatchNormalization(op.MatMul(x, w, _outputs=["mm_out"]), _allow_other_inputs=True,
                                     _outputs=["bn_out"])

    def check(self, context, x, w, mm_out, bn_out) -> MatchResult:
        res = MatchResult()
        if rank_of(x) != 2 or rank_of(w) != 2:
            return res.fail("MatMul is not 2-D (BatchNormalization's channel axis is not the weight's)")
        if not w.is_initializer() or w.is_graph_input():
            return res.fail("the MatMul weight is not a constant initializer")
        if set(w.consumers()) != {mm_out.producer()}:
            return res.fail("the MatMul weight is shared with other nodes")
        why = bn_problem(bn_out.producer(), w, int(w.const_value.shape[1]))
        return res.fail(why) if why else res

    def rewrite(self, op, x, w, mm_out, bn_out):
        bn = bn_out.producer()
        gamma, beta, mean, var = (v.const_value.numpy().astype(np.float64) for v in bn.inputs[1:5])
        eps = bn.attributes["epsilon"].as_float() if "epsilon" in bn.attributes else 1e-5
        weights = w.const_value.numpy()
        with np.errstate(all="ignore"):
            scale = gamma / np.sqrt(var + eps)
            new_w = (weights * scale[None, :]).astype(weights.dtype)
            new_b = (beta - mean * scale).astype(weights.dtype)
        bias_name = _free_name(w, f"{w.name}_bn_bias")
        return op.Gemm(x, op.initializer(ir.tensor(new_w), name=w.name),
                       op.initializer(ir.tensor(new_b), name=bias_name))


RULES = [ConvBN.rule(), ConvTransposeBN.rule(), GemmBN.rule(), MatMulBN.rule()]


@register
class FuseConvBN(StudioPass):
    """Conv/ConvTranspose/Gemm/MatMul → BatchNormalization  ⇒  one node with rescaled weights and bias."""

    name = "fuse-conv-bn"
    summary = "Fold inference BatchNormalization into the preceding Conv, ConvTranspose, Gemm or 2-D MatMul."

    def call(self, model: ir.Model) -> PassResult:
        outcome = rewrite_if_present(model, ("BatchNormalization",), lambda: [RULES])
        if outcome is None:
            return result(model, [])
        changes = changes_for(outcome, fused_ops=("BatchNormalization",))
        return result(model, changes, notes=refusal_notes(outcome),
                      batchnorms_fused=sum(a.matched_ops.count("BatchNormalization") for a in outcome.applied))
