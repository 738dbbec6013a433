"""Projects in the UI (AppTest): the URL restores project/model/version after a reload,
each model has its own version picker, page settings persist in the project, the Projects
page renames/duplicates/deletes (after confirmation), and --shared sessions see only their own."""

from __future__ import annotations

from studio import api
from tests.conftest import SAMPLES, metrics, open_sample


def _reload(app, at, **env):
    """A new session with the URL the old one left (what F5 or a bookmark does)."""
    again = app(**env)
    for key, value in at.query_params.items():
        again.query_params[key] = value[0] if isinstance(value, list) else value
    return again.run()


def test_reload_restores_project_model_and_version(app):
    at = open_sample(app().run(), "if_loop")
    open_sample(at, "cnn_unfused")
    pid = at.session_state["onnx_studio_project"]
    assert api.open_project(pid).name == "if_loop"       # a project made for an upload is named after it
    # Two models in one project, each with its own version tree.
    assert [(m.name, m.versions) for m in api.project_models(pid)] == [("if_loop", 1), ("cnn_unfused", 1)]
    assert at.query_params["project"] in (pid, [pid]) and "model" in at.query_params
    assert at.sidebar.selectbox(key="model_picker_2").value == "m2"
    # Pick the first model in the sidebar: its own version list.
    at.sidebar.selectbox(key="model_picker_2").set_value("m1").run()
    assert metrics(at)["Nodes"] == "22"
    assert [o for o in at.sidebar.selectbox(key="version_picker_m1_1").options] == ["v0 · sample if_loop · "
                                                                                    + api.project_model(pid, "m1")
                                                                                    .version("v0").sha256[:8]]
    again = _reload(app, at)
    assert not again.exception
    assert again.session_state["onnx_studio_project"] == pid and again.session_state["onnx_studio_model"] == "m1"
    assert metrics(again)["Nodes"] == "22"


def test_page_settings_persist_across_pages_and_reloads(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/optimize.py").run()
    assert at.checkbox(key="opt_verify").value is True
    at.checkbox(key="opt_verify").uncheck().run()
    at.radio(key="opt_on_failure").set_value("revert").run()
    at.switch_page("views/overview.py").run()
    at.switch_page("views/optimize.py").run()
    assert at.checkbox(key="opt_verify").value is False and at.radio(key="opt_on_failure").value == "revert"
    pid, mid = at.session_state["onnx_studio_project"], at.session_state["onnx_studio_model"]
    assert api.get_settings(pid, mid)["ui:opt_verify"] is False
    again = _reload(app, at)
    again.switch_page("views/optimize.py").run()
    assert again.checkbox(key="opt_verify").value is False


def test_projects_page_rename_duplicate_delete(app):
    at = open_sample(app().run(), "if_loop")
    pid = at.session_state["onnx_studio_project"]
    at.switch_page("views/projects.py").run()
    assert not at.exception, at.exception
    at.text_input(key=f"proj_name_{pid}").set_value("My detector").run()
    at.button(key=f"proj_rename_{pid}").click().run()
    assert api.open_project(pid).name == "My detector"
    assert any("My detector" in s.value for s in at.sidebar.markdown)
    at.button(key=f"proj_dup_{pid}").click().run()
    names = sorted(i.name for i in api.list_projects())
    assert names == ["My detector", "My detector (copy)"]
    copy = next(i.id for i in api.list_projects() if i.id != pid)
    at.button(key=f"proj_del_{copy}").click().run()
    assert any("cannot be undone" in w.value for w in at.warning)
    assert len(api.list_projects()) == 2               # nothing deleted before the confirmation
    at.button(key=f"proj_del_yes_{copy}").click().run()
    assert [i.id for i in api.list_projects()] == [pid]
    at.button(key=f"proj_zip_{pid}").click().run()
    assert not at.exception


def test_shared_sessions_see_only_their_projects(app):
    a = open_sample(app(ONNX_STUDIO_SHARED="1").run(), "if_loop")
    pa = a.session_state["onnx_studio_project"]
    b = app(ONNX_STUDIO_SHARED="1").run()
    b.switch_page("views/projects.py").run()
    assert not b.exception
    assert not any(k.startswith("proj_open_") for k in (x.key for x in b.button))
    assert any("0 projects" in m.value for m in b.markdown)
    # Given the link (the unguessable id), B opens A's project; a guessed id opens nothing.
    guessed = app(ONNX_STUDIO_SHARED="1")
    guessed.query_params["project"] = pa[:-2] + ("xx" if not pa.endswith("xx") else "yy")
    guessed.run()
    assert "onnx_studio_project" not in guessed.session_state
    linked = _reload(app, a, ONNX_STUDIO_SHARED="1")
    assert linked.session_state["onnx_studio_project"] == pa and metrics(linked)["Nodes"] == "22"


def test_path_input_cannot_open_a_projects_file(app):
    p = api.create_project("private")
    model, v = api.add_model(p, SAMPLES / "cnn_unfused.onnx")
    root = api.projects_root()
    at = app(ONNX_STUDIO_PATH_ROOT=str(root.parent)).run()
    at.text_input(key="model_path").input(str(p.root / v.path)).run()
    at.button(key="open_path").click().run()
    assert any("inside the projects folder" in e.value for e in at.error)
    assert "onnx_studio_project" not in at.session_state


def test_the_selected_node_travels_in_the_url(app):
    at = open_sample(app().run(), "cnn_unfused")
    at.query_params["node"] = "conv_0"
    again = _reload(app, at)
    assert again.session_state["selected_node"] == "conv_0"
    assert again.query_params["node"] in ("conv_0", ["conv_0"])
