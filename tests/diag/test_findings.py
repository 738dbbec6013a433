"""Finding/Report: verdict logic, grouping, fixes order, JSON round trip."""

from __future__ import annotations

import json

import pytest

from diagnostics.base import verdict_from
from studio.core.findings import EngineVerdict, Finding, NodeVerdict, Report, dedupe


def _report(findings, verdicts=(), nodes=()):
    return Report("m", "0" * 64, dedupe(findings), tuple(verdicts), tuple(nodes), ("onnxruntime",))


def test_finding_is_one_line_and_validates_severity():
    f = Finding("X", "error", "two\nlines\r\nhere")
    assert f.message == "two lines here"
    with pytest.raises(ValueError):
        Finding("X", "fatal", "m")


def test_verdict_counts_only_this_engine_target():
    fs = [Finding("A", "error", "a", "openvino", target="CPU"), Finding("B", "warning", "b", "onnxruntime",
                                                                        target="CPUExecutionProvider"),
          Finding("C", "error", "c")]  # engine-independent: not this engine's verdict
    v = verdict_from("onnxruntime", "CPUExecutionProvider", fs, "real session", ran=True)
    assert (v.verdict, v.errors, v.warnings) == ("runs with warnings", 0, 1)
    assert verdict_from("openvino", "CPU", fs, "real session").verdict == "fails"
    assert verdict_from("onnxruntime", "CPUExecutionProvider", [], "real session", ran=False).verdict == "fails"
    assert verdict_from("tensorrt", "10.x", [], "not checked").verdict == "unknown"


def test_report_groups_fixes_and_round_trips():
    fs = [Finding("CUSTOM-OP", "warning", "w", node="/n", op_type="g", fix_pass="p-warn"),
          Finding("ORT-NO-KERNEL", "error", "e", "onnxruntime", "/n", "g", "d", "CPU", fix_pass="p-err"),
          Finding("ORT-NO-KERNEL", "error", "e", "onnxruntime", "/n", "g", "d", "CPU", fix_pass="p-err")]
    nodes = [NodeVerdict("/n", "g", "d", "onnxruntime", "CPU", "unsupported"),
             NodeVerdict("/m", "Conv", "", "onnxruntime", "CPU", "supported")]
    r = _report(fs, [EngineVerdict("onnxruntime", "CPU", "fails", "real session", "e")], nodes)
    assert len(r.findings) == 2 and r.findings[0].is_error          # de-duplicated, errors first
    assert r.fixes() == ("p-err", "p-warn")
    assert set(r.by_node()) == {"/n"} and set(r.by_engine()) == {"onnxruntime", "any"}
    assert r.matrix()["d::g"]["onnxruntime (CPU)"] == {"unsupported": 1}
    assert not r.ok and r.has_errors_for(["onnxruntime"]) and not r.has_errors_for(["openvino"])
    back = Report.from_dict(json.loads(r.to_json()))
    assert back.findings == r.findings and back.verdicts == r.verdicts and back.nodes == r.nodes
