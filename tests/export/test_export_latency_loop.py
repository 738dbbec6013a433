"""Export's artifact latency goes through the studio's one latency loop (issue 32 item 7; issue 34 item 1:
through the engine's runner too): export's one run job, ``export.run``, hands the runner's bound call to
``profilers.latency.timed_rounds`` instead of plain median loops of its own, and the timing record keeps its
fields (``export --json`` / the manifest's benchmarks).

Mechanism: the job runs in this process with ``timed_rounds`` wrapped by a spy; the spy sees one variant,
one round of ``runs`` calls of the session's own ``run`` / the request's ``infer``. Oracle for the value:
the median of the samples the loop returned (numpy), and the outputs of a plain onnxruntime run."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import profilers.latency as latency
from studio.core.jobs import JobContext
from tests.conftest import SAMPLES

ORT_FIELDS = {"version", "session_ms", "session_ms_all", "first_inference_ms", "latency_ms_median", "runs"}
OV_FIELDS = ORT_FIELDS | {"read_ms", "compile_ms"}


@pytest.fixture
def spy(monkeypatch):
    calls: list[dict] = []
    real = latency.timed_rounds

    def wrapped(calls_arg, blocks, **kw):
        run = real(calls_arg, blocks, **kw)
        calls.append({"fns": {k: fn for k, (fn, _a) in calls_arg.items()}, "blocks": dict(blocks), "run": run})
        return run

    monkeypatch.setattr(latency, "timed_rounds", wrapped)
    return calls


def _feeds():
    return {"input": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}


def test_ort_artifact_timing_calls_the_one_loop(spy, tmp_path):
    from studio.export.artifact_run import artifact_run_job

    path = SAMPLES / "cnn_unfused.onnx"
    out = artifact_run_job({"engine": "onnxruntime", "model_path": str(path), "runs": 7, "session_runs": 1,
                            "runner_args": {"graph_optimization_level": "disable"}}, _feeds(),
                           JobContext(tmp_path, tmp_path))
    timing = out.data["timing"]
    assert set(timing) == ORT_FIELDS
    (call,) = spy
    assert call["blocks"] == {"artifact": [7]}
    (fn,) = call["fns"].values()
    run = getattr(fn, "func", fn)          # the ORT runner's bound call: partial(session.run, None, feeds)
    assert getattr(run, "__name__", "") == "run" and isinstance(run.__self__, ort.InferenceSession)
    samples = call["run"].samples_ms["artifact"]
    assert timing["runs"] == samples.size == 7
    assert timing["latency_ms_median"] == round(float(np.median(samples)), 3)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, _feeds())[0]
    (got,) = out.arrays.values()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_ov_artifact_timing_calls_the_one_loop(spy, tmp_path):
    import openvino as ov

    from studio.export.artifact_run import artifact_run_job

    xml = tmp_path / "model.xml"
    ov.save_model(ov.convert_model(str(SAMPLES / "cnn_unfused.onnx")), str(xml), compress_to_fp16=False)
    out = artifact_run_job({"engine": "openvino", "model_path": str(xml), "runs": 5,
                            "runner_args": {"openvino_ir": True}}, _feeds(), JobContext(tmp_path, tmp_path))
    timing = out.data["timing"]
    assert set(timing) == OV_FIELDS
    (call,) = spy
    assert call["blocks"] == {"artifact": [5]}
    (fn,) = call["fns"].values()
    assert getattr(fn, "__name__", "") == "infer"
    samples = call["run"].samples_ms["artifact"]
    assert timing["runs"] == samples.size == 5
    assert timing["latency_ms_median"] == round(float(np.median(samples)), 3)


def test_no_timing_runs_no_loop(spy, tmp_path):
    from studio.export.artifact_run import artifact_run_job

    out = artifact_run_job({"engine": "onnxruntime", "model_path": str(SAMPLES / "cnn_unfused.onnx"), "runs": 0},
                           _feeds(), JobContext(tmp_path, tmp_path))
    assert spy == [] and out.data["timing"]["latency_ms_median"] is None and out.data["timing"]["runs"] == 0


def test_export_modules_keep_no_latency_loop_of_their_own():
    import inspect

    import studio.export.artifact_run as artifact_run

    src = inspect.getsource(artifact_run)
    assert "latencies" not in src and "statistics.median" not in src and "np.median" not in src
