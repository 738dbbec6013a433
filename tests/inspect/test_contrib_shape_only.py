"""ONNX Runtime's quantized contrib ops (onnxruntime.quantization's DynamicQuantizeLSTM...) have output shapes
that follow their input shapes, like the float op they stand for: inspect measures what inference leaves open
after them by a run, instead of calling them value-dependent (oracle: plain ORT's real shapes)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from studio import api
from studio.inspect.value_dependence import value_dependent_shapes
from tests.corpus import corpus_model


def _quantized_lstm(tmp_path):
    """Code-built (labelled so): X[T, 1, 8] -> LSTM(hidden 16) -> Y, dynamically quantized by ORT's tool."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((1, 64, 8)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((1, 64, 16)).astype(np.float32), "R")
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", 1, 8])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    node = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=16)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], initializer=[w, r]),
                              opset_imports=[helper.make_opsetid("", 14)])
    src, dst = tmp_path / "lstm.onnx", tmp_path / "lstm_int8.onnx"
    onnx.save(model, str(src))
    quantize_dynamic(str(src), str(dst), op_types_to_quantize=["LSTM"], weight_type=QuantType.QInt8)
    return dst


def test_a_dynamically_quantized_lstm_output_is_measured(tmp_path):
    path = _quantized_lstm(tmp_path)
    model = onnx.load(str(path))
    assert [n.op_type for n in model.graph.node if n.domain == "com.microsoft"] == ["DynamicQuantizeLSTM"]
    assert "Y" not in value_dependent_shapes(model)                           # the mechanism
    real = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        ["Y"], {"X": np.zeros((7, 1, 8), np.float32)})[0].shape
    edges = {e.name: e.shape for e in api.inspect(api.load(path), {"T": 7}).edges}
    assert tuple(edges["Y"]) == real == (7, 1, 1, 16)


def test_ddddocr_int8_every_edge_as_ort_runs_it():
    """Real: ddddocr's old int8 OCR (a DynamicQuantizeLSTM) at 1x1x64x160, every output against plain ORT."""
    path = corpus_model("ddddocr_common_old_int8")
    model = onnx.load(str(path))
    wanted = [o for n in model.graph.node for o in n.output if o]
    have = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in wanted if n not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    real = dict(zip(names, (v.shape for v in sess.run(names, {"input1": np.zeros((1, 1, 64, 160), np.float32)}))))
    edges = {e.name: e.shape for e in api.inspect(api.load(path), {"image_width": 160}).edges}
    wrong = {n: (edges.get(n), s) for n, s in real.items() if tuple(edges.get(n) or ()) != s}
    assert not wrong, wrong
