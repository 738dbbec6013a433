"""MNN and LiteRT precision variants: points on the same trade-off, judged by the same
metrics (cosine vs ORT fp32, latency in the same side-by-side run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio import api
from studio.core.engines import get_engine
from tests.conftest import SAMPLES


def test_mnn_and_litert_variants_are_measured_and_judged(tmp_path):
    for e in ("mnn", "litert"):
        if not get_engine(e).available().ok:
            pytest.skip(get_engine(e).available().reason)
    names = ["fp32", "fp32-mnn", "fp16-mnn", "int8-mnn", "int8w-mnn", "fp32-litert", "fp16-litert", "int8-litert"]
    report = api.precision(api.load(SAMPLES / "mobilenet_like.onnx"), variants=names, samples=4,
                           latency_budget_s=1, out_dir=tmp_path / "variants")
    by = {v.name: v for v in report.variants}
    assert set(names) <= set(by)
    for name in names:
        v = by[name]
        assert v.status == "ok", (name, v.error)
        assert v.latency_ms is not None and v.ratio is not None
    for name in ("fp32-mnn", "fp32-litert"):
        assert by[name].cosine > 0.9999
    for name in ("fp16-mnn", "fp16-litert"):
        assert by[name].cosine > 0.999
    for name in ("int8-mnn", "int8w-mnn", "int8-litert"):   # quantized, and still the same function
        assert 0.98 < by[name].cosine
    assert by["int8-litert"].engine == "litert" and by["int8-mnn"].precision == "int8"
    # full INT8 builds an artifact of the engine's own format, run as is; weight-only converts on the fly
    assert Path(by["int8-mnn"].path).suffix == ".mnn" and Path(by["int8-litert"].path).suffix == ".tflite"
    assert "quantized.out" in by["int8-mnn"].details["converter_command"]
