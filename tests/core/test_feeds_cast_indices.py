"""Seeded feeds for a float input the graph casts to integer indices (a OneHot's, a Gather's): whole numbers in
the valid range, as magika's "bytes" input (float, Cast to int, OneHot of depth 257) needs. N(0, 1) floats cast
to int gave about 5 distinct values there, so a verification covered almost none of the model's input space."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from studio.core.feeds import input_specs, random_feeds


def _model(tmp_path, op: str, size: int):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 512])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Cast", ["x"], ["ids"], to=TensorProto.INT64)]
    if op == "OneHot":
        inits = [numpy_helper.from_array(np.array([size], np.int64), "depth"),
                 numpy_helper.from_array(np.array([0, 1], np.float32), "values")]
        nodes.append(helper.make_node("OneHot", ["ids", "depth", "values"], ["y"], axis=-1))
    else:
        inits = [numpy_helper.from_array(np.arange(size * 4, dtype=np.float32).reshape(size, 4), "table")]
        nodes.append(helper.make_node("Gather", ["table", "ids"], ["y"], axis=0))
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / f"{op}.onnx"
    onnx.save(m, path)
    return m, path


def _check(tmp_path, op: str, size: int) -> None:
    m, path = _model(tmp_path, op, size)
    [spec] = input_specs(m)
    assert spec.role == "indices" and (spec.low, spec.high) == (0, size)
    x = random_feeds((spec,), {"batch": 2})["x"]
    assert x.dtype == np.float32 and np.array_equal(x, np.round(x))          # whole numbers
    assert x.min() >= 0 and x.max() < size and len(np.unique(x)) >= 0.9 * size   # the whole valid range
    y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]   # the oracle
    if op == "OneHot":
        assert np.array_equal(y.argmax(-1), x.astype(np.int64)) and np.all(y.sum(-1) == 1)
    else:
        assert np.array_equal(y[..., 0], x * 4)        # table row k starts at 4k: each id picked its own row


def test_a_float_input_cast_to_one_hot_indices_gets_whole_numbers_below_the_depth(tmp_path):
    _check(tmp_path, "OneHot", 257)


def test_a_float_input_cast_to_gather_indices_gets_whole_numbers_below_the_table(tmp_path):
    _check(tmp_path, "Gather", 50)


def test_an_int_input_compared_with_a_class_vector_gets_every_class(tmp_path):
    """jax's one_hot (corpus magika_standard_v3_3): Equal(Expand(Reshape(ids)), iota[1, 1, 257]) -> Cast. The
    classes are 0..256, so seeded ids cover [0, 257), not 0..9; plain ORT's one-hot rows name each id."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT32, ["batch", 512])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(np.array([-1, 512, 1], np.int64), "shape"),
             numpy_helper.from_array(np.arange(257, dtype=np.int32).reshape(1, 1, 257), "iota")]
    nodes = [helper.make_node("Reshape", ["ids", "shape"], ["r"]), helper.make_node("Equal", ["r", "iota"], ["eq"]),
             helper.make_node("Cast", ["eq"], ["y"], to=TensorProto.FLOAT)]
    m = helper.make_model(helper.make_graph(nodes, "g", [ids], [y], inits), opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "jax_one_hot.onnx"
    onnx.save(m, path)
    [spec] = input_specs(m)
    assert spec.role == "indices" and (spec.low, spec.high) == (0, 257)
    x = random_feeds((spec,), {"batch": 2})["ids"]
    assert x.dtype == np.int32 and x.min() >= 0 and x.max() <= 256 and len(np.unique(x)) >= 0.9 * 257
    out = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"ids": x})[0]
    assert np.all(out.sum(-1) == 1) and np.array_equal(out.argmax(-1), x.reshape(-1, 512))   # every id a class
