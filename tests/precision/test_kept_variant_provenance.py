"""Issue 34, item 3: a precision variant kept as a version records one provenance whoever keeps it.

The CLI's ``--project`` run stored ``{precision, cosine, recommended}`` and the page's Save
``{source, variant, engine, measured, pipeline...}``; the lineage view reads ``pipeline``, so a version kept
from the CLI had no pass lineage. Both now store ``PrecisionReport.provenance``: the request that built the
variant and its measured result. Oracle: the project catalog's versions, read back, and the lineage walk
the graph view's diff uses (``lineage_between``)."""

from __future__ import annotations

import pytest

from studio import api
from studio.cli import main
from studio.graphview.lineage import lineage_between
from tests.conftest import SAMPLES, current_model, open_sample


def _kept(model, label: str):
    (v,) = [v for v in model.versions if v.label == label]
    return v


@pytest.mark.slow
def test_cli_and_page_keep_the_same_provenance_with_lineage(app):
    assert main(["precision", str(SAMPLES / "cnn_unfused.onnx"), "--variants", "fp32,fp16", "--budget", "1",
                 "--project", "kept-from-cli"]) == 0
    project = api.open_project("kept-from-cli")
    (info,) = api.project_models(project)
    cli_model = api.project_model(project, info.id)
    from_cli = _kept(cli_model, "precision: fp16")

    at = open_sample(app().run(), "cnn_unfused")
    at.switch_page("views/precision.py").run()
    at.multiselect(key="precision_variants").set_value(["fp32", "fp16"]).run()
    at.number_input(key="precision_budget").set_value(5).run()
    at.button(key="precision_run").click().run()
    at.button(key="precision_save_fp16").click().run()
    assert not at.exception, at.exception
    page_model = current_model(at)
    from_page = _kept(page_model, "fp16")

    assert set(from_cli.provenance) == set(from_page.provenance)
    for model, v in ((cli_model, from_cli), (page_model, from_page)):
        p = v.provenance
        assert p["source"] == "precision" and p["variant"] == "fp16" and p["source_sha256"] == model.version("v0").sha256
        assert p["request"]["variants"] == ["fp32", "fp16"]
        assert p["measured"]["cosine"] > 0.99
        lineage = lineage_between(model, "v0", v.id)           # what the graph view's diff reads
        assert [r["name"] for r in lineage] == [r["name"] for r in p["pipeline"]] and lineage
        assert any(r["name"].startswith("convert-fp16") or "fp16" in r["name"] for r in lineage), lineage
    assert from_cli.provenance["request"]["latency_budget_s"] == 1.0
    assert from_page.provenance["request"]["latency_budget_s"] == 5.0
