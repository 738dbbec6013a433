"""The Batch page and the Profile page's target picker through streamlit.testing.v1.AppTest."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES, metrics
from tests.requirements import require_module


def _batch_page(at):
    at.switch_page("views/batch.py").run()
    assert not at.exception
    return at


def test_local_batch_table_report_and_a_rerun_skips_finished_work(app):
    at = _batch_page(app().run())
    assert not at.radio and "no cluster is configured" in " ".join(c.value for c in at.caption)
    at.multiselect(key="batch_samples").set_value(["cnn_unfused", "if_loop"]).run()
    at.button(key="batch_run").click().run()
    assert not at.exception
    table = at.dataframe[0].value
    assert sorted(table["model"]) == ["cnn_unfused.onnx", "if_loop.onnx"]
    assert set(table["inspect"]) == {"ok"} and "check verdict" in table.columns
    assert metrics(at)["tasks run"] == "4" and metrics(at)["already finished"] == "0"
    assert {b.label for b in at.get("download_button")} >= {"Download report (HTML)", "Download report (CSV)"}
    at.button(key="batch_run").click().run()
    assert not at.exception
    assert metrics(at)["tasks run"] == "0" and metrics(at)["already finished"] == "4"
    assert list(at.dataframe[0].value["inspect"]) == list(table["inspect"])


def test_shared_mode_offers_no_folder_and_never_asks_for_a_cluster(app, monkeypatch):
    at = _batch_page(app(ONNX_STUDIO_SHARED="1", ONNX_STUDIO_CLUSTER="tcp://127.0.0.1:1").run())
    assert not [t for t in at.text_input if t.key == "batch_folder"]
    assert not at.text_input                  # no address box: the cluster is configuration only
    assert "Folders are not available" in " ".join(c.value for c in at.caption)


@pytest.fixture
def cluster(tmp_path):
    require_module("distributed")
    from studio.batch.loopback import LoopbackCluster

    c = LoopbackCluster(tmp_path / "cluster")
    try:
        yield c
    finally:
        c.close()


@pytest.mark.slow
def test_profile_target_picker_measures_on_the_chosen_target(app, cluster):
    at = app(str(SAMPLES / "cnn_unfused.onnx"), ONNX_STUDIO_CLUSTER=cluster.address).run()
    at.switch_page("views/profile.py").run()
    assert not at.exception
    picker = at.selectbox(key="profile_target")
    assert picker.options == ["local", "edge"]
    picker.set_value("edge")
    at.multiselect(key="profile_engines").set_value(["ort"])
    at.number_input(key="profile_iterations").set_value(5)
    at.number_input(key="profile_warmup").set_value(1)
    at.number_input(key="profile_rounds").set_value(2)
    at.run()
    at.button(key="profile_run").click().run()
    assert not at.exception
    measured = at.session_state["profile_measured_by"]
    assert measured.target == "edge" and measured.measured_by["target"] == "edge"
    assert any("Measured on target edge" in i.value for i in at.info)
    assert list(at.dataframe[0].value["variant"]) == ["t0-ort"]


def test_the_hint_names_models_by_the_names_the_user_knows_not_the_project_store(app):
    """As every page's hint (a model's file name): the Batch page's named the project store's absolute path
    (``/.../projects/<id>/models/<sha>/cnn_unfused.onnx``) and the sample models' install paths."""
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    _batch_page(at)
    versions = at.multiselect(key="batch_versions")
    assert len(versions.options) == 1
    versions.set_value([versions.options[0]]).run()
    at.multiselect(key="batch_samples").set_value(["if_loop"]).run()
    assert not at.exception
    (hint,) = [line for c in at.code for line in c.value.splitlines() if line.startswith("onnx-studio batch")]
    words = hint.split()
    assert words[2:4] == ["if_loop.onnx", "cnn_unfused.onnx"], hint
    assert "/" not in " ".join(words[2:4]) and "projects" not in hint
