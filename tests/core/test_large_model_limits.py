"""Large external-data models (issue 35 item 3): a job that holds one engine session of the model gets
room for its weights (``session_limits``), so check's ORT session and verification's reference/candidate
runs work on models larger than the configured worker limit instead of "exceeded the worker memory limit"
(verification fell back to "structure only" on a 6.4 GiB decoder under the 3 GiB default).

The model is code-built: a Gather over a [2.4 M, 64] float32 table (~590 MiB of external data, a sparse
file of zeros: no disk written, read as zeros by ONNX Runtime), with the worker limit configured at 0.5 GiB
(the mechanism is the same as 6.4 GiB under 3 GiB, at a tenth of the cost).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.core.sandbox import default_limits, model_bytes_on_disk, session_limits, shutdown_all

ROWS, COLS = 2_400_000, 64            # 614 MB: above the 0.5 GiB limit and the 512 MiB scaling floor


def _gather_model(folder: Path) -> Path:
    """ids [n] int64 -> Identity(Gather(table, ids)) [n, 64]; the table is external data (a sparse file)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = TensorProto(name="table", data_type=TensorProto.FLOAT, dims=[ROWS, COLS])
    table.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "model.onnx.data"), ("offset", "0"), ("length", str(ROWS * COLS * 4))):
        entry = table.external_data.add()
        entry.key, entry.value = key, value
    with open(folder / "model.onnx.data", "wb") as fh:
        fh.truncate(ROWS * COLS * 4)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], name="gather"),
         helper.make_node("Identity", ["rows"], ["out"], name="identity")],
        "large_gather",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", COLS])], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture
def large_model(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ONNX_STUDIO_MEMORY_GB", "0.5")
    shutdown_all()                      # no warm worker started under other limits
    yield _gather_model(tmp_path / "m")
    shutdown_all()


def test_session_limits_hold_the_weights(large_model):
    weights = model_bytes_on_disk(large_model)
    configured = default_limits().memory_bytes
    assert configured == 2**29 and weights > configured
    assert session_limits(None, large_model).memory_bytes >= weights + configured
    # Oracle: plain ONNX Runtime runs the model (zeros gathered)
    sess = ort.InferenceSession(str(large_model), providers=["CPUExecutionProvider"])
    assert not sess.run(None, {"ids": np.array([0, ROWS - 1], np.int64)})[0].any()


def test_check_runs_the_session_of_a_model_above_the_worker_limit(large_model):
    report = api.check(api.load(large_model), ["onnxruntime"], dims={"n": 2})
    texts = " ".join(f.message for f in report.findings)
    assert "worker memory limit" not in texts
    (verdict,) = [v for v in report.verdicts if v.engine == "onnxruntime"]
    assert verdict.verdict == "runs" and verdict.decided_by == "real session", verdict


def test_optimize_verifies_numbers_of_a_model_above_the_worker_limit(large_model, tmp_path):
    result = api.optimize(api.load(large_model), passes=["eliminate-identity"], dims={"n": 2},
                          out_path=tmp_path / "out" / "model.onnx")
    (record,) = result.records
    assert record.modified and record.verification is not None
    assert record.verification.numeric_status == "passed", record.verification.message
    assert "structure" not in result.reference
