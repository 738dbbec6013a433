"""Session isolation (R29): two browser sessions never see each other's models
or results, and an ended session releases its workers and workspace."""

from __future__ import annotations

from studio import api
from studio.core.sandbox import pool_info, run_job
from tests.conftest import SAMPLES


def _metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_two_sessions_do_not_share_models(app):
    a = app().run()
    b = app().run()
    a.selectbox(key="sample_pick").set_value("if_loop").run()
    a.button(key="open_sample").click().run()
    assert _metrics(a)["Nodes"] == "22"
    b.run()
    assert not b.metric                          # B still has no model
    b.selectbox(key="sample_pick").set_value("cnn_unfused").run()
    b.button(key="open_sample").click().run()
    a.run()
    assert _metrics(a)["Nodes"] == "22" and _metrics(b)["Nodes"] == "37"
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
    assert _metrics(a)["Nodes"] == "37" and _metrics(b)["Nodes"] == "22"


def test_ended_session_releases_workers_and_keeps_the_project():
    """A session's end stops its workers; its project stays on disk (a reload finds it)."""
    from studio.ui.state import _Lifetime  # noqa: F401  (the finalizer's owner)

    p = api.create_project("kept")
    run_job("sandbox.selftest", {"action": "echo"}, stage="test", pool_key="ended-session")
    assert any(q["pool"] == "ended-session" for q in pool_info())
    api.release_session("ended-session")
    assert not any(q["pool"] == "ended-session" for q in pool_info())
    assert p.root.is_dir() and api.open_project(p.id).name == "kept"
