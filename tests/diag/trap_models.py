"""RELIABILITY R18/R19 models: shape traps and unknown ops for the diagnostics, built in code (ONNX text
where the parser allows). Models that break engines or tools are in tests/hostile_models.py."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                *(helper.make_opsetid(d, v) for d, v in extra_opsets)])
    m.ir_version = 8
    return m


def _t(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _out(name, rank, dtype=TensorProto.FLOAT):
    """An output with a symbolic shape of ``rank`` (declared, so the basic checker is satisfied)."""
    return helper.make_tensor_value_info(name, dtype, [f"{name}_d{i}" for i in range(rank)])


def conv_strides_zero() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", strides=[0, 0], kernel_shape=[3, 3])
    return _model([n], [_t("x", [1, 1, 8, 8])], [_out("y", 4)], [w])


def conv_group_zero() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", group=0, kernel_shape=[3, 3])
    return _model([n], [_t("x", [1, 1, 8, 8])], [_out("y", 4)], [w])


def split_num_outputs_zero() -> onnx.ModelProto:
    n = helper.make_node("Split", ["x"], ["a"], name="split", axis=0, num_outputs=0)
    return _model([n], [_t("x", [4, 4])], [_out("a", 2)], opset=18)


def reshape_allowzero_minus_one_zero() -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array([-1, 0], np.int64), "shape")
    n = helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape", allowzero=1)
    return _model([n], [_t("x", [2, 3])], [_out("y", 2)], [shape], opset=14)


def maxpool_huge_kernel() -> onnx.ModelProto:
    n = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2**40, 2**40])
    return _model([n], [_t("x", [1, 1, 8, 8])], [_out("y", 4)])


def gather_constant_oob() -> onnx.ModelProto:
    data = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "data")
    idx = numpy_helper.from_array(np.array([7], np.int64), "idx")
    n1 = helper.make_node("Gather", ["data", "idx"], ["g"], name="gather", axis=0)
    n2 = helper.make_node("Add", ["g", "x"], ["y"], name="add")
    return _model([n1, n2], [_t("x", [1, 3])], [_out("y", 2)], [data, idx])


R18 = {
    "conv_strides_zero": conv_strides_zero,
    "conv_group_zero": conv_group_zero,
    "split_num_outputs_zero": split_num_outputs_zero,
    "reshape_allowzero_minus_one_zero": reshape_allowzero_minus_one_zero,
    "maxpool_huge_kernel": maxpool_huge_kernel,
    "gather_constant_oob": gather_constant_oob,
}


def unknown_default_op() -> onnx.ModelProto:
    n = helper.make_node("FancyMagic", ["x"], ["y"], name="magic")
    return _model([n], [_t("x", [1, 4])], [_t("y", [1, 4])])


def custom_domain_op() -> onnx.ModelProto:
    n = helper.make_node("MyOp", ["x"], ["y"], name="myop", domain="acme.ops")
    return _model([n], [_t("x", [1, 4])], [_t("y", [1, 4])], extra_opsets=[("acme.ops", 1)])
