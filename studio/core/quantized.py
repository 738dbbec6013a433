"""Which ops only a quantized model has, and which of them a model holds: precision's "auto", the INT8
passes and the accuracy comparison all ask "is this model quantized already?" the same way."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from onnx import ModelProto

from studio.core.protowalk import iter_nodes

__all__ = ["QUANT_OPS", "quantization_ops", "quantized_text"]

# Ops that only appear in quantized models (QDQ, QOperator, ORT's dynamic and weight-only quantizers).
QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
                       "ConvInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul", "QGemm", "QLinearAdd",
                       "QLinearMul", "QAttention", "MatMulIntegerToFloat", "QLinearGlobalAveragePool",
                       "QLinearConcat", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool",
                       "DynamicQuantizeLSTM", "QEmbedLayerNormalization", "MatMulNBits"})


def quantization_ops(model: ModelProto | Iterable[str]) -> dict[str, int]:
    """op type -> count of the quantization ops in ``model`` (subgraphs included) or in a list of op types;
    empty when the model is not quantized."""
    types = (ref.node.op_type for ref in iter_nodes(model)) if isinstance(model, ModelProto) else model
    return dict(sorted(Counter(t for t in types if t in QUANT_OPS).items()))


def quantized_text(ops: dict[str, int], limit: int = 4) -> str:
    """'ConvInteger ×21, DynamicQuantizeLSTM ×1, ...': what makes a model quantized, for a message."""
    shown = [f"{op} ×{n}" for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]
    return ", ".join(shown) + (", ..." if len(ops) > limit else "")
