"""`memory` on a model the studio's seeded dims cannot run (R39): the plan, ORT's optimized-graph plan and
the measurements are made at dims the input search finds (as check, optimize, export and compare do), and
the report says so; dims the user gave are never searched.

Found on the held-out corpus models silero_vad_v4_legacy and silero_vad_16k_op15: `memory` planned them at
sequence=16 (too short for their reflect Pad), so ONNX Runtime ran nothing ("not measured", "not planned")
and the peak was a lower bound (>= 3.3 KiB at step 2 of 2). Reproduced on a code-built silero-like front end."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from studio import api
from tests.seeded_input_models import silero_like


def _model(tmp_path):
    path = tmp_path / "vad.onnx"
    onnx.save(silero_like(), str(path))
    return path


def test_memory_plans_at_searched_dims_when_the_seeded_ones_fail(tmp_path):
    path = _model(tmp_path)
    r = api.memory_plan(api.load(path), engine_graph=True)
    assert dict(r.dims)["input[1]"] == 512, r.dims
    ort_plan = next(e for e in r.engine_plans if e.engine == "onnxruntime")
    assert ort_plan.error is None and ort_plan.plan is not None, ort_plan.error
    assert any("searched" in n and "512" in n for n in r.notes), r.notes
    # the oracle: plain ORT fails at the seeded length 16 and runs at 512; the padded frame tensor is
    # [1, 1, 512 + 128] float32 = 2560 bytes, live at the plan's peak or below it
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    try:
        sess.run(None, {"input": np.zeros((1, 16), np.float32)})
        raise AssertionError("16 samples should fail the reflect Pad")
    except Exception as exc:  # noqa: BLE001 - ORT's own error type
        assert "Pad" in str(exc)
    sess.run(None, {"input": np.zeros((1, 512), np.float32)})
    assert r.plan.peak_bytes >= 2560 and r.unknown_tensors == 0


def test_memory_keeps_the_users_dims(tmp_path):
    path = _model(tmp_path)
    r = api.memory_plan(api.load(path), {"input[1]": 16}, engine_graph=True)
    assert dict(r.dims)["input[1]"] == 16
    assert not any("searched" in n for n in r.notes)


def test_memory_without_engine_runs_searches_nothing(tmp_path):
    """No engine run asked for (--no-measure, no engine graph): nothing tells the seeded dims fail; no search."""
    path = _model(tmp_path)
    r = api.memory_plan(api.load(path), engine_graph=False)
    assert dict(r.dims)["input[1]"] == 16
