"""The shapes run (inspect.run_shapes: ORT measures the shapes inference left open) reads a model's
external weights from their files instead of loading them into the proto it serializes (issue 35 item 3:
proto, its copy, the serialized bytes and the session held a 1.48 GiB decoder's weights 1.80x)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper

from studio.core.jobs import JobContext
from studio.inspect import edge_shapes


def test_the_shapes_run_reads_external_weights_from_their_file(tmp_path, monkeypatch):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal([256, 512]).astype(np.float32), "w")
    g = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                       oh.make_node("Relu", ["h"], ["y"], name="relu")], "ext",
                      [oh.make_tensor_value_info("x", T.FLOAT, ["n", 256])],
                      [oh.make_tensor_value_info("y", T.FLOAT, ["n", 512])], [w])
    path = tmp_path / "m" / "model.onnx"
    path.parent.mkdir()
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]), str(path), save_as_external_data=True,
              location="model.onnx.data", size_threshold=0)

    def loaded(*a, **k):
        raise AssertionError("the weights were loaded into the proto")

    monkeypatch.setattr(onnx, "load_external_data_for_model", loaded)
    out = edge_shapes.run_shapes_job({"model_path": str(path), "names": ["h", "y"], "dims": {"n": 3},
                                      "keys": ["n"], "input_shapes": {"x": [3, 256]}, "external": True},
                                     {}, JobContext(tmp_path, tmp_path))
    # Oracle: plain ONNX Runtime on the file (its own external-data reader)
    x = np.ones([3, 256], np.float32)
    (y,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})
    assert out.data["shapes"] == {"h": [3, 512], "y": list(y.shape)}
    assert out.data["dtypes"] == {"h": "float32", "y": "float32"}


def test_ort_optimized_graph_of_an_external_data_model_leaves_the_weights_in_files(tmp_path, monkeypatch):
    """The memory plan's 'ORT as users run it' job: ORT reads the weights from the model's folder and writes
    its optimized graph's beside it (it loaded them into the proto: 1.81x a 1.48 GiB decoder, then past the
    3 GiB worker limit; now 1.07x). The optimized graph and its shapes are those of the same model with its
    weights inline (the previous path)."""
    from studio.inspect.ort_optimized import ort_optimized_job

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal([64, 128]).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal([128]).astype(np.float32), "b")]
    g = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                       oh.make_node("Add", ["h", "b"], ["a"], name="add"),
                       oh.make_node("Relu", ["a"], ["y"], name="relu")], "ext",
                      [oh.make_tensor_value_info("x", T.FLOAT, [4, 64])],
                      [oh.make_tensor_value_info("y", T.FLOAT, [4, 128])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    inline, external = tmp_path / "inline" / "model.onnx", tmp_path / "ext" / "model.onnx"
    inline.parent.mkdir(), external.parent.mkdir()
    onnx.save(m, str(inline))
    onnx.save(m, str(external), save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    feeds = {"x": np.ones([4, 64], np.float32)}

    def run(path, flag, scratch):
        scratch.mkdir()
        return ort_optimized_job({"model_path": str(path), "external": flag, "static": {}}, feeds,
                                 JobContext(scratch, scratch))

    want = run(inline, False, tmp_path / "s1")

    def loaded(*a, **k):
        raise AssertionError("the weights were loaded into the proto")

    monkeypatch.setattr(onnx, "load_external_data_for_model", loaded)
    got = run(external, True, tmp_path / "s2")
    assert (tmp_path / "s2" / "optimized.onnx.data").stat().st_size >= 64 * 128 * 4   # ORT wrote them there
    assert got.data["shapes"] == want.data["shapes"] and got.data["dtypes"] == want.data["dtypes"]
    ops = [onnx.load_model_from_string(r.arrays["model"].tobytes()).graph.node for r in (want, got)]
    assert [n.op_type for n in ops[0]] == [n.op_type for n in ops[1]]
