"""Issue 33's "Done when" in a real Chromium: two projects, three models, one browser session that
switches model and project back and forth over the pages. Nothing of one model (its table, its Save
buttons, its name, its dims, its edit banner) is shown on another's page, and the one version saved
has the sha256 of a variant built from that model (the project's own files are the oracle).

Project alpha: cnn_unfused (m1, Precision run here) and yolo_detector (m2, its metadata-free sample
size 320 from its own hints). Project beta: a free-size image model whose metadata says 1280."""

from __future__ import annotations

import re

import onnx
import pytest

from studio import api
from tests.conftest import SAMPLES
from tests.e2e.conftest import wait_for_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _button(page, key: str):
    return page.locator(f".st-key-{key} button")


def _idle(page) -> None:
    page.wait_for_timeout(300)
    wait_for_app(page)


def _nav(page, title: str) -> None:
    """A page from the sidebar menu (the same browser session, as a user clicks it)."""
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title, exact=True).click()
    page.get_by_role("heading", name=title).first.wait_for()
    _idle(page)


def _pick_model(page, label: str) -> None:
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(has_text="Model").first.click()
    page.get_by_role("option", name=re.compile(re.escape(label))).click()
    model_id = label.split(" ", 1)[0]
    # the run is over once the URL names the model (written at the end of every run)
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('model') === '{model_id}'")
    _idle(page)


def _open_project(page, pid: str) -> None:
    _nav(page, "Projects")
    _button(page, f"proj_open_{pid}").click()
    page.get_by_role("heading", name="Overview").first.wait_for()
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('project') === '{pid}'")
    _idle(page)


def _main_text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def _dim_box(page, name: str) -> str:
    return page.locator('[data-testid="stNumberInput"]').filter(has_text=name).first.locator("input").input_value()


def _big_model(path) -> None:
    from tests.inspect.test_dims_everywhere import _model

    onnx.save(_model(), path)


def test_two_projects_three_models_never_mix(shared_studio, page, tmp_path, shots):
    alpha = api.create_project("alpha")
    cnn, cnn_v0 = api.add_model(alpha, SAMPLES / "cnn_unfused.onnx")
    yolo, _ = api.add_model(alpha, SAMPLES / "yolo_detector.onnx")
    beta = api.create_project("beta")
    _big_model(tmp_path / "big1280.onnx")
    big, _ = api.add_model(beta, tmp_path / "big1280.onnx")
    # cnn_unfused's Precision settings as a user left them (kept per model in the project): two variants, 5 s
    api.set_setting(alpha, "ui:precision_variants", ["fp32", "fp16"], model_id=cnn.id)
    api.set_setting(alpha, "ui:precision_budget", 5, model_id=cnn.id)

    server = shared_studio
    page.goto(f"{server.url}/precision?project={alpha.id}&model={cnn.id}")
    wait_for_app(page)
    page.get_by_role("heading", name="Precision").first.wait_for()
    _button(page, "precision_run").click()
    _button(page, "precision_save_fp16").wait_for(timeout=300_000)
    _idle(page)
    assert "fp16" in _main_text(page) and "cnn_unfused" in _main_text(page)
    shots(page, "1-precision-cnn")

    # the repro: another model of the project, the same page
    _pick_model(page, f"{yolo.id} · yolo_detector")
    text = _main_text(page)
    assert "yolo_detector" in text and "cnn_unfused" not in text
    assert _button(page, "precision_save_fp16").count() == 0 and page.locator('[data-testid="stDataFrame"]').count() == 0
    page.get_by_text("No result for this model").wait_for()          # it offers to run instead
    shots(page, "2-precision-yolo")
    _nav(page, "Overview")
    page.get_by_text("Dynamic dims").first.click()
    assert _dim_box(page, "height") == "320" and _dim_box(page, "width") == "320"     # yolo's own size

    # the other project: its model's own 1280, none of alpha's results or names
    _open_project(page, beta.id)
    page.get_by_text("Dynamic dims").first.click()
    assert _dim_box(page, "height") == "1280" and _dim_box(page, "width") == "1280"
    for title in ("Precision", "Graph", "Optimize", "Verify", "Export"):
        _nav(page, title)
        text = _main_text(page)
        assert "cnn_unfused" not in text and "yolo_detector" not in text, title
        assert "Saved as version" not in text and _button(page, "precision_save_fp16").count() == 0, title
    shots(page, "3-beta-pages")

    # back to alpha and its first model: its own result again, saved under it
    _open_project(page, alpha.id)
    _pick_model(page, f"{cnn.id} · cnn_unfused")
    _nav(page, "Precision")
    _button(page, "precision_save_fp16").wait_for()
    _button(page, "precision_save_fp16").click()
    page.get_by_text("saved as v1").wait_for()
    shots(page, "4-saved")
    assert [v.id for v in api.project_model(alpha, yolo.id).versions] == ["v0"]
    assert [v.id for v in api.project_model(beta, big.id).versions] == ["v0"]
    (v0, v1) = api.project_model(alpha, cnn.id).versions
    assert v1.parent == "v0" and v1.label == "fp16" and v1.provenance["source_sha256"] == cnn_v0.sha256
    built = {api.load(f).sha256 for f in alpha.root.rglob("*.onnx") if "artifacts" in f.parts and "fp16" in f.parts}
    assert v1.sha256 in built                     # the file saved is a variant the page built from cnn_unfused
    assert server.alive()
