"""Which Convs/MatMuls of a produced INT8 model are still quantized, read from the model itself
(OpenVINO IR from NNCF, QDQ or QOperator ONNX from ONNX Runtime's quantizer)."""

from __future__ import annotations

import re

import onnx


def ov_quantized_layers(xml) -> dict[str, bool]:
    """Each Convolution/MatMul of an OpenVINO IR -> whether it is still quantized: a FakeQuantize on
    its activation input (through shape-only ops) and INT8 weights (not a plain float Constant)."""
    import openvino as ov

    passthrough = {"Reshape", "Squeeze", "Unsqueeze", "Transpose", "Convert"}
    out = {}
    for op in ov.Core().read_model(str(xml)).get_ordered_ops():
        if op.get_type_name() not in ("Convolution", "MatMul"):
            continue
        src = op.input_value(0).get_node()
        while src.get_type_name() in passthrough:
            src = src.input_value(0).get_node()
        weight = op.input_value(1).get_node()
        act_q = src.get_type_name() == "FakeQuantize"
        w_q = not (weight.get_type_name() == "Constant" and weight.get_output_element_type(0) == ov.Type.f32)
        assert act_q == w_q, f"{op.get_friendly_name()}: activation quantized {act_q}, weights {w_q}"
        out[op.get_friendly_name().removesuffix("/WithoutBiases")] = act_q
    return out


def onnx_quantized_layers(path) -> dict[str, bool]:
    """Each Conv/MatMul/Gemm of a QDQ (or QOperator) ONNX model -> whether it is still quantized: its
    activation and weight inputs come from DequantizeLinear, or it became a QLinear*/QGemm/*Integer op.
    Names are the source nodes' (the quantizer's ``_quant`` and ORT's ``/MatMulAddFusion`` dropped)."""
    model = onnx.load(str(path))
    producer = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for node in model.graph.node:
        if node.op_type in ("QLinearConv", "QLinearMatMul", "QGemm", "ConvInteger", "MatMulInteger"):
            out[_source_name(node.name)] = True
        elif node.op_type in ("Conv", "MatMul", "Gemm"):
            dq = [i in producer and producer[i].op_type == "DequantizeLinear" for i in node.input[:2]]
            assert dq[0] == dq[1], f"{node.name}: activation quantized {dq[0]}, weights {dq[1]}"
            out[_source_name(node.name)] = dq[0]
    return out


def _source_name(name: str) -> str:
    return re.sub(r"(_quant|/MatMulAddFusion)+$", "", name)
