"""MNN and LiteRT in the profiler: spec parsing, the interleaved harness with conversion and
load timed separately, and MNN per-op times attributed to ONNX nodes."""

from __future__ import annotations

import onnx
import pytest

from profilers.variants import EngineSpec, parse_engine, parse_engines
from studio import api
from studio.core.errors import StudioError
from tests.conftest import SAMPLES
from tests.profilers.test_profile_ops import _assert_mapped, _run_ops
from tests.requirements import require_engine


def _needs(*engines):
    for e in engines:
        require_engine(e)


def test_specs_round_trip_and_reject_bad_precisions():
    for key in ("mnn", "mnn:fp16", "mnn:int8", "litert", "litert:fp16", "litert:int8"):
        assert parse_engine(key).key == key
    assert parse_engine("tflite").engine == "litert"
    assert parse_engine("mnn:int8").label == "MNN CPU int8 weights"
    with pytest.raises(StudioError):
        parse_engine("litert:bf16")
    with pytest.raises(StudioError):
        parse_engine("mnn:throughput")
    _needs("mnn", "litert")
    keys = [s.key for s in parse_engines("all")]
    assert "mnn" in keys and "litert" in keys


def test_mnn_per_op_maps_convolutions_to_their_nodes(tmp_path):
    _needs("mnn")
    path = SAMPLES / "cnn_unfused.onnx"
    model = onnx.load(str(path))
    ops = _run_ops(path, model, EngineSpec("mnn", hint=None), tmp_path, runs=3)
    assert ops.engine == "mnn"
    _assert_mapped(ops, 0.7)
    anchors = {k.anchor for k in ops.kernels if k.op_type == "Convolution"}   # (MNN runs Gemm as one too)
    assert {n.name for n in model.graph.node if n.op_type == "Conv"} <= anchors


def test_profile_reports_conversion_and_load_separately(tmp_path):
    _needs("mnn", "litert")
    from profilers.profile import ProfileOptions

    p = api.profile([api.load(SAMPLES / "cnn_unfused.onnx")], "ort,mnn,litert",
                    ProfileOptions(warmup=2, iterations=10, rounds=3), out_dir=tmp_path)
    by = {v.id: v for v in p.variants}
    for vid in ("t0-mnn", "t0-litert"):
        cold = by[vid].cold
        assert cold is not None and cold.convert_ms is not None and cold.convert_ms > 0
        assert cold.session_ms is not None and cold.load_ms is None
    assert by["t0-ort"].cold.convert_ms is None
