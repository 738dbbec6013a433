"""One precision run's static INT8 builds (int8, int8-mixed, int8-ov) share their calibration and measured
configurations through the run's memo folder (``passes.quant_memo``): each used to prepare, calibrate, quantize,
judge and time the same configurations again. The shared builds must give the same models as separate builds.
Run in this process so that spies on the real functions see every call."""

from __future__ import annotations

import onnx_ir as ir
import pytest

import passes.quant_tools as qt
from passes.registry import make_pass
from tests.passes.test_quantization import _outlier_model

# precision's rows (studio.precision.catalog): plain INT8, INT8 with float fallback, the OpenVINO twin
INT8 = {"fallback": False, "require_target": False}
MIXED: dict = {}
OV = {"config": "qdq-u8s8", "fallback": False, "require_target": False}


def _build(opts: dict) -> tuple[bytes, dict]:
    p = make_pass("quantize-int8-static", **{"target_cosine": 0.995, "budget_s": 0.3, "samples": 4, **opts})
    res = p.call(ir.serde.deserialize_model(_outlier_model()))
    assert res.modified
    return ir.serde.serialize_model(res.model).SerializeToString(), res.details


@pytest.fixture
def calls(monkeypatch):
    counted = {"prepare": 0, "calibrate": 0, "quantize": 0, "latency": []}

    def spy(name, real, key):
        def wrapped(*args, **kwargs):
            if key == "latency":
                counted[key].append(sorted(args[0]))          # the models timed together
            else:
                counted[key] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(qt, name, wrapped)

    spy("prepare", qt.prepare, "prepare")
    spy("calibrate", qt.calibrate, "calibrate")
    spy("quantize_static_config", qt.quantize_static_config, "quantize")
    spy("measure_latencies", qt.measure_latencies, "latency")
    return counted


def test_int8_variants_of_one_run_calibrate_and_time_once(tmp_path, monkeypatch, calls):
    monkeypatch.chdir(tmp_path)                       # the pass's scratch folder is made in the working folder
    memo = {"memo_dir": str(tmp_path / "memo")}
    plain, d_plain = _build({**INT8, **memo})
    assert calls["calibrate"] == 1 and calls["prepare"] == 1 and calls["quantize"] == 4
    assert calls["latency"] == [["fp32", "qdq-s8s8", "qdq-u8s8", "qdq-u8s8-dedicated", "qop-u8s8"]]
    assert not d_plain["target_met"]                  # plain INT8 misses 0.995: int8-mixed must fall back
    mixed, d_mixed = _build({**MIXED, **memo})
    ov, d_ov = _build({**OV, **memo})
    # one preparation, one calibration, one timing of the configurations for the three builds; int8-mixed
    # times only its fallback model, int8-ov nothing (its configuration was timed with int8's)
    assert calls["calibrate"] == 1 and calls["prepare"] == 1
    assert calls["latency"][1:] == [["fp32", "mixed"]]
    assert d_plain["reused_in_run"] == []
    assert d_mixed["reused_in_run"] == d_ov["reused_in_run"] == ["calibration", "configurations"]
    assert d_mixed["chosen"]["name"].endswith("-mixed") and d_mixed["target_met"]
    assert [c["name"] for c in d_mixed["candidates"][:4]] == [c["name"] for c in d_plain["candidates"]]
    assert d_mixed["candidates"][:4] == d_plain["candidates"]     # the same measurement, read back
    assert [c["name"] for c in d_ov["candidates"]] == ["qdq-u8s8"]
    assert d_ov["candidates"][0]["cosine"] == next(c for c in d_plain["candidates"]
                                                   if c["name"] == "qdq-u8s8")["cosine"]

    # the oracle: each built on its own, without the memo (int8-mixed with the configuration the shared build
    # fell back from, which the separate build then has no latency to choose)
    base = calls["calibrate"]
    fell_back_from = d_mixed["chosen"]["name"].removesuffix("-mixed")
    assert _build(INT8)[0] == plain
    assert _build({**MIXED, "config": fell_back_from})[0] == mixed
    assert _build(OV)[0] == ov
    assert calls["calibrate"] == base + 3              # without the memo every build calibrates again


def test_other_calibration_options_are_not_shared(tmp_path, monkeypatch, calls):
    monkeypatch.chdir(tmp_path)
    memo = {"memo_dir": str(tmp_path / "memo")}
    _build({**INT8, **memo})
    _build({**INT8, **memo, "method": "entropy"})     # another calibration: its own ranges
    _build({**INT8, **memo, "samples": 5})            # other calibration data
    assert calls["calibrate"] == 3 and len(calls["latency"]) == 3
