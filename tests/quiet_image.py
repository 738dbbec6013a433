"""The test model of the synthetic-picture rule (studio.core.pictures): y = Relu(mean(x) - 0.5) * w over an image
x [1, 3, 32, 32]. Exactly 0 on Gaussian noise (its mean is ~0), positive on a light printed page: a candidate with
other weights ``w`` differs only where a picture is fed. Shared by the tests of optimize's verification,
precision and check."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import TensorProto, helper


def quiet_image_model(w: Sequence[float], floor: Sequence[float] | None = None) -> onnx.ModelProto:
    """``w``: the output's weights (its length is y's); opset 13, ReduceMean's axes an attribute (every engine).
    ``floor``: y = Relu(mean(x) - 0.5) * w + floor instead, so noise gives exactly ``floor`` (above the float32
    noise floor at 1e-3, yet a sliver of what a page gives: a DB detector's mask at the bottom of its sigmoid)."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0, axes=[1, 2, 3]),
             helper.make_node("Sub", ["m", "half"], ["d"]), helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Mul", ["r", "w"], ["y" if floor is None else "s"])]
    inits = [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
             helper.make_tensor("w", TensorProto.FLOAT, [len(w)], list(w))]
    if floor is not None:
        nodes.append(helper.make_node("Add", ["s", "floor"], ["y"]))
        inits.append(helper.make_tensor("floor", TensorProto.FLOAT, [len(floor)], list(floor)))
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [len(w)])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model
