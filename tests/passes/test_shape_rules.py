"""The folding rules that close the optimizer-strength gaps (issue 25): shape vectors with a dynamic
dim read by Reshape/Expand (fold-constants), lossless Cast round trips and Squeeze/Unsqueeze pairs
(cancel-round-trips). Each model is written here; expected node lists are counted by hand, and the
result is compared with plain onnxruntime on the original at a batch size other than the pipeline's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from tests.passes.pass_helpers import check_applies, check_skips

H = '<ir_version: 8, opset_import: ["" : 17]>'


def _run(path, feeds: dict) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _same_as_original(tmp_path, r, feeds: dict) -> None:
    for a, b in zip(_run(tmp_path / "in-a" / "m.onnx", feeds), _run(r.output, feeds)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def _inits(path) -> dict[str, list]:
    return {t.name: onnx.numpy_helper.to_array(t).tolist() for t in onnx.load(str(path)).graph.initializer}


# x.view(x.size(0), -1) with a dynamic batch: Shape, Gather (scalar index), Unsqueeze, Concat feed the Reshape.
VIEW_DYNAMIC = H + """
g (float[N,8,1,1] x) => (float[N,8] y) <int64 zero = {0}, int64[1] ax = {0}, int64[1] rest = {-1}> {
  s = Shape(x)
  b = Gather(s, zero)
  bu = Unsqueeze(b, ax)
  shp = Concat<axis=0>(bu, rest)
  r = Reshape(x, shp)
  y = Relu(r)
}"""


def test_dynamic_batch_reshape_target_becomes_a_constant_with_a_copied_dim(tmp_path):
    # 6 nodes -> Reshape, Relu: the shape chain (4 nodes) is dead once the target is [0, -1].
    r = check_applies(tmp_path, VIEW_DYNAMIC, "fold-constants", ["Reshape", "Relu"])
    assert [0, -1] in _inits(r.output).values()
    assert r.records[0].counts["shape_vectors_resolved"] == 1
    x = np.random.default_rng(0).standard_normal((3, 8, 1, 1)).astype(np.float32)
    _same_as_original(tmp_path, r, {"x": x})


def test_static_dim_from_inferred_shapes_and_copied_batch(tmp_path):
    # An attention head split on a dynamic batch: Shape(h)[1] is 6 only by shape inference (h is an
    # intermediate); Shape(x)[0] is N, which inference carries to h's dim 0 (the same symbol), so it is a
    # copy. 8 nodes -> Relu, Reshape, Transpose with [0, 6, 4, 4].
    m = H + """
    g (float[N,6,16] x) => (float[N,4,6,4] y) <int64[1] i0 = {0}, int64[1] i1 = {1}, int64[2] hw = {4, 4}> {
      h = Relu(x)
      s = Shape(h)
      sx = Shape(x)
      b = Gather(sx, i0)
      t = Gather(s, i1)
      shp = Concat<axis=0>(b, t, hw)
      r = Reshape(h, shp)
      y = Transpose<perm = [0, 2, 1, 3]>(r)
    }"""
    r = check_applies(tmp_path, m, "fold-constants", ["Relu", "Reshape", "Transpose"])
    assert [0, 6, 4, 4] in _inits(r.output).values()
    x = np.random.default_rng(1).standard_normal((3, 6, 16)).astype(np.float32)
    _same_as_original(tmp_path, r, {"x": x})


def test_expand_to_its_own_shape_gets_ones(tmp_path):
    # Expand(x, [N, 4]) of x[N, 4]: target [1, 4]; 6 nodes -> Expand, Relu.
    m = H + """
    g (float[N,4] x) => (float[N,4] y) <int64 zero = {0}, int64[1] ax = {0}, int64[1] four = {4}> {
      s = Shape(x)
      b = Gather(s, zero)
      bu = Unsqueeze(b, ax)
      shp = Concat<axis=0>(bu, four)
      e = Expand(x, shp)
      y = Relu(e)
    }"""
    r = check_applies(tmp_path, m, "fold-constants", ["Expand", "Relu"])
    assert [1, 4] in _inits(r.output).values()
    _same_as_original(tmp_path, r, {"x": np.arange(-6, 6, dtype=np.float32).reshape(3, 4)})


def test_shape_arithmetic_in_a_reshape_target(tmp_path):
    # A CRNN's x.view(w, b, c * h) after a permute (corpus captcha_whisperer_crnn: 10 nodes onnxslim folded
    # and we kept): Shape(h)[1] * Shape(h)[2] is 2 * 3 = 6 by shape inference, the batch is a copy (the same
    # symbol N at axis 1 of t). 12 nodes -> Relu, Transpose, Reshape with [4, 0, 6].
    m = H + """
    g (float[N,2,3,4] x) => (float[4,N,6] y) <int64 i0 = {0}, int64 i1 = {1}, int64 i2 = {2}, int64 i3 = {3},
                                             int64[1] ax = {0}> {
      h = Relu(x)
      s = Shape(h)
      b = Gather(s, i0)
      c = Gather(s, i1)
      hh = Gather(s, i2)
      w = Gather(s, i3)
      ch = Mul(c, hh)
      wu = Unsqueeze(w, ax)
      bu = Unsqueeze(b, ax)
      chu = Unsqueeze(ch, ax)
      shp = Concat<axis=0>(wu, bu, chu)
      t = Transpose<perm = [3, 0, 1, 2]>(h)
      y = Reshape(t, shp)
    }"""
    r = check_applies(tmp_path, m, "fold-constants", ["Relu", "Transpose", "Reshape"])
    assert [4, 0, 6] in _inits(r.output).values()
    x = np.random.default_rng(2).standard_normal((3, 2, 3, 4)).astype(np.float32)
    _same_as_original(tmp_path, r, {"x": x})


def test_shape_arithmetic_on_a_dynamic_dim_gets_the_one_minus_one(tmp_path):
    # Reshape(x, [N * 2, 4]) of x[N, 8]: N * 2 is no dim of x (not a copy) but the one unknown entry
    # beside a static 4, so the target is [-1, 4]; a Div by zero or of a dynamic dim is never computed.
    m = H + """
    g (float[N,8] x) => (float[?,4] y) <int64 zero = {0}, int64 two = {2}, int64[1] ax = {0}, int64[1] four = {4}> {
      s = Shape(x)
      b = Gather(s, zero)
      b2 = Mul(b, two)
      bu = Unsqueeze(b2, ax)
      shp = Concat<axis=0>(bu, four)
      y = Reshape(x, shp)
    }"""
    r = check_applies(tmp_path, m, "fold-constants", ["Reshape"])
    assert [-1, 4] in _inits(r.output).values()
    _same_as_original(tmp_path, r, {"x": np.arange(24, dtype=np.float32).reshape(3, 8)})


def test_a_dim_of_another_tensor_is_not_copied(tmp_path):
    # The target's first entry is a dim of z (M), not of x: a 0 there would copy x's dim. Left alone.
    m = H + """
    g (float[N,8] x, float[M] z) => (float[M,?] y) <int64 zero = {0}, int64[1] ax = {0}, int64[1] rest = {-1}> {
      s = Shape(z)
      b = Gather(s, zero)
      bu = Unsqueeze(b, ax)
      shp = Concat<axis=0>(bu, rest)
      y = Reshape(x, shp)
    }"""
    check_skips(tmp_path, m, "fold-constants")


def test_lossless_cast_round_trip_and_chain(tmp_path):
    # float -> double -> float is x (2 nodes gone); int8 -> int32 -> int64 is one Cast (1 gone);
    # float -> float16 -> float rounds, so it stays. 7 nodes -> 4: y1 = Relu(x); y2 = Cast(q, int64);
    # y3 = Cast(Cast(x, f16), f32).
    m = H + """
    g (float[2,3] x, int8[2,3] q) => (float[2,3] y1, int64[2,3] y2, float[2,3] y3) {
      d = Cast<to = 11>(x)
      f = Cast<to = 1>(d)
      y1 = Relu(f)
      i = Cast<to = 6>(q)
      y2 = Cast<to = 7>(i)
      h = Cast<to = 10>(x)
      y3 = Cast<to = 1>(h)
    }"""
    r = check_applies(tmp_path, m, "cancel-round-trips", ["Relu", "Cast", "Cast", "Cast"])
    nodes = onnx.load(str(r.output)).graph.node
    assert [(n.input[0], onnx.helper.get_attribute_value(n.attribute[0])) for n in nodes if n.op_type == "Cast"] == \
        [("q", 7), ("x", 10), ("h", 1)]
    x = np.array([[1e-8, -2.5, 3.14159], [65519.0, -0.0, 7.0]], np.float32)
    _same_as_original(tmp_path, r, {"x": x, "q": np.array([[-128, 0, 127], [1, -1, 5]], np.int8)})


def test_squeeze_unsqueeze_pairs_and_reshape_then_squeeze(tmp_path):
    # Unsqueeze(x, [0]) then Squeeze at -3 (= 0 in rank 3): x. Squeeze(w, [1]) then Unsqueeze at -2
    # (= 1 in rank 3): w. Reshape to [2, 1, 6] then Squeeze [1]: one Reshape to [2, 6]. 8 nodes -> Add, Reshape, Add.
    m = H + """
    g (float[2,3] x, float[2,1,3] w, float[2,6] v) => (float[2,3] y, float[2,1,3] z, float[2,6] u) {
      a = Unsqueeze(x, axes0)
      b = Squeeze(a, axesm3)
      y = Add(b, x)
      c = Squeeze(w, axes1)
      d = Unsqueeze(c, axesm2)
      z = Add(d, w)
      r = Reshape(v, s216)
      u = Squeeze(r, axes1)
    }"""
    m = m.replace("{\n      a =", "<int64[1] axes0 = {0}, int64[1] axesm3 = {-3}, int64[1] axes1 = {1}, "
                                  "int64[1] axesm2 = {-2}, int64[3] s216 = {2, 1, 6}> {\n      a =", 1)
    r = check_applies(tmp_path, m, "cancel-round-trips", ["Add", "Add", "Reshape"])
    assert [2, 6] in _inits(r.output).values()
    rng = np.random.default_rng(2)
    _same_as_original(tmp_path, r, {"x": rng.standard_normal((2, 3)).astype(np.float32),
                                    "w": rng.standard_normal((2, 1, 3)).astype(np.float32),
                                    "v": rng.standard_normal((2, 6)).astype(np.float32)})


def test_pairs_on_different_axes_stay(tmp_path):
    # Unsqueeze at 0 of x[2, 1] is [1, 2, 1]; the Squeeze at 2 removes the other 1: a transpose, not a no-op.
    m = H + """
    g (float[2,1] x) => (float[1,2] y) <int64[1] a0 = {0}, int64[1] a2 = {2}> {
      a = Unsqueeze(x, a0)
      y = Squeeze(a, a2)
    }"""
    check_skips(tmp_path, m, "cancel-round-trips")


def test_a_mean_over_a_one_long_axis_then_unsqueeze_is_the_value(tmp_path):
    # Silero VAD's tail: ReduceMean over axis 1 of [1, 1] without keepdims, then Unsqueeze at 1: x itself
    # (the mean of one value); a ReduceSum over a 3-long axis, and one with keepdims, stay. 6 nodes -> 4.
    m = H + """
    g (float[1,1] x, float[2,3] w) => (float[1,1] y, float[2,1] z, float[1,1] k) {
      e = Relu(x)
      r = ReduceMean<axes = [1], keepdims = 0>(e)
      y = Unsqueeze(r, a1)
      s = ReduceSum<keepdims = 0>(w, a1)
      z = Unsqueeze(s, a1)
      k = ReduceMean<axes = [1], keepdims = 1>(x)
    }"""
    m = m.replace("{\n      e =", "<int64[1] a1 = {1}> {\n      e =", 1)
    r = check_applies(tmp_path, m, "cancel-round-trips", ["Relu", "ReduceSum", "Unsqueeze", "ReduceMean"])
    rng = np.random.default_rng(3)
    _same_as_original(tmp_path, r, {"x": rng.standard_normal((1, 1)).astype(np.float32),
                                    "w": rng.standard_normal((2, 3)).astype(np.float32)})


def test_silero_vad_openvino_tail_reaches_onnxsim_as_ort_runs_it(tmp_path):
    """Real: silero_vad_openvino_16k (bench_real optimizer: the one tuned-on model above its peer by what
    ORT runs, 29 vs onnxsim's 27): its ReduceMean/Unsqueeze tail goes, and the result computes the same."""
    from studio import api
    from tests.corpus import corpus_model

    src = corpus_model("silero_vad_openvino_16k")
    out = tmp_path / "opt.onnx"
    res = api.optimize(api.load(src), preset="ort", out_path=out)
    assert res.ok
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert "ReduceMean" not in ops and "ReduceMean" in [n.op_type for n in onnx.load(str(src)).graph.node]
    rng = np.random.default_rng(4)
    feeds = {"input": rng.standard_normal((1, 576)).astype(np.float32),
             "state": rng.standard_normal((2, 1, 128)).astype(np.float32)}
    for a, b in zip(_run(src, feeds), _run(out, feeds)):      # the preset's Conv folds round by ~1 ulp
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_shape_vector_inside_a_loop_body(tmp_path):
    # The body reshapes its carried value by its own dynamic dim 0: Shape, Gather, Unsqueeze, Concat
    # (4 nodes) become one Constant node [0, -1] inside the body (no subgraph initializers).
    m = H + """
    g (float[N,3] x, int64 n) => (float[N,3] y)
      <bool t = {1}, int64 zero = {0}, int64[1] ax = {0}, int64[1] m1 = {-1}> {
      y = Loop(n, t, x) <body = body (int64 i, bool cin, float[N,3] acc) => (bool cout, float[N,3] out) {
        cout = Identity(cin)
        s = Shape(acc)
        b = Gather(s, zero)
        bu = Unsqueeze(b, ax)
        shp = Concat<axis=0>(bu, m1)
        r = Reshape(acc, shp)
        out = Relu(r)
      }>
    }"""
    r = check_applies(tmp_path, m, "fold-constants", ["Loop"])
    body = onnx.load(str(r.output)).graph.node[0].attribute[0].g
    assert [n.op_type for n in body.node] == ["Identity", "Constant", "Reshape", "Relu"]
    assert onnx.numpy_helper.to_array(body.node[1].attribute[0].t).tolist() == [0, -1]
    x = np.arange(-6, 6, dtype=np.float32).reshape(4, 3)
    _same_as_original(tmp_path, r, {"x": x, "n": np.array(2, np.int64)})


def _conv_model(scale_shape: list[int], scale: np.ndarray, op: str = "Mul", group: int = 1,
                x_channels: int = 4) -> onnx.ModelProto:
    """x[1,C,5,5] -> op(x, s) -> Conv(3x3, pads 1, group) -> y: the scale on the Conv's input."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((6, 4 // group, 3, 3)).astype(np.float32), "w")
    s = numpy_helper.from_array(scale.astype(np.float32).reshape(scale_shape), "s")
    nodes = [helper.make_node(op, ["x", "s"], ["xs"]),
             helper.make_node("Conv", ["xs", "w"], ["y"], pads=[1, 1, 1, 1], group=group)]
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, x_channels, 5, 5])
    graph = helper.make_graph(nodes, "g", [x_info],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 5, 5])], [w, s])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_per_channel_scale_moves_into_the_conv_weights(tmp_path):
    # Mul by [C,1,1] before a padded Conv, and Div by [1,C,1,1] before a grouped one: 2 nodes -> Conv each.
    x = np.random.default_rng(4).standard_normal((1, 4, 5, 5)).astype(np.float32)
    for tag, model in (("mul", _conv_model([4, 1, 1], np.array([0.5, 2.0, -1.0, 3.0]))),
                       ("div", _conv_model([1, 4, 1, 1], np.array([0.25, 4.0, -2.0, 8.0]), op="Div", group=2))):
        r = check_applies(tmp_path / tag, model, "fuse-conv-scale", ["Conv"])
        assert r.records[0].counts["scales_fused"] == 1
        (a,), (b,) = _run(tmp_path / tag / "in-a" / "m.onnx", {"x": x}), _run(r.output, {"x": x})
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_scale_that_broadcasts_channels_or_is_zero_stays(tmp_path):
    # x has 1 channel that the [4,1,1] scale broadcasts to 4: moving it would change the Conv's input.
    check_skips(tmp_path / "bcast", _conv_model([4, 1, 1], np.array([1.0, 2.0, 3.0, 4.0]), x_channels=1),
                "fuse-conv-scale")
    check_skips(tmp_path / "zero", _conv_model([4, 1, 1], np.array([1.0, 0.0, 3.0, 4.0])), "fuse-conv-scale")


# YOLOX's Focus (corpus ddddocr_common_det: 2 nodes more than onnxsim/onnxslim): x[..., ::2, ::2] and its
# three shifted siblings, each written as a Slice on H then a Slice on W.
FOCUS = H + """
g (float[N,3,8,8] x) => (float[N,12,4,4] y) <int64[1] z = {0}, int64[1] o = {1}, int64[1] big = {9223372036854775807},
                                             int64[1] ah = {2}, int64[1] aw = {3}, int64[1] two = {2}> {
  a = Slice(x, z, big, ah, two)
  b = Slice(x, o, big, ah, two)
  a0 = Slice(a, z, big, aw, two)
  a1 = Slice(a, o, big, aw, two)
  b0 = Slice(b, z, big, aw, two)
  b1 = Slice(b, o, big, aw, two)
  y = Concat<axis=1>(a0, b0, a1, b1)
}"""


def test_a_slice_of_a_slice_on_another_axis_is_one_slice(tmp_path):
    import onnx

    r = check_applies(tmp_path, FOCUS, "merge-reshapes")
    g = onnx.load(str(r.output)).graph
    outer = [n for n in g.node if n.op_type == "Slice" and n.output[0] in ("a0", "a1", "b0", "b1")]
    assert len(outer) == 4 and all(n.input[0] == "x" for n in outer)   # the H Slices are dead code now
    assert r.records[0].counts["slices_merged"] == 4
    x = np.random.default_rng(6).standard_normal((3, 3, 8, 8)).astype(np.float32)
    _same_as_original(tmp_path, r, {"x": x})
    np.testing.assert_array_equal(_run(r.output, {"x": x})[0][:, 3:6], x[:, :, 1::2, ::2])   # b0, by hand


def test_slices_on_the_same_axis_or_a_slice_used_elsewhere_stay(tmp_path):
    same_axis = FOCUS.replace("aw, two)", "ah, two)").replace("float[N,12,4,4] y", "float[N,12,?,8] y")
    check_skips(tmp_path, same_axis, "merge-reshapes")
    # a is read by a Relu too: its Slices stay on a (merging them would compute a's rows twice); b's merge
    import onnx

    used = FOCUS.replace("(float[N,12,4,4] y)", "(float[N,12,4,4] y, float[N,3,4,8] r)").replace(
        "y = Concat<axis=1>(a0, b0, a1, b1)", "y = Concat<axis=1>(a0, b0, a1, b1)\n  r = Relu(a)")
    r = check_applies(tmp_path / "used", used, "merge-reshapes")
    reads = {n.output[0]: n.input[0] for n in onnx.load(str(r.output)).graph.node if n.op_type == "Slice"}
    assert (reads["a0"], reads["a1"], reads["b0"], reads["b1"]) == ("a", "a", "x", "x")
