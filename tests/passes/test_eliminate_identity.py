"""eliminate-identity: no-op nodes go; the interface (names, dtypes, declared
shapes, outer-scope values) never changes."""

from __future__ import annotations

from passes.registry import make_pass
from tests.passes.pass_helpers import check_applies, check_skips, run_one

H = '<ir_version: 8, opset_import: ["" : 17]>'


def test_removes_every_kind_of_no_op(tmp_path):
    m = H + """
    g (float[N,4] x) => (float[N,4] y) <int64[2] same = {0, 4}, float[1] one = {1.0}, int64[4] zero_pads = {0,0,0,0},
        int64[1] s0 = {0}, int64[1] e_big = {9223372036854775807}, int64[1] ax = {-1}, int64[1] ones1 = {1}> {
      a = Identity(x)
      b = Dropout(a)
      c = Cast<to=1>(b)
      d = Reshape(c, same)
      e = Transpose<perm=[0,1]>(d)
      f = Pad(e, zero_pads)
      g1 = Slice(f, s0, e_big, ax)
      h = Expand(g1, ones1)
      i = Mul(h, one)
      y = Relu(i)
    }"""
    r = check_applies(tmp_path, m, "eliminate-identity", ["Relu"])
    details = {c.detail for c in r.records[0].changes}
    assert {"Identity", "Dropout in inference", "Transpose with the identity permutation", "Pad by zero",
            "Slice of the whole tensor", "Mul by one"} <= details
    assert r.records[0].counts["nodes_removed"] == 9


def test_identity_to_graph_output_renames_the_producer(tmp_path):
    m = H + "g (float[N,4] x) => (float[N,4] y) { r = Relu(x) y = Identity(r) }"
    check_applies(tmp_path, m, "eliminate-identity", ["Relu"])


def test_interface_identities_are_kept(tmp_path):
    # input -> output, and output -> another output: removing either would rename an interface value.
    m = H + "g (float[N,4] x) => (float[N,4] y, float[N,4] z, float[N,4] w) { y = Identity(x) z = Relu(x) w = Identity(z) }"
    r = check_skips(tmp_path, m, "eliminate-identity")
    assert any("graph output" in n or "graph input" in n for n in r.records[0].notes)


def test_outer_scope_identity_in_if_branch_is_kept(tmp_path):
    # The onnxsim failure mode: an If branch returning Identity(outer value) must keep its Identity.
    m = H + """
    g (float[4] x, bool c) => (float[4] y) {
      r = Relu(x)
      y = If(c) <then_branch = g1 () => (float[4] t) { t = Identity(r) },
                 else_branch = g2 () => (float[4] e) { e = Neg(r) }>
    }"""
    check_skips(tmp_path, m, "eliminate-identity")


def test_no_ops_that_are_not_no_ops_stay(tmp_path):
    m = H + """
    g (int32[3] x, float[2,1] v) => (float[3] y, float[2,3] z) <float[3] ones3 = {1.0, 1.0, 1.0}, int64[2] shp = {2,3}> {
      c = Cast<to=1>(x)
      y = Mul(c, ones3)
      z = Expand(v, shp)
    }"""
    # Cast changes the dtype; Expand broadcasts [2,1] -> [2,3]; Mul by ones keeps shape [3] but
    # only after the Cast, which stays. So only the Mul goes.
    r = check_applies(tmp_path, m, "eliminate-identity", ["Cast", "Expand"])
    assert [c.detail for c in r.records[0].changes] == ["Mul by one"]


def test_broadcasting_mul_by_one_stays_and_zero_add_goes_unless_exact_sign_asked(tmp_path):
    m = H + """
    g (float[1] x, float[3] u) => (float[3] y, float[3] z) <float[3] ones3 = {1.0, 1.0, 1.0}, float[1] zero = {0.0}> {
      y = Mul(x, ones3)
      a = Add(u, zero)
      z = Relu(a)
    }"""
    r = check_applies(tmp_path, m, "eliminate-identity", ["Mul", "Relu"])
    assert "compares equal" in r.records[0].changes[0].detail
    check_skips(tmp_path / "exact", m, "eliminate-identity", options={"exact_zero_sign": True})


