"""Every page, switched from one model to another in one AppTest session (issue 33, R59): nothing of the
first model (its name, its results, its buttons) is on the second's page. Verify and Optimize run on
the first model, so their results are there to leak; the other pages are read as they open.

Oracle: the text of every element the page draws (AppTest), searched for the first model's name and
for the result's own markers."""

from __future__ import annotations

import pytest

from studio import api
from tests.conftest import ROOT, open_sample

pytestmark = pytest.mark.slow

# Every page of studio/ui/views (a new page is switched too, without editing this list).
PAGES = sorted(p.stem for p in (ROOT / "studio" / "ui" / "views").glob("*.py") if not p.stem.startswith("_"))
# Pages about the project rather than the open model: Data (its datasets), Batch (folders of models),
# Projects (its listing names every model of the project, by design).
PROJECT_PAGES = ("data", "batch", "projects")
KINDS = ("markdown", "caption", "info", "success", "warning", "error", "title", "header", "subheader", "code",
         "text", "metric", "exception", "json")


def _text(at) -> str:
    parts = []
    for kind in KINDS:
        for el in at.get(kind):
            parts.append(str(getattr(el, "value", "")) + " " + str(getattr(el, "label", "") or ""))
    for df in at.dataframe:
        parts.append(df.value.to_string())
    return " ".join(parts).replace("\\", "")


def _two_models(app):
    at = open_sample(app().run(), "cnn_unfused")
    pid = at.session_state["onnx_studio_project"]
    first = at.session_state["onnx_studio_model"]
    api.rename_project(pid, "two models")         # named after the first model otherwise (the sidebar says it)
    api.set_setting(pid, "ui:compat_engines", ["onnxruntime"], model_id=first)
    return at, pid, first


def _second(at, pid):
    at.switch_page("views/overview.py").run()
    open_sample(at, "mobilenet_like")
    api.set_setting(pid, "ui:compat_engines", ["onnxruntime"], model_id=at.session_state["onnx_studio_model"])
    return at


def test_every_page_is_switched():
    assert len(PAGES) >= 13 and {"batch", "projects", "overview", "precision"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_no_page_shows_the_previous_models_name(app, page):
    at, pid, _ = _two_models(app)
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, at.exception
    assert "cnn_unfused" in _text(at) or page in ("data", "batch")  # the first model is on its own page
    _second(at, pid).switch_page(f"views/{page}.py").run()
    assert not at.exception, at.exception
    text = _text(at)
    if page == "projects":        # the project's listing: both models, each once, the second one included
        (models,) = [d.value for d in at.dataframe if "model id" in d.value.columns]
        assert sorted(models["model"]) == ["cnn_unfused", "mobilenet_like"], models
        return
    assert "cnn_unfused" not in text, page
    if page not in PROJECT_PAGES:
        assert "mobilenet_like" in text, page                          # ...and the second one on its page


def test_verify_and_optimize_results_stay_with_their_model(app):
    at, pid, first = _two_models(app)
    at.switch_page("views/verify.py").run()
    at.selectbox(key="verify_engine_b").set_value("onnxruntime").run()
    at.button(key="verify_run").click().run()
    assert any(s.value.startswith("PASS") for s in at.success), [e.value for e in at.error]
    at.switch_page("views/optimize.py").run()
    at.button(key="opt_run").click().run()
    assert not at.exception, at.exception
    assert any(d.value.shape[0] and "pass" in d.value.columns for d in at.dataframe)     # its report
    made = at.session_state["onnx_studio_version"]
    assert made == "v1"

    _second(at, pid)
    for page in ("verify", "optimize"):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, at.exception
        assert not any(s.value.startswith("PASS") for s in at.success), page
        assert not any("pass" in d.value.columns for d in at.dataframe), page
        assert not [s.value for s in at.info if "Saved as version" in s.value], page
    assert [v.id for v in api.project_model(pid, at.session_state["onnx_studio_model"]).versions] == ["v0"]
