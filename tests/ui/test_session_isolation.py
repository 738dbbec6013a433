"""Session isolation (R29): two browser sessions never see each other's models
or results, and an ended session releases its workers and workspace."""

from __future__ import annotations

from studio import api
from studio.core.sandbox import pool_info, run_job
from tests.conftest import SAMPLES, metrics, open_sample


def test_two_sessions_do_not_share_models(app):
    a = app().run()
    b = app().run()
    open_sample(a, "if_loop")
    assert metrics(a)["Nodes"] == "22"
    b.run()
    assert not b.metric                          # B still has no model
    open_sample(b, "cnn_unfused")
    a.run()
    assert metrics(a)["Nodes"] == "22" and metrics(b)["Nodes"] == "37"
    pa, pb = a.session_state["onnx_studio_project"], b.session_state["onnx_studio_project"]
    assert pa != pb
    assert [m.versions for m in api.project_models(pa)] == [1] and [m.versions for m in api.project_models(pb)] == [1]


def test_same_file_name_different_content_is_not_confused(app, tmp_path):
    """Caches are keyed by content and session, not by file name."""
    import shutil

    one, two = tmp_path / "1" / "model.onnx", tmp_path / "2" / "model.onnx"
    one.parent.mkdir()
    two.parent.mkdir()
    shutil.copy(SAMPLES / "cnn_unfused.onnx", one)
    shutil.copy(SAMPLES / "if_loop.onnx", two)
    a = app(str(one)).run()
    b = app(str(two)).run()
    assert metrics(a)["Nodes"] == "37" and metrics(b)["Nodes"] == "22"


def test_ended_session_releases_workers_and_keeps_the_project():
    """A session's end stops its workers; its project stays on disk (a reload finds it)."""
    from studio.ui.state import _Lifetime  # noqa: F401  (the finalizer's owner)

    p = api.create_project("kept")
    run_job("sandbox.selftest", {"action": "echo"}, stage="test", pool_key="ended-session")
    assert any(q["pool"] == "ended-session" for q in pool_info())
    api.release_session("ended-session")
    assert not any(q["pool"] == "ended-session" for q in pool_info())
    assert p.root.is_dir() and api.open_project(p.id).name == "kept"
