"""MNN and LiteRT checks: verdicts from a real conversion and run, conversion failures
attributed to ONNX nodes from the converters' logs, versions reported, layout and name
mapping said in the notes."""

from __future__ import annotations

from studio import api
from tests.conftest import SAMPLES
from tests.requirements import require_engine


def _needs(*engines):
    for e in engines:
        require_engine(e)


def test_runs_on_both_with_versions_and_layout_note():
    _needs("mnn", "litert")
    report = api.check(api.load(SAMPLES / "cnn_unfused.onnx"), "mnn,litert")
    for engine in ("mnn", "litert"):
        v = report.verdict(engine)
        assert v.verdict == "runs" and v.decided_by == "real session"
        assert report.tool_versions[engine]
    assert any("LiteRT: layout handled" in n and "N..C" in n for n in report.notes)
    assert any("MNN: outputs mapped to ONNX names" in n for n in report.notes)
    nodes = [n for n in report.nodes if n.engine == "mnn"]
    assert nodes and all(n.status == "supported" for n in nodes)


def test_unsupported_custom_op_is_attributed_to_its_node():
    _needs("mnn", "litert")
    report = api.check(api.load(SAMPLES / "mmdeploy_grid_sampler.onnx"), "mnn,litert")
    for engine, code in (("mnn", "MNN-UNSUPPORTED"), ("litert", "LITERT-UNSUPPORTED")):
        assert report.verdict(engine).verdict == "fails"
        hits = [f for f in report.findings if f.engine == engine and f.code == code]
        assert [f.node for f in hits] == ["/grid_sampler"], hits
        statuses = {n.node: n.status for n in report.nodes if n.engine == engine}
        assert statuses["/grid_sampler"] == "unsupported"
        assert {s for k, s in statuses.items() if k != "/grid_sampler"} == {"unknown"}


def test_litert_names_the_node_onnx2tf_stops_at():
    _needs("litert")
    report = api.check(api.load(SAMPLES / "gridsample_5d.onnx"), "litert")
    assert report.verdict("litert").verdict == "fails"
    (f,) = [f for f in report.findings if f.code == "LITERT-UNSUPPORTED"]
    assert f.node == "/GridSample" and f.op_type == "GridSample"


def test_engines_all_includes_both():
    from diagnostics.compatibility import normalize_engines

    assert normalize_engines("ort,openvino,tensorrt,mnn,litert") == normalize_engines("all")
