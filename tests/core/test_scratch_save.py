"""A scratch model written twice under one name (studio.core.save.save_scratch: the passes' scratch
models, the layer-wise working copy, OpenVINO's fixed-shape copy, the Python-op session's model).

Over the external-data threshold onnx.save_model appends the tensors to an existing ``<name>.data``: a second
write of the same scratch name doubled the file (a 2.6 GB fp16 range model would leave 5.2 GB) while the model
still read right, its offsets pointing past the stale copy. Oracle: the tensors' own byte count, and the values
read back by onnx's own loader against numpy. The threshold is lowered here instead of writing 1.8 GB."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from studio.core import save


def _model(values: np.ndarray) -> onnx.ModelProto:
    w = numpy_helper.from_array(values, "w")
    node = helper.make_node("Add", ["x", "w"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_second_external_scratch_write_replaces_the_data_file(tmp_path, monkeypatch):
    monkeypatch.setattr(save, "SCRATCH_EXTERNAL_BYTES", 0)
    path = tmp_path / "ranges.onnx"
    first, second = np.arange(256, dtype=np.float32), np.full(256, 7.0, dtype=np.float32)
    save.save_scratch(_model(first), path)
    save.save_scratch(_model(second), path)
    data = tmp_path / "ranges.onnx.data"
    assert data.stat().st_size == second.nbytes            # one copy of the tensor, not two
    back = onnx.load_model(str(path))
    np.testing.assert_array_equal(numpy_helper.to_array(back.graph.initializer[0]), second)


def test_under_the_threshold_the_model_is_one_file(tmp_path):
    path = tmp_path / "staged.onnx"
    save.save_scratch(_model(np.ones(256, dtype=np.float32)), path)
    assert not (tmp_path / "staged.onnx.data").exists()
    assert onnx.load_model(str(path)).graph.initializer[0].raw_data


def test_external_true_moves_tensors_out_at_any_size(tmp_path):
    path = tmp_path / "model.onnx"
    values = np.arange(256, dtype=np.float32)
    save.save_scratch(_model(values), path, external=True)
    assert (tmp_path / "model.onnx.data").stat().st_size == values.nbytes
    assert not onnx.load_model(str(path), load_external_data=False).graph.initializer[0].raw_data
