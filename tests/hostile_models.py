"""Models known to break engines or tools, built in code (RELIABILITY.md)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def conv_without_weight() -> onnx.ModelProto:
    """88 bytes: OpenVINO 2026.4's ONNX reader dies with SIGSEGV on it (found by the fuzzer);
    ORT refuses it cleanly. The checker rejects it too, but engines see it first in a naive tool."""
    g = helper.make_graph([helper.make_node("Conv", ["x"], ["y"], name="conv_without_weight")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def dangling_input(name: str = "missing") -> onnx.ModelProto:
    """One Relu that reads ``name``, which nothing produces: onnx.checker refuses it ("Nodes in a graph
    must be topologically sorted, however input 'missing' ...")."""
    g = helper.make_graph([helper.make_node("Relu", [name], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def endless_loop(trip_count: int = 2**62 - 1, constant: bool = True) -> onnx.ModelProto:
    """A Loop whose trip count is huge: constant (foldable) or an input."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "one"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    inits = [helper.make_tensor("cond", TensorProto.BOOL, [], [True])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])]
    if constant:
        inits.append(helper.make_tensor("n", TensorProto.INT64, [], [trip_count]))
    else:
        inputs.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
    g = helper.make_graph([helper.make_node("Loop", ["n", "cond", "x"], ["y"], body=body)], "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def expand_bomb(gib: int = 8) -> onnx.ModelProto:
    """Expand a scalar to ``gib`` GiB of float32."""
    n = gib * 2**30 // 4
    g = helper.make_graph([helper.make_node("Expand", ["x", "shape"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("shape", TensorProto.INT64, [1], [n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