def test_training_dropout_stays(tmp_path):
    m = H + """
    g (float[4,4] x) => (float[4,4] y) <bool t = {1}, float r = {0.5}> { y = Dropout(x, r, t) }"""
    assert make_pass("eliminate-identity").call is not None
    r = check_skips(tmp_path, m, "eliminate-identity")
    assert r.records[0].status == "unchanged"


def _ort(path, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


# A PyTorch head that pads its output with a zero-length mask (corpus brainmaze_spindle_eeg: onnxslim had 7
# nodes fewer): ConstantOfShape([N, 0, 4]) * -1e9 concatenated on axis 1 is empty there, whatever N is.
EMPTY_PAD = H + """
g (float[N,3,4] x, float[N,2,4] z) => (float[N,?,4] y) <int64 i0 = {0}, int64[1] ax = {0}, int64[1] zero = {0},
                                                      int64[1] four = {4}, float big = {-1e9}> {
  r = Relu(x)
  s = Shape(x)
  b = Gather(s, i0)
  bu = Unsqueeze(b, ax)
  shp = Concat<axis=0>(bu, zero, four)
  c = ConstantOfShape<value = float[1] {1.0}>(shp)
  e = Mul(c, big)
  y = Concat<axis=1>(r, e%s)
}"""


def test_concat_of_an_empty_tensor_beside_one_input_is_that_input(tmp_path):
    import numpy as np
    from tests.passes.pass_helpers import ops

    r = check_applies(tmp_path, EMPTY_PAD % "", "eliminate-identity")
    assert ops(r.output).count("Concat") == 1     # only the shape vector's
    assert {c.detail for c in r.records[0].changes} == {"Concat with empty tensors beside one input"}
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((3, 3, 4)).astype(np.float32), "z": rng.standard_normal((3, 2, 4)).astype(np.float32)}
    for a, b in zip(_ort(tmp_path / "in-a" / "m.onnx", feeds), _ort(r.output, feeds)):
        assert a.shape == b.shape == (3, 3, 4)
        np.testing.assert_array_equal(a, b)


def test_empty_concat_inputs_between_others_are_dropped(tmp_path):
    import numpy as np
    import onnx

    r = check_applies(tmp_path, EMPTY_PAD % ", z", "eliminate-identity")
    last = onnx.load(str(r.output)).graph.node[-1]
    assert last.op_type == "Concat" and list(last.input) == ["r", "z"]
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((2, 3, 4)).astype(np.float32), "z": rng.standard_normal((2, 2, 4)).astype(np.float32)}
    for a, b in zip(_ort(tmp_path / "in-a" / "m.onnx", feeds), _ort(r.output, feeds)):
        assert a.shape == b.shape == (2, 5, 4)
        np.testing.assert_array_equal(a, b)


