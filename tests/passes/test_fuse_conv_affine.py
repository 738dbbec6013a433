"""fuse-conv-affine: a per-output-channel Mul/Add/Sub after a Conv folded into its weights and bias
(paddle2onnx's folded BatchNorm). Weights, bias and outputs worked out by hand."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from tests.passes.pass_helpers import assert_plain_ort_equal, check_applies, ops, run_one

X = np.array([[[[1.0, 2.0], [3.0, 4.0]]]], np.float32)


def _model(tail: str, *, bias: bool = True, consts: str = "", extra: str = "") -> str:
    b = ", float[2] b = {1.0, -1.0}" if bias else ""
    conv = "c = Conv(x, w, b)" if bias else "c = Conv(x, w)"
    return ('<ir_version: 8, opset_import: ["" : 12]>\n'
            f"g (float[1,1,2,2] x) => (float[1,2,2,2] y{extra and ', float[1,2,2,2] z'}) "
            f"<float[2,1,1,1] w = {{2.0, 3.0}}{b}{consts}> {{\n  {conv}\n  {tail}\n{extra}}}")


def _run(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]


def _weights(path) -> dict[str, list]:
    return {t.name: numpy_helper.to_array(t).reshape(-1).tolist() for t in onnx.load(str(path)).graph.initializer}


def test_mul_then_add_fold_into_weights_and_bias(tmp_path):
    text = _model("m = Mul(c, s)\n  y = Add(m, t)",
                  consts=", float[2,1,1] s = {10.0, 100.0}, float[1,2,1,1] t = {0.5, 0.25}")
    r = check_applies(tmp_path, text, "fuse-conv-affine", ["Conv"])
    assert r.records[0].counts["affine_fused"] == 2
    # By hand: channel 0: (2x + 1)·10 + 0.5 = 20x + 10.5; channel 1: (3x - 1)·100 + 0.25 = 300x - 99.75.
    got = _weights(r.output)
    assert got["w"] == [20.0, 300.0] and got["b"] == [10.5, -99.75]
    expected = np.stack([20 * X[0, 0] + 10.5, 300 * X[0, 0] - 99.75])[None]
    np.testing.assert_allclose(_run(r.output), expected, rtol=1e-6)


def test_sub_without_a_bias_adds_one(tmp_path):
    r = check_applies(tmp_path, _model("y = Sub(c, t)", bias=False, consts=", float[2,1,1] t = {1.0, 2.0}"),
                      "fuse-conv-affine", ["Conv"])
    biases = [v for k, v in _weights(r.output).items() if k != "w"]
    assert biases == [[-1.0, -2.0]]
    np.testing.assert_allclose(_run(r.output), np.stack([2 * X[0, 0] - 1, 3 * X[0, 0] - 2])[None], rtol=1e-6)


def test_not_per_channel_or_shared_is_left_alone(tmp_path):
    # A scale along the width axis is not per output channel.
    r = run_one(tmp_path, _model("y = Mul(c, s)", consts=", float[1,1,1,2] s = {10.0, 100.0}"), "fuse-conv-affine")
    assert r.records[0].status == "unchanged" and ops(r.output) == ["Conv", "Mul"]
    # The Conv's output also feeds another output: folding would change it.
    r = run_one(tmp_path, _model("y = Mul(c, s)", consts=", float[2,1,1] s = {10.0, 100.0}", extra="  z = Relu(c)\n"),
                "fuse-conv-affine", tag="b")
    assert r.records[0].status == "unchanged" and ops(r.output) == ["Conv", "Mul", "Relu"]


def test_convtranspose_mul_and_bias_add_fold_with_groups(tmp_path):
    """paddle2onnx's detector head: ConvTranspose then a per-channel Add (its bias); here also a per-channel Mul,
    group 2 (W is [C_in, C_out/group, k, k]: output channel m of group g scales W[g-th C_in block, m mod 3]).
    One ConvTranspose stays; plain ORT (optimizer off, and on) equals the original at two sizes."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)            # C_in 4, group 2 -> C_out 6
    s = rng.uniform(0.5, 2.0, (1, 6, 1, 1)).astype(np.float32)
    t = rng.standard_normal((1, 6, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["c"], group=2, strides=[2, 2]),
             helper.make_node("Mul", ["c", "s"], ["m"]),
             helper.make_node("Add", ["m", "t"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6, None, None])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(s, "s"),
                               numpy_helper.from_array(t, "t")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    r = check_applies(tmp_path, model, "fuse-conv-affine", ["ConvTranspose"])
    assert r.records[0].counts["affine_fused"] == 2
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    old = ort.InferenceSession(model.SerializeToString(), off, providers=["CPUExecutionProvider"])
    for opts in (off, ort.SessionOptions()):
        new = ort.InferenceSession(str(r.output), opts, providers=["CPUExecutionProvider"])
        for shape in ((1, 4, 3, 5), (2, 4, 6, 4)):
            x = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(new.run(None, {"x": x})[0], old.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_batchnorm_after_the_folded_bias_add_folds_too(tmp_path):
    """paddle2onnx's PP-OCR detector head: ConvTranspose -> Add (its bias) -> BatchNormalization -> Relu.
    fuse-conv-bn runs first and sees an Add, not the ConvTranspose, before the BatchNormalization; once the Add
    is the ConvTranspose's bias, fuse-conv-affine folds the BatchNormalization with fuse-conv-bn's own checks.
    Corpus rapidocr_ppocrv3_det kept one BatchNormalization of 49 this way. The safe preset leaves ConvTranspose
    + Relu; plain ORT (optimizer off and on) equals the original at two sizes; a training-mode statistic output
    in use is still refused."""
    from onnx import TensorProto, helper

    from studio import api

    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)            # C_in 4, group 2 -> C_out 6
    t = rng.standard_normal((1, 6, 1, 1)).astype(np.float32)
    gamma, beta, mean = (rng.standard_normal(6).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, 6).astype(np.float32)
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["c"], group=2, strides=[2, 2]),
             helper.make_node("Add", ["c", "t"], ["a"]),
             helper.make_node("BatchNormalization", ["a", "gamma", "beta", "mean", "var"], ["bn"], epsilon=1e-5),
             helper.make_node("Relu", ["bn"], ["y"])]
    inits = [numpy_helper.from_array(v, n) for v, n in ((w, "w"), (t, "t"), (gamma, "gamma"), (beta, "beta"),
                                                          (mean, "mean"), (var, "var"))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6, None, None])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    src = tmp_path / "head.onnx"
    onnx.save(model, src)
    out = tmp_path / "head.opt.onnx"
    result = api.optimize(api.load(src), preset="safe", out_path=out)
    assert result.ok, result
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["ConvTranspose", "Relu"]
    assert_plain_ort_equal(src, out, [{"x": rng.standard_normal(shape).astype(np.float32)}
                                      for shape in ((1, 4, 3, 5), (3, 4, 6, 4))])
    # the BatchNormalization's running statistics in use (a second output read): left alone, as fuse-conv-bn does
    used = helper.make_model(helper.make_graph(
        nodes[:2] + [helper.make_node("BatchNormalization", ["a", "gamma", "beta", "mean", "var"],
                                      ["bn", "rm", "rv"], epsilon=1e-5, training_mode=1), nodes[3]],
        "g", graph.input, list(graph.output) + [helper.make_tensor_value_info("rm", TensorProto.FLOAT, [6])], inits),
        opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    r = run_one(tmp_path / "used", used, "fuse-conv-affine")
    assert "BatchNormalization" in ops(r.output)
