"""rename-duplicate-nodes and remove-unused-opsets: the lint's DUPLICATE-NODE-NAME and UNUSED-OPSET fixes."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.passes.pass_helpers import check_applies, check_skips


def _model(nodes, opsets=(("", 17),), inputs=None):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    m = helper.make_model(helper.make_graph(nodes, "g", inputs or [x], [y]),
                          opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    return m


def _duplicates():
    then = helper.make_graph([helper.make_node("Neg", ["b"], ["t"], name="n"),
                              helper.make_node("Abs", ["t"], ["t2"], name="n")], "then", [],
                             [helper.make_tensor_value_info("t2", TensorProto.FLOAT, ["N", 4])])
    other = helper.make_graph([helper.make_node("Abs", ["b"], ["e"], name="n")], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["N", 4])])
    return _model([helper.make_node("Relu", ["x"], ["a"], name="n"),
                   helper.make_node("Sigmoid", ["a"], ["n_1"], name="n_1"),   # the obvious new name is taken
                   helper.make_node("Add", ["a", "n_1"], ["b"], name="n"),
                   helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
                  inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                          helper.make_tensor_value_info("c", TensorProto.BOOL, [])])


def test_onnxruntime_refuses_duplicate_node_names():
    with pytest.raises(Exception, match="two nodes with same node name"):
        ort.InferenceSession(_duplicates().SerializeToString(), providers=["CPUExecutionProvider"])


def test_rename_duplicate_nodes(tmp_path):
    r = check_applies(tmp_path, _duplicates(), "rename-duplicate-nodes", ["Relu", "Sigmoid", "Add", "If"])
    out = onnx.load(str(r.output))
    assert [n.name for n in out.graph.node] == ["n", "n_1", "n_2", "if"]
    then = out.graph.node[3].attribute[0].g if out.graph.node[3].attribute[0].name == "then_branch" \
        else out.graph.node[3].attribute[1].g
    assert [n.name for n in then.node] == ["n", "n_1"]        # each graph is its own namespace
    assert r.records[0].counts["nodes_renamed"] == 2
    # The result loads in ONNX Runtime, which refused the original.
    ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])


def test_rename_duplicate_nodes_leaves_unique_and_unnamed_nodes(tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
                helper.make_node("Abs", ["b"], ["y"], name="abs")])
    check_skips(tmp_path, m, "rename-duplicate-nodes")


def test_remove_unused_opsets(tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r")],
               opsets=(("", 17), ("com.microsoft", 1), ("mmdeploy", 1)))
    r = check_applies(tmp_path, m, "remove-unused-opsets", ["Relu"])
    assert {o.domain for o in onnx.load(str(r.output)).opset_import} == {""}
    assert r.records[0].counts["opsets_removed"] == 2


def test_remove_unused_opsets_keeps_used_domains(tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["z"], name="r"),
                helper.make_node("Gelu", ["z"], ["y"], name="g", domain="com.microsoft")],
               opsets=(("", 17), ("com.microsoft", 1)))
    check_skips(tmp_path, m, "remove-unused-opsets")