def test_lstm_zero_initial_state_is_dropped(tmp_path):
    """PyTorch's zero LSTM state (Shape -> Gather -> Concat -> ConstantOfShape(0) -> Slice) is the spec's
    default: the inputs go, the chain becomes dead code; plain ORT gives the same outputs at two batch sizes."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    h, d = 3, 2
    inits = [numpy_helper.from_array(rng.standard_normal((1, 4 * h, d)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((1, 4 * h, h)).astype(np.float32), "R"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([1], np.int64), "one1"),
             numpy_helper.from_array(np.array([2], np.int64), "two"),
             numpy_helper.from_array(np.array([h], np.int64), "hid")]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["b"]),
             helper.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
             helper.make_node("Concat", ["two", "bu", "hid"], ["shp"], axis=0),
             helper.make_node("ConstantOfShape", ["shp"], ["z"],
                              value=numpy_helper.from_array(np.zeros(1, np.float32))),
             helper.make_node("Slice", ["z", "ax0", "one1", "ax0"], ["z0"]),
             helper.make_node("Slice", ["z", "one1", "two", "ax0"], ["z1"]),
             helper.make_node("LSTM", ["x", "W", "R", "", "", "z0", "z1"], ["y", "yh", "yc"], hidden_size=h),
             helper.make_node("Relu", ["yc"], ["c"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "B", d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", 1, "B", h]),
                               helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, "B", h])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    r = check_applies(tmp_path, m, "eliminate-identity")
    assert "zero initial state dropped (the default)" in {c.detail for c in r.records[0].changes}
    lstm = next(n for n in onnx.load(str(r.output)).graph.node if n.op_type == "LSTM")
    assert list(lstm.input) == ["x", "W", "R"]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    old = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    new = ort.InferenceSession(str(r.output), providers=["CPUExecutionProvider"])   # default optimizer on
    for shape in ((5, 1, d), (4, 3, d)):
        x = rng.standard_normal(shape).astype(np.float32)
        for a, b in zip(old.run(None, {"x": x}), new.run(None, {"x": x})):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_nonzero_initial_state_stays(tmp_path):
    m = H + """
    g (float[2,1,2] x) => (float[2,1,3] y) <float[1,12,2] W = {%s}, float[1,12,3] R = {%s}, float[1,1,3] h0 = {0.0, 0.5, 0.0}> {
      y, yh = LSTM<hidden_size=3>(x, W, R, , , h0)
    }""" % (",".join(["0.1"] * 24), ",".join(["0.2"] * 36))
    r = run_one(tmp_path, m, "eliminate-identity")
    assert r.records[0].status == "unchanged", r.records[0].changes


def test_quantized_lstm_zero_initial_state_is_dropped(tmp_path):
    """ONNX Runtime's dynamic quantizer turns an LSTM into com.microsoft DynamicQuantizeLSTM, whose
    initial_h / initial_c (inputs 5 and 6) default to zero as LSTM's do (corpus ddddocr_common_old_int8: the
    zero state's Shape -> Gather -> Unsqueeze -> Concat -> ConstantOfShape chain stayed, onnxsim folds it):
    the inputs go, the weight scales after them stay in place; plain ORT (optimizer off and on) gives the
    same outputs as the original at two batch sizes."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(1)
    h, d = 8, 4
    inits = [numpy_helper.from_array(rng.standard_normal((2, 4 * h, d)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((2, 4 * h, h)).astype(np.float32), "R"),
             numpy_helper.from_array(rng.standard_normal((2, 8 * h)).astype(np.float32), "B"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([2], np.int64), "two"),
             numpy_helper.from_array(np.array([h], np.int64), "hid")]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["b"]),
             helper.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
             helper.make_node("Concat", ["two", "bu", "hid"], ["shp"], axis=0),
             helper.make_node("ConstantOfShape", ["shp"], ["z"],
                              value=numpy_helper.from_array(np.zeros(1, np.float32))),
             helper.make_node("LSTM", ["x", "W", "R", "B", "", "z", "z"], ["y", "yh", "yc"], hidden_size=h,
                              direction="bidirectional")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "N", d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", 2, "N", h]),
                               helper.make_tensor_value_info("yc", TensorProto.FLOAT, [2, "N", h])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    (tmp_path / "q").mkdir()
    onnx.save(m, tmp_path / "q" / "f.onnx")
    quantize_dynamic(tmp_path / "q" / "f.onnx", tmp_path / "q" / "q.onnx", op_types_to_quantize=["LSTM"],
                     weight_type=QuantType.QInt8)
    q = onnx.load(tmp_path / "q" / "q.onnx")
    before = next(n for n in q.graph.node if n.op_type == "DynamicQuantizeLSTM")
    assert list(before.input)[5:7] == ["z", "z"]                 # the quantizer kept the zero state
    r = check_applies(tmp_path, q, "eliminate-identity")
    assert "zero initial state dropped (the default)" in {c.detail for c in r.records[0].changes}
    out = onnx.load(str(r.output))
    lstm = next(n for n in out.graph.node if n.op_type == "DynamicQuantizeLSTM")
    assert list(lstm.input)[:8] == list(before.input)[:5] + ["", "", ""]
    assert list(lstm.input)[8:] == list(before.input)[8:]        # W/R scales and zero points in place
    assert not any("z" in n.input for n in out.graph.node)      # the chain is dead code (eliminate-dead-code's)
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    old = ort.InferenceSession(q.SerializeToString(), off, providers=["CPUExecutionProvider"])
    for so in (off, ort.SessionOptions()):
        new = ort.InferenceSession(str(r.output), so, providers=["CPUExecutionProvider"])
        for shape in ((5, 1, d), (3, 4, d)):
            x = rng.standard_normal(shape).astype(np.float32)
            for a, b in zip(old.run(None, {"x": x}), new.run(None, {"x": x})):
                assert a.shape == b.shape
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
