"""dedup-initializers and cse: duplicates merge; near-duplicates, overridable
initializers and random ops do not."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.passes.pass_helpers import check_applies, check_skips

H = '<ir_version: 8, opset_import: ["" : 17]>'


def _two_weights(a: np.ndarray, b: np.ndarray, *, ir_version: int = 8, as_inputs: bool = False):
    nodes = [helper.make_node("MatMul", ["x", "wa"], ["ya"]), helper.make_node("MatMul", ["x", "wb"], ["yb"]),
             helper.make_node("Add", ["ya", "yb"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])]
    if as_inputs:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [64, 64]) for n in ("wa", "wb")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
                              [numpy_helper.from_array(a, "wa"), numpy_helper.from_array(b, "wb")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir_version)


def test_identical_weights_are_shared(tmp_path):
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    r = check_applies(tmp_path, _two_weights(w, w.copy()), "dedup-initializers", ["MatMul", "MatMul", "Add"])
    rec = r.records[0]
    assert rec.counts == {"initializers_removed": 1, "bytes_saved": 64 * 64 * 4}
    assert rec.params_after == rec.params_before - 64 * 64


def test_near_duplicates_and_overridable_initializers_stay(tmp_path):
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    other = w.copy()
    other[37, 11] = np.nextafter(other[37, 11], np.float32(10))    # one ulp, away from the sampled bytes
    check_skips(tmp_path, _two_weights(w, other), "dedup-initializers")
    # Initializers that are also graph inputs can be fed at run time: never merged.
    check_skips(tmp_path / "inputs", _two_weights(w, w.copy(), ir_version=3, as_inputs=True), "dedup-initializers")


def test_cse_merges_duplicate_computations(tmp_path):
    m = H + """
    g (float[N,4] x) => (float[N,4] y) {
      a = Relu(x)
      b = Relu(x)
      c = Softmax<axis=-1>(a)
      d = Softmax<axis=-1>(b)
      y = Add(c, d)
    }"""
    r = check_applies(tmp_path, m, "cse", ["Relu", "Softmax", "Add"])
    assert r.records[0].counts["nodes_removed"] == 2


def test_cse_keeps_random_ops_different_attributes_and_twin_outputs(tmp_path):
    m = H + """
    g (float[N,4] x) => (float[N,4] y, float[N,4] z, float[N,4] w) {
      r1 = RandomNormalLike(x)
      r2 = RandomNormalLike(x)
      s = Add(r1, r2)
      a = Softmax<axis=0>(x)
      b = Softmax<axis=1>(x)
      t = Add(a, b)
      y = Add(s, t)
      z = Relu(x)
      w = Relu(x)
    }"""
    r = check_skips(tmp_path, m, "cse")
    assert any("both values are graph outputs" in n for n in r.records[0].notes)
