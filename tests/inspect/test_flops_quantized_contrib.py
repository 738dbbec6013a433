"""FLOPs of onnxruntime's dynamic INT8 contrib ops: quantize_dynamic turns an LSTM into com.microsoft
DynamicQuantizeLSTM (W [dirs, input, 4*hidden], transposed from ONNX's LSTM) and a MatMul into
DynamicQuantizeMatMul; both counted 0, unflagged. Corpus ddddocr_common_old_int8 at image_width=160: MACs
485.23 M, its bidirectional LSTM (seq 20, 512 -> 512: 83.89 M MACs by hand) left out. Oracle: MACs by hand;
plain onnxruntime runs the model (a valid file)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from studio import api

SEQ, BATCH, INPUT, HIDDEN, DIRS = 5, 2, 8, 6, 2


def _model(path):
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.integers(-20, 20, (DIRS, INPUT, 4 * HIDDEN)).astype(np.int8), "w"),
             nh.from_array(rng.integers(-20, 20, (DIRS, HIDDEN, 4 * HIDDEN)).astype(np.int8), "r"),
             nh.from_array(np.zeros((DIRS, 8 * HIDDEN), np.float32), "b"),
             nh.from_array(np.full((DIRS,), 0.01, np.float32), "w_scale"),
             nh.from_array(np.zeros((DIRS,), np.int8), "w_zp"),
             nh.from_array(np.full((DIRS,), 0.01, np.float32), "r_scale"),
             nh.from_array(np.zeros((DIRS,), np.int8), "r_zp"),
             nh.from_array(rng.integers(-20, 20, (2 * HIDDEN, 3)).astype(np.int8), "m"),
             nh.from_array(np.array(0.01, np.float32), "m_scale"),
             nh.from_array(np.array(0, np.int8), "m_zp")]
    nodes = [h.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "", "", "", "w_scale", "w_zp", "r_scale",
                                                 "r_zp"], ["y"], domain="com.microsoft", hidden_size=HIDDEN,
                         direction="bidirectional"),
             h.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
             h.make_node("Reshape", ["yt", "flat"], ["y2"]),
             h.make_node("DynamicQuantizeMatMul", ["y2", "m", "m_scale", "m_zp"], ["z"], domain="com.microsoft")]
    inits.append(nh.from_array(np.array([SEQ, BATCH, 2 * HIDDEN], np.int64), "flat"))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [SEQ, BATCH, INPUT])],
                     [h.make_tensor_value_info("z", T.FLOAT, [SEQ, BATCH, 3])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, path)


def test_dynamic_quantize_lstm_and_matmul_are_counted(tmp_path):
    path = tmp_path / "dq.onnx"
    _model(path)
    x = np.random.default_rng(1).standard_normal((SEQ, BATCH, INPUT)).astype(np.float32)
    (z,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert z.shape == (SEQ, BATCH, 3)
    s = api.inspect(api.load(path))
    by = {n.op_type: n for n in s.nodes}
    lstm_macs = DIRS * SEQ * BATCH * 4 * HIDDEN * (INPUT + HIDDEN)      # 6,720
    matmul_macs = SEQ * BATCH * 3 * 2 * HIDDEN                            # 360
    assert by["DynamicQuantizeLSTM"].macs == lstm_macs
    assert by["DynamicQuantizeMatMul"].macs == matmul_macs
    assert s.flops.macs == lstm_macs + matmul_macs
