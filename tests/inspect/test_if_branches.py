"""An If chosen by an input's *value* (Silero VAD's sample-rate switch): inference leaves its outputs
symbolic, one seeded run would measure only the branch its seed took. Inspect forces each branch in ONNX
Runtime and settles a shape only where every branch that runs gives the same (oracle: plain ORT runs with
the condition's input set each way)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.core.feeds import unnamed_dim_key
from tests.corpus import corpus_model

DIMS = {unnamed_dim_key("x", 0): 2, unnamed_dim_key("x", 1): 5}


def _switch_model(tmp_path, else_op: str):
    """Code-built (labelled so): y = If(flag == 1, Relu(Pad(x, computed zeros)), <else_op>(x)) -> z = Identity(y)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None])
    flag = helper.make_tensor_value_info("flag", TensorProto.INT64, [])
    one = helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", TensorProto.INT64, [], [1]))
    eq = helper.make_node("Equal", ["flag", "one"], ["cond"])
    # the then branch computes its shape (ONNX propagates no values inside a branch: its dims stay symbolic)
    # the then branch pads by a computed amount (zero), as Silero's STFT does: ONNX's value propagation stops
    # at the Transpose, so its dims stay symbolic
    pads2d = helper.make_node("Constant", [], ["p2"], value=helper.make_tensor("p2", TensorProto.INT64, [2, 2], [0] * 4))
    flat = helper.make_node("Constant", [], ["flat"], value=helper.make_tensor("flat", TensorProto.INT64, [1], [-1]))
    then = helper.make_graph([pads2d, flat, helper.make_node("Transpose", ["p2"], ["pt"], perm=[1, 0]),
                              helper.make_node("Reshape", ["pt", "flat"], ["pads"]),
                              helper.make_node("Pad", ["x", "pads"], ["r"]),
                              helper.make_node("Relu", ["r"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    if else_op == "Concat":
        other_nodes = [helper.make_node("Concat", ["x", "x"], ["e"], axis=1)]
    else:
        other_nodes = [helper.make_node(else_op, ["x"], ["e"])]
    other = helper.make_graph(other_nodes, "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)
    out = helper.make_node("Identity", ["y"], ["z"])
    graph = helper.make_graph([one, eq, node, out], "g", [x, flag],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / f"switch_{else_op}.onnx"
    onnx.save(model, str(path))
    return path


def _ort_shapes(path, flag: int):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(["z"], {"x": np.ones((2, 5), np.float32), "flag": np.array(flag, np.int64)})[0].shape


def test_branches_that_agree_settle_the_shape(tmp_path):
    path = _switch_model(tmp_path, "Neg")
    assert _ort_shapes(path, 1) == _ort_shapes(path, 0) == (2, 5)             # the oracle: both branches
    result = api.inspect(api.load(path), DIMS)
    shapes = {e.name: e.shape for e in result.edges}
    assert tuple(shapes["y"]) == tuple(shapes["z"]) == (2, 5)
    assert "each of its 2 branch combinations" in result.shape_note          # measured per branch, not one run


def test_branches_that_differ_stay_open_and_say_so(tmp_path):
    path = _switch_model(tmp_path, "Concat")
    assert _ort_shapes(path, 1) == (2, 5) and _ort_shapes(path, 0) == (2, 10)
    result = api.inspect(api.load(path), DIMS)
    shapes = {e.name: e.shape for e in result.edges}
    assert tuple(shapes["z"] or ()) not in ((2, 5), (2, 10))                  # neither branch's number claimed
    assert "differ between branches" in result.shape_note


@pytest.mark.parametrize("name", ["silero_vad", "silero_vad_v5"])
def test_silero_sample_rate_switch_is_measured_per_branch(name):
    """Real: Silero VAD at 512 samples (its 16 kHz frame); the 8 kHz branch cannot run at that size."""
    path = corpus_model(name)
    dims = {unnamed_dim_key("input", 0): 1, unnamed_dim_key("input", 1): 512, unnamed_dim_key("state", 1): 1}
    result = api.inspect(api.load(path), dims)
    shapes = {e.name: e.shape for e in result.edges}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    real = dict(zip([o.name for o in sess.get_outputs()],
                    (v.shape for v in sess.run(None, {"input": np.zeros((1, 512), np.float32),
                                                      "state": np.zeros((2, 1, 128), np.float32),
                                                      "sr": np.array(16000, np.int64)}))))
    assert {n: tuple(shapes[n]) for n in real} == real
    assert "the 1 of its 2 branch combinations that run at these shapes" in result.shape_note
