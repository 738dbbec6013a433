"""Precision on real data: calibrate on a dataset's calibration part, judge every variant by a
task-metric target on its evaluation part; without data the report is only an estimate."""

from __future__ import annotations

import pytest

from sample_models.catalog import path_of
from studio import api
from studio.cli import main
from studio.core.errors import StudioError
from tests.requirements import require_module

require_module("nncf")


@pytest.fixture(scope="module")
def project_with_photos(module_projects_root):
    project = api.create_project("photos-demo")
    api.add_dataset(project, path_of("image_classifier").parent / "photos", name="photos",
                    model=api.load(path_of("image_classifier")), calibration_fraction=0.5)
    return project


def test_task_target_decides_and_accuracy_aware_nncf_meets_it(project_with_photos, tmp_path):
    ds = api.dataset(project_with_photos, "photos")
    report = api.precision(path_of("image_classifier"), variants=["fp32", "int8", "int8-nncf", "int8-nncf-aa"],
                           dataset=ds, target="top1-agreement>=0.99", latency_budget_s=0.5, out_dir=tmp_path / "v")
    assert not report.is_estimate and report.target == "top1-agreement>=0.99"
    assert "dataset photos" in report.basis
    by = {v.name: v for v in report.variants}
    assert by["fp32"].meets_target and by["fp32"].task["target_value"] == 1.0
    assert by["int8-nncf"].meets_target is False                     # the outlier channel flips top-1
    assert by["int8-nncf-aa"].meets_target is True and by["int8-nncf-aa"].task["target_met"] is True
    # ORT QDQ is a point of the same report: judged by the same metric, or failing its own verification
    int8 = by["int8"]
    if int8.status == "failed":          # its own verification refused it: said why, and not judged
        assert int8.error and int8.meets_target is False
    else:
        assert int8.status == "ok" and int8.task["target_value"] is not None
        assert int8.meets_target is int8.task["target_met"]
    assert report.to_dict()["variants"][0]["task"]["outputs"][0]["task"] == "classification"


def test_without_data_the_report_is_an_estimate(tmp_path):
    report = api.precision(path_of("image_classifier"), variants=["fp32", "int8"], latency_budget_s=0.5)
    assert report.is_estimate and report.summary().startswith("random-input estimate, not a recommendation")
    with pytest.raises(StudioError, match="needs a dataset"):
        api.precision(path_of("image_classifier"), variants=["fp32"], target="top1-agreement>=0.99")


def test_cli_dataset_needs_a_project(capsys):
    assert main(["precision", str(path_of("image_classifier")), "--dataset", "photos"]) == 2
    assert "add --project NAME" in capsys.readouterr().err


def test_ort_fallback_search_stops_at_the_task_target(project_with_photos, tmp_path):
    ds = api.dataset(project_with_photos, "photos")
    report = api.precision(path_of("image_classifier"), variants=["fp32", "int8-mixed"], dataset=ds,
                           target="top1-agreement>=0.99", latency_budget_s=0.5, out_dir=tmp_path / "v")
    mixed = {v.name: v for v in report.variants}["int8-mixed"]
    assert mixed.task is not None and mixed.task["target_met"] is True, (mixed.error, mixed.notes)
    assert mixed.meets_target
