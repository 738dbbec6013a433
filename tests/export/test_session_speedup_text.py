"""The export's "session creation N x faster than the original" line says slower when it is slower.

Found exporting the held-out corpus model oww_hey_marvin: the fast-start artifact took longer to open than
the original (session_speedup = original ms / artifact ms = 0.73) and the CLI printed "ONNX Runtime session
creation 0.73x faster than the original" (the report and the Export page said the same)."""

from __future__ import annotations

from studio.core.fmt import speedup_text
from studio.export.report import markdown_report


def test_speedup_text_says_slower_below_one():
    assert speedup_text(0.73) == "1.37x slower than"
    assert speedup_text(2.0) == "2.00x faster than"
    assert speedup_text(1.0) == "as fast as"


def test_report_says_slower_when_the_artifact_opens_slower():
    manifest = {"source": {"name": "m", "sha256": "0" * 64, "bytes": 1, "ir_version": 8, "opsets": {"": 17}},
                "failures": [], "targets": {},
                "verification": {"reference": "ORT", "criteria": "rtol 1e-4", "input_shapes": {"x": [1, 8]}},
                "benchmarks": {"note": "indicative", "onnxruntime": {
                    "session_speedup": 0.73, "fast-start": {"session_ms": 13.7, "latency_ms_median": 0.1},
                    "original (ORT defaults)": {"session_ms": 10.0, "latency_ms_median": 0.1}}},
                "deploy": {"notes": []}, "tools": {}}
    text = markdown_report(manifest)
    assert "session creation" in text
    assert "faster" not in text.split("session creation", 1)[1].split(".")[0]
    assert "**1.37x slower than** the original" in text
