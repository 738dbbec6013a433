"""A check that runs into the studio's own time limit has learnt nothing about the engine: its
verdict is "unknown" with a finding that names the limit to raise, never "fails" (a busy CI
machine once turned a conversion that runs into a "fails")."""

from __future__ import annotations

import pytest

from studio import api
from studio.core.errors import WorkerError
from tests.conftest import SAMPLES
from tests.requirements import require_engine


def test_a_check_that_times_out_is_unknown_not_failing(monkeypatch):
    for e in ("onnxruntime", "openvino", "mnn"):
        require_engine(e)
    engines = ["onnxruntime", "openvino", "mnn"]
    monkeypatch.setenv("ONNX_STUDIO_TIMEOUT_S", "0.05")
    report = api.check(api.load(SAMPLES / "cnn_unfused.onnx"), ",".join(engines), pool_key="limit-test")
    for engine in engines:
        v = report.verdict(engine)
        assert v.verdict == "unknown", (engine, v.verdict, v.summary)
        assert "limit" in v.summary and "--timeout" in v.summary
        limits = [f for f in report.findings if f.engine == engine and f.code.endswith("-LIMIT")]
        assert limits and limits[0].severity == "warning" and "raise --timeout" in limits[0].fix_hint
    monkeypatch.delenv("ONNX_STUDIO_TIMEOUT_S")
    again = api.check(api.load(SAMPLES / "cnn_unfused.onnx"), ",".join(engines), pool_key="limit-test")
    assert all(again.verdict(e).verdict.startswith("runs") for e in engines)   # the same model, with room: it runs


@pytest.mark.parametrize("kind,expected", [("timeout", "--timeout"), ("memory", "--memory-gb"), ("crashed", None)])
def test_only_the_studios_limits_are_excused(kind, expected):
    from diagnostics.base import limit_reached

    got = limit_reached(WorkerError("OpenVINO check: stopped", kind=kind, stage="OpenVINO check"), "openvino",
                        "OpenVINO", "OV", "CPU")
    if expected is None:
        assert got is None                       # a real crash is evidence about the engine: it stays "fails"
    else:
        finding, verdict = got
        assert verdict.verdict == "unknown" and expected in verdict.summary and finding.code == "OV-LIMIT"
