"""Facts about a model that decide how it may be exported.

* Hardware-specific layout ops: ONNX Runtime's ``ORT_ENABLE_ALL`` level writes
  NCHWc ops (domain ``com.microsoft.nchwc``) tuned to the CPU it ran on; such
  a model is labelled hardware-specific, and refused as input for OpenVINO and
  TensorRT, whose ONNX readers do not know these ops.
* Explicit quantization (QDQ): INT8 models keep Q/DQ pairs; TensorRT builds
  them strongly typed and comparisons use cosine-based criteria.
* Custom ops: domains no engine ships kernels for (TensorRT needs plugins).
"""

from __future__ import annotations

from dataclasses import dataclass

from onnx import ModelProto

from studio.core.protowalk import iter_nodes
from studio.core.types import TensorInfo, value_info

HARDWARE_SPECIFIC_DOMAINS: dict[str, str] = {
    "com.microsoft.nchwc": "NCHWc layout ops (ONNX Runtime ORT_ENABLE_ALL, tuned to one CPU's vector width)",
    "com.ms.internal.nhwc": "internal NHWC layout ops (ONNX Runtime layout transformation)",
}
_STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.training"})
_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                      "QLinearMatMul", "MatMulInteger", "ConvInteger"})


@dataclass(frozen=True)
class ModelFacts:
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    opsets: dict[str, int]
    ir_version: int
    producer: str
    hardware_specific: tuple[str, ...]      # "domain::Op" of layout ops
    quantized: bool                         # has QDQ / integer ops
    custom_ops: tuple[str, ...]             # "domain::Op" outside the standard domains
    initializers_as_inputs: int = 0         # initializers also listed as graph inputs (IR 3 style)

    @property
    def hardware_specific_reason(self) -> str | None:
        if not self.hardware_specific:
            return None
        domains = sorted({op.split("::")[0] for op in self.hardware_specific})
        kinds = "; ".join(HARDWARE_SPECIFIC_DOMAINS[d] for d in domains)
        return (f"the model contains {len(self.hardware_specific)} hardware-specific op(s) "
                f"({', '.join(sorted(set(self.hardware_specific))[:4])}): {kinds}")

    def to_dict(self) -> dict:
        return {"inputs": [i.to_dict() for i in self.inputs], "outputs": [o.to_dict() for o in self.outputs],
                "opsets": dict(self.opsets), "ir_version": self.ir_version, "producer": self.producer,
                "hardware_specific": list(self.hardware_specific), "quantized": self.quantized,
                "custom_ops": list(self.custom_ops)}


def model_facts(model: ModelProto) -> ModelFacts:
    init = {t.name for t in model.graph.initializer}
    inputs = tuple(value_info(v) for v in model.graph.input if v.name not in init)
    outputs = tuple(value_info(v) for v in model.graph.output)
    hw: list[str] = []
    custom: list[str] = []
    quantized = False
    local_functions = {(f.domain, f.name) for f in model.functions}
    for ref in iter_nodes(model):
        n = ref.node
        key = f"{n.domain or 'ai.onnx'}::{n.op_type}"
        if n.domain in HARDWARE_SPECIFIC_DOMAINS:
            hw.append(key)
        elif (n.domain not in _STANDARD_DOMAINS and n.domain != "com.microsoft"
              and (n.domain, n.op_type) not in local_functions):
            custom.append(key)
        if n.op_type in _QDQ_OPS or n.op_type.startswith("QLinear"):
            quantized = True
    opsets = {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import}
    return ModelFacts(inputs, outputs, opsets, int(model.ir_version), model.producer_name[:80], tuple(hw),
                      quantized, tuple(sorted(set(custom))),
                      sum(1 for v in model.graph.input if v.name in init))
