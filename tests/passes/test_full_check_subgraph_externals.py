"""onnx.checker's full check of a model whose external weights sit in the main graph and in If branches.

Found exporting the held-out corpus model silero_vad_v4_legacy to ONNX Runtime: ORT's optimized save put 28
main-graph and 24 If-branch initializers in model.onnx.data, and the artifact FAILED with "onnx.checker full
check fails: ValidationError: Data of TensorProto (tensor name: 417) should be stored in model.onnx.data, but it
is not regular file" although onnx.checker.check_model(path, full_check=True) passes on it: the studio's check
turned only the main graph's external weights into inputs and checked the proto, which has no folder to find
the branch's weights in. Reproduced on a code-built If model; the oracle is onnx.checker on the path."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from studio.verification.verifier import full_check


def _if_model() -> onnx.ModelProto:
    then = h.make_graph([h.make_node("Add", ["x", "w_then"], ["t_out"])], "then", [],
                        [h.make_tensor_value_info("t_out", T.FLOAT, [1, 64])],
                        [nh.from_array(np.ones((1, 64), np.float32), "w_then")])
    other = h.make_graph([h.make_node("Sub", ["x", "w_else"], ["e_out"])], "else", [],
                         [h.make_tensor_value_info("e_out", T.FLOAT, [1, 64])],
                         [nh.from_array(np.full((1, 64), 2, np.float32), "w_else")])
    nodes = [h.make_node("Mul", ["x_in", "scale"], ["x"]),
             h.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x_in", T.FLOAT, [1, 64]),
                                  h.make_tensor_value_info("cond", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 64])],
                     [nh.from_array(np.full((1, 64), 3, np.float32), "scale")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_full_check_passes_with_external_weights_in_if_branches(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save_model(_if_model(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    proto = onnx.load_model(str(path), load_external_data=False)
    assert proto.graph.initializer[0].data_location == T.EXTERNAL
    branch = proto.graph.node[1].attribute[0].g
    assert branch.initializer[0].data_location == T.EXTERNAL          # the case: a branch's weight is external
    onnx.checker.check_model(str(path), full_check=True)               # the oracle: the model is valid
    assert full_check(path) is None


def test_full_check_still_reports_a_real_problem(tmp_path):
    m = _if_model()
    m.graph.node[0].input[1] = "missing"                               # a value nothing produces
    path = tmp_path / "model.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    assert full_check(path) is not None
