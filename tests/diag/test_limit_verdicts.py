"""A check that runs into the studio's own time limit has learnt nothing about the engine: its
verdict is "unknown" with a finding that names the limit to raise, never "fails" (a busy CI
machine once turned a conversion that runs into a "fails")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio import api
from studio.core.errors import WorkerError
from tests.requirements import require_engine


def _slow_conv_chain(path: Path, layers: int = 24, channels: int = 64, side: int = 256) -> Path:
    """About 4.8 GFLOP per layer, 116 GFLOP in all: no CPU runs it inside 50 ms, so the limit is
    reached on any machine (cnn_unfused once finished inside 50 ms on a fast CI machine)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        prev = f"r{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    shape = [1, channels, side, side]
    graph = helper.make_graph(nodes, "slow_conv_chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_check_that_times_out_is_unknown_not_failing(monkeypatch, tmp_path):
    for e in ("onnxruntime", "openvino", "mnn"):
        require_engine(e)
    engines = ["onnxruntime", "openvino", "mnn"]
    model = _slow_conv_chain(tmp_path / "slow_conv_chain.onnx")    # code-built: only its run time matters
    monkeypatch.setenv("ONNX_STUDIO_TIMEOUT_S", "0.05")
    report = api.check(api.load(model), ",".join(engines), pool_key="limit-test")
    for engine in engines:
        v = report.verdict(engine)
        assert v.verdict == "unknown", (engine, v.verdict, v.summary)
        assert "limit" in v.summary and "--timeout" in v.summary
        limits = [f for f in report.findings if f.engine == engine and f.code.endswith("-LIMIT")]
        assert limits and limits[0].severity == "warning" and "raise --timeout" in limits[0].fix_hint
    monkeypatch.delenv("ONNX_STUDIO_TIMEOUT_S")
    again = api.check(api.load(model), ",".join(engines), pool_key="limit-test")
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
