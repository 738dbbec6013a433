"""The pages show each output's inferred task with its reason, let the user change it (kept in the
project for the model), and offer only the targets that apply to the outputs' tasks (R49)."""

from __future__ import annotations

import shlex

from sample_models.catalog import path_of
from studio import api
from tests.conftest import sample_with_photos


def _metric_options(at, key):
    return list(at.selectbox(key=key).options)


def test_precision_page_offers_only_applicable_targets_and_keeps_the_chosen_task(app):
    at, pid = sample_with_photos(app, "caffe_classifier")
    at.switch_page("views/precision.py").run()
    assert not at.exception, at.exception
    at.radio(key="precision_calib_kind").set_value("Dataset").run()
    assert not at.exception, at.exception
    # the 2-class softmax: its reason on the page; top-5 is not offered (2 classes), top-1 is the default
    assert any("[batch, 2] softmax over the last axis" in c.value.replace("\\", "") for c in at.caption)
    options = _metric_options(at, "precision_metric")
    assert "top1-agreement" in options and "top5-agreement" not in options and "map-drop" not in options
    assert at.selectbox(key="precision_metric").value == "top1-agreement"
    # the user says the output is a regression: the project keeps it and the targets follow
    at.selectbox(key="precision_task_0").set_value("regression").run()
    assert not at.exception, at.exception
    handle = api.load(path_of("caffe_classifier"))                      # the same content as the opened sample
    assert api.stored_output_tasks(pid, handle) == {"prob": "regression"}
    options = _metric_options(at, "precision_metric")
    assert "top1-agreement" not in options and {"cosine", "max-abs", "max-rel"} <= set(options)
    # the hint carries the chosen task as the parser reads it back (quoted only where the shell needs it)
    hints = [shlex.split(c.value.replace("\\\n", " "))[1:] for c in at.code if "onnx-studio precision" in c.value]
    assert hints and all("prob=regression" == h[h.index("--task") + 1] for h in hints), hints
    # back to the inferred task: forgotten
    at.selectbox(key="precision_task_0").set_value("auto").run()
    assert api.stored_output_tasks(pid, handle) == {}
    assert "top1-agreement" in _metric_options(at, "precision_metric")
