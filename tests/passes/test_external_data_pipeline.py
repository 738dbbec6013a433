"""Models with external data through the pipeline: checkpoints read unchanged
weights from the original's folder (never copied, linked or written), worker
passes and verification see the same weights, and the result is self-contained."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import studio.core.model_io as model_io
from passes.pipeline import resolve_passes, run_passes
from tests.conftest import sha256_file


def _external_model(folder):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "var"),
             numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
             helper.make_node("GlobalAveragePool", ["b"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Mul", ["w2", "two"], ["w2x"]),          # foldable: runs in a worker
             helper.make_node("MatMul", ["f", "w2x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    folder.mkdir(parents=True)
    path = folder / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    return path


@pytest.mark.parametrize("inline_limit", [model_io.INLINE_LIMIT, 0], ids=["relocated", "self-contained"])
def test_safe_preset_on_external_data(tmp_path, monkeypatch, inline_limit):
    monkeypatch.setattr(model_io, "INLINE_LIMIT", inline_limit)
    src = _external_model(tmp_path / "user")
    data = tmp_path / "user" / "m.onnx.data"
    before = (sha256_file(src), sha256_file(data), data.stat().st_mtime_ns)
    r = run_passes(src, resolve_passes("safe"), tmp_path / "out" / "m.onnx")
    assert r.ok, [(x.name, x.status, x.message) for x in r.records]
    changed = {x.name for x in r.records if x.modified}
    assert {"fold-constants", "fuse-conv-bn"} <= changed
    assert all(x.verification.numeric_status == "passed" for x in r.records if x.modified)
    # The user's files: same bytes, never written, never hard-linked.
    assert (sha256_file(src), sha256_file(data), data.stat().st_mtime_ns) == before
    assert data.stat().st_nlink == 1
    # The result is self-contained and loads on its own; nothing else is left in the output folder.
    out = onnx.load(str(r.output))
    assert all(t.data_location != TensorProto.EXTERNAL for t in out.graph.initializer)
    assert sorted(os.listdir(tmp_path / "out")) == ["m.onnx"]
    onnx.checker.check_model(str(r.output), full_check=True)
