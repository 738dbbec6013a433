"""R45/R58: INT8 on a CPU whose uint8 x int8 kernel saturates (AVX2 without VNNI) uses 7-bit weights.

The oracle is ONNX Runtime itself, asked in the test with a QLinearMatMul (a different kernel entry
than the studio's MatMulInteger probe) whose exact integer answer is computed by hand: whatever this
CPU is, the studio's choice must follow what the engine really does here.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from passes.pipeline import run_passes
from passes.registry import make_pass
from studio.core.engines.ort_int8 import u8s8_saturates
from tests.conftest import save
from tests.passes.pass_helpers import mlp


def _ort_saturates_qlinear() -> bool:
    k = 128
    a = np.full((2, k), 255, np.uint8)
    b = np.full((k, 8), 127, np.int8)
    one = numpy_helper.from_array
    graph = helper.make_graph(
        [helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])], "q",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 8])],
        [one(b, "b"), one(np.array(1.0, np.float32), "sa"), one(np.array(0, np.uint8), "za"),
         one(np.array(1.0, np.float32), "sb"), one(np.array(0, np.int8), "zb"),
         # output scale chosen so the exact sum 255*127*128 = 4145280 maps to 255 exactly
         one(np.array(255 * 127 * k / 255.0, np.float32), "sy"), one(np.array(0, np.uint8), "zy")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    return bool((got != 255).any())


def test_probe_agrees_with_the_engine_on_this_cpu():
    assert u8s8_saturates() == _ort_saturates_qlinear()


def _mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 32)) / 4).astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((32, 8)) / 4).astype(np.float32), "w1")]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"], name="mm0"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w1"], ["y"], name="mm1")]
    return mlp(nodes, inits, 32, 8)


def test_static_int8_weights_are_seven_bit_exactly_when_the_kernel_saturates(tmp_path):
    src = save(_mlp(), tmp_path / "mlp.onnx")
    r = run_passes(src, [make_pass("quantize-int8-static", config="qdq-u8s8", target_cosine=0.5, budget_s=0.5)], tmp_path / "q" / "m.onnx")
    rec = r.records[0]
    assert rec.status == "changed", rec.message
    saturates = _ort_saturates_qlinear()
    assert rec.details["chosen"]["name"] == "qdq-u8s8" and rec.details["chosen"]["excluded"] == []
    assert ("reduce_range" in rec.details["chosen"]["description"]) == saturates
    out = onnx.load(str(r.output))
    weights = [numpy_helper.to_array(t) for t in out.graph.initializer if t.data_type == TensorProto.INT8 and len(t.dims) == 2]
    assert len(weights) == 2                                       # both MatMul weights quantized
    peak = max(int(np.abs(w.astype(np.int32)).max()) for w in weights)
    assert (peak <= 64) == saturates, peak                          # 7-bit range where it saturates, full 8-bit elsewhere
