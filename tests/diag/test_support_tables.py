"""Support tables: the committed JSON is a fresh build of the transcribed sources, the
TensorRT restriction checks fire on the nodes that break them, and the ORT registry matcher."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from diagnostics.node_context import collect_nodes
from diagnostics.ort_check import kernel_registry, match_kernel
from diagnostics.support_tables import normalize_trt_version, ort_cuda_table, tensorrt_table
from diagnostics.support_tables.build_tensorrt_table import main as build_main
from diagnostics.tensorrt_check import node_status
from studio.core.errors import StudioError
from studio.inspect.shapes import infer_shapes, shape_table


def test_committed_tables_are_a_fresh_build():
    assert build_main(["--check"]) == 0


def test_table_facts():
    t10, t11 = tensorrt_table("10"), tensorrt_table(11)
    assert (t10["major"], t10["opset_max"], t11["major"]) == (10, 24, 11)
    assert t10["ops"]["GridSample"]["checks"][0] == {"kind": "input_rank", "ranks": [4], "text": "input must be 4-D"}
    assert not t10["ops"]["Unique"]["supported"] and "Swish" not in t10["ops"] and t11["ops"]["Swish"]["supported"]
    assert "nms" in t11["removed_plugins"]
    assert ort_cuda_table()["kernels"]["::GridSample"]["min_ort"] == "1.18"
    with pytest.raises(StudioError):
        normalize_trt_version("9")


def _nodes(model):
    inferred, _ = infer_shapes(model)
    return {n.name: n for n in collect_nodes(model, shape_table(inferred).values)}


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def test_tensorrt_restrictions_on_nodes():
    k_const = numpy_helper.from_array(np.array([5000], np.int64), "k")
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8000])
    k_in = helper.make_tensor_value_info("kin", onnx.TensorProto.INT64, [1])
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("v1", "v2", "p")]
    idx = [helper.make_tensor_value_info(n, onnx.TensorProto.INT64, None) for n in ("i1", "i2")]
    m = _model([helper.make_node("TopK", ["x", "k"], ["v1", "i1"], name="topk_big"),
                helper.make_node("TopK", ["x", "kin"], ["v2", "i2"], name="topk_dynamic"),
                helper.make_node("MaxPool", ["x3"], ["p"], name="pool1d", kernel_shape=[2])],
               [x, k_in, helper.make_tensor_value_info("x3", onnx.TensorProto.FLOAT, [1, 2, 8])], outs + idx, [k_const])
    nodes = _nodes(m)
    status, reason = node_status(nodes["topk_big"], "10")
    assert status == "unsupported" and "3840" in reason
    assert "computed at run time" in node_status(nodes["topk_dynamic"], "10")[1]
    assert "rank 4 or 5" in node_status(nodes["pool1d"], "10")[1]


def test_ort_registry_matching_by_opset_and_type():
    registry, providers = kernel_registry()
    assert "CPUExecutionProvider" in providers
    # GridSample at opset 16 takes float only; a double input has no kernel before opset 20.
    x = helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, [1, 1, 4, 4])
    g = helper.make_tensor_value_info("g", onnx.TensorProto.DOUBLE, [1, 2, 2, 2])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)
    for opset, expected in ((16, "unsupported"), (20, "supported")):
        node = _nodes(_model([helper.make_node("GridSample", ["x", "g"], ["y"], name="gs")], [x, g], [y],
                             opset=opset))["gs"]
        assert match_kernel(registry, "CPUExecutionProvider", node)[0] == expected
    # No kernel at opset 6 for Add (ORT's kernels start at 7).
    add = _nodes(_model([helper.make_node("Add", ["x", "x"], ["y"], name="add")], [x], [y], opset=6))["add"]
    status, reason = match_kernel(registry, "CPUExecutionProvider", add)
    assert status == "unsupported" and "opset version 6" in reason


def test_tensorrt_restricted_nodes_become_warnings(model_file):
    """A node the table marks "restricted" (DOUBLE cast down, a restriction text not evaluated) is a
    TRT-RESTRICTED warning, so the verdict is "runs with warnings", never "no problem found"."""
    from studio import api

    xd = helper.make_tensor_value_info("xd", onnx.TensorProto.DOUBLE, [2, 3])
    c = helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    z = helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2, 3])

    def branch(name, op):
        out = helper.make_tensor_value_info(f"{name}_out", onnx.TensorProto.FLOAT, [2, 3])
        return helper.make_graph([helper.make_node(op, ["y"], [f"{name}_out"])], name, [], [out])

    m = _model([helper.make_node("Cast", ["xd"], ["y"], name="down", to=onnx.TensorProto.FLOAT),
                helper.make_node("If", ["c"], ["z"], name="branchy", then_branch=branch("then", "Relu"),
                                 else_branch=branch("else", "Neg"))],
               [xd, c], [y, z])
    report = api.check(api.load(model_file(m)), ["tensorrt"])
    statuses = {v.node: v.status for v in report.nodes if v.engine == "tensorrt"}
    assert statuses["down"] == statuses["branchy"] == "restricted"
    restricted = {f.node: f for f in report.findings if f.code == "TRT-RESTRICTED"}
    assert set(restricted) == {"down", "branchy"}
    assert "DOUBLE is cast down to FLOAT" in restricted["down"].message
    assert "same rank" in restricted["branchy"].message and restricted["branchy"].severity == "warning"
    verdict = report.verdict("tensorrt")
    assert verdict.verdict == "runs with warnings" and verdict.summary != "no problem found"


def test_ort_cuda_table_says_when_input_types_are_not_in_it():
    from diagnostics.ort_check import _cuda_table_status

    x = helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, [1, 1, 4, 4])
    g = helper.make_tensor_value_info("g", onnx.TensorProto.DOUBLE, [1, 2, 2, 2])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)
    nodes = _nodes(_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                           helper.make_node("GridSample", ["r", "g"], ["y"], name="gs")], [x, g], [y], opset=20))
    status, reason = _cuda_table_status(nodes["relu"], "1.20.0")
    assert status == "supported" and "input type double not in the table" in reason
    status, reason = _cuda_table_status(nodes["gs"], "1.20.0")       # a row with types: checked
    assert status == "unsupported" and "takes float, not double" in reason
    header = (Path(__file__).resolve().parents[2] / "diagnostics/support_tables/ort_cuda_kernels.psv").read_text()
    assert "build_ort_cuda_table" not in header and "not in the table" in header
