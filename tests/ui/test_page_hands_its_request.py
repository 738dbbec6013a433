"""Issue 34 item 2, the last pages that ran their operation piece by piece: the Plugins page's Run, Generate and
Build, and the recipe editor, hand the facade the one request their hint prints (``api.make_plugins`` with a
``PluginRequest``, ``api.preprocessing_recipe`` with a ``RecipeRequest``). Each test drives the page with
``AppTest``, records what the facade function got, and compares it with the CLI's ``request_of`` of the hint
(and, for Run, with what the CLI itself hands the same facade function when the hint is run). Before, the page
called run_python_op / scaffold_plugin / build_plugin and passed the recipe editor's dict: no request to
compare (each test fails there: no make_plugins call, or a dict where the request is expected).

Registered per hint site in tests/ui/test_every_hint_has_an_equality_test.py."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import replace

import pytest

from studio import api
from studio.cli import build_parser, main, plugin_cmd, recipe_args
from studio.core.errors import StudioError
from studio.core.requests import PluginRequest, RecipeRequest
from tests.conftest import SAMPLES, photos_added_on_the_data_page

pytestmark = pytest.mark.slow

_MODEL = SAMPLES / "mmdeploy_grid_sampler.onnx"
_CODE = "plugin_code_grid_sampler_ort-python"


class _Stop(StudioError):
    """Raised by a spy once it has recorded the call: the page shows it as an error line, the CLI exits 2."""


def _hints(at, prefix: str) -> list[str]:
    return [line for c in at.code for line in c.value.splitlines() if line.startswith(prefix)]


def _request_of(hint: str) -> PluginRequest:
    return plugin_cmd.request_of(build_parser().parse_args(shlex.split(hint)[1:]))


def _recorder(calls: list, *, stop_when=lambda request: True):
    real = api.make_plugins

    def make_plugins(handle, request, out_dir, **kw):
        calls.append((handle, request, kw))
        if stop_when(request):
            raise _Stop("recorded")
        return real(handle, request, out_dir, **kw)
    return make_plugins


def _plugins_page(app):
    at = app(str(_MODEL)).run()
    at.switch_page("views/plugins.py").run()
    assert not at.exception, at.exception
    return at


def test_the_plugins_run_hands_make_plugins_the_request_its_hint_prints(app, monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setattr(api, "make_plugins", _recorder(calls), raising=False)
    at = _plugins_page(app)
    at.toggle(key=f"{_CODE}__plain").set_value(True).run()
    edited = at.text_area(key=_CODE).value + "\n# edited on the page\n"
    at.text_area(key=_CODE).set_value(edited).run()
    (run_hint,) = [h for h in _hints(at, "onnx-studio plugin") if "--no-run" not in h]
    at.button(key="plugin_run").click().run()
    assert len(calls) == 1, [e.value for e in at.error]
    handle, page, kw = calls.pop()
    assert page == _request_of(run_hint) == PluginRequest(op="mmdeploy::grid_sampler", targets=("ort-python",),
                                                          impl="grid_sampler_op.py")
    assert kw["impl_code"] == edited                      # the editor's text is the body the request's file holds
    assert kw["signature"].qualified == page.op          # the page's signature, not collected again
    # the CLI, run on the hint with the editor's code saved under the file name it names, hands over the same
    words = shlex.split(run_hint)
    folder = tmp_path / "cli"
    folder.mkdir()
    shutil.copy(_MODEL, folder / words[2])
    (folder / page.impl).write_text(edited)
    monkeypatch.chdir(folder)
    assert main(words[1:]) == 2
    (cli_handle, cli, cli_kw), = calls
    assert (cli, cli_handle.sha256) == (page, handle.sha256) and "impl_code" not in cli_kw


def test_the_plugins_run_shows_the_run_make_plugins_made(app, monkeypatch):
    """The result shown is the PluginRun's own run of the request (the real one, on the sample's grid sampler)."""
    calls: list = []
    monkeypatch.setattr(api, "make_plugins", _recorder(calls, stop_when=lambda request: False), raising=False)
    at = _plugins_page(app)
    at.button(key="plugin_run").click().run()
    assert len(calls) == 1 and not at.exception, [e.value for e in at.error]
    result = at.session_state["plugin_runs"][(calls[0][0].sha256, "mmdeploy::grid_sampler", "ort-python")]
    assert result.target == "ort-python" and result.status == "ok", result.message


def test_generate_and_build_hand_make_plugins_the_request_the_package_hint_prints(app, monkeypatch):
    calls: list = []
    monkeypatch.setattr(api, "make_plugins", _recorder(calls, stop_when=lambda request: request.build),
                        raising=False)
    monkeypatch.setattr(api, "plugin_builds_allowed", lambda: True, raising=False)
    at = _plugins_page(app)
    at.toggle(key=f"{_CODE}__plain").set_value(True).run()
    edited = at.text_area(key=_CODE).value + "\n# edited on the page\n"
    at.text_area(key=_CODE).set_value(edited).run()
    at.multiselect(key="plugin_targets").set_value(["ort-python", "ort-cpp", "tensorrt"]).run()
    (hint,) = [h for h in _hints(at, "onnx-studio plugin") if "--no-run" in h]
    cli = _request_of(hint)
    assert cli == PluginRequest(op="mmdeploy::grid_sampler", targets=("ort-python", "ort-cpp", "tensorrt"),
                                impl="grid_sampler_op.py", run=False, build=True)
    at.button(key="plugin_generate").click().run()
    assert len(calls) == 1 and not at.exception, [e.value for e in at.error]
    _, generated, kw = calls[0]
    assert generated == replace(cli, build=False) and kw["impl_code"] == edited
    # the packages shown are the ones make_plugins wrote, with the editor's body in the ort-python package
    _, _, scaffold = at.session_state["plugin_scaffold"]
    body = scaffold.root.parent / scaffold.package("ort-python").folder / "grid_sampler_op.py"
    assert body.read_text() == edited
    at.button(key="plugin_build").click().run()
    assert len(calls) == 2, [e.value for e in at.error]
    _, built, kw = calls[1]
    assert built == cli and kw["impl_code"] == edited     # Build runs the hint's request itself (--build)


def test_an_unedited_body_is_not_an_impl_file(app, monkeypatch):
    calls: list = []
    monkeypatch.setattr(api, "make_plugins", _recorder(calls), raising=False)
    at = _plugins_page(app)
    at.multiselect(key="plugin_targets").set_value(["ort-python", "tensorrt"]).run()
    (hint,) = [h for h in _hints(at, "onnx-studio plugin") if "--no-run" in h]
    at.button(key="plugin_generate").click().run()
    (_, page, kw), = calls
    assert page == _request_of(hint) == PluginRequest(op="mmdeploy::grid_sampler", targets=("ort-python", "tensorrt"),
                                                      run=False)
    assert kw["impl_code"] is None


def test_make_plugins_refuses_code_without_a_file_to_name_it():
    handle = api.load(_MODEL)
    with pytest.raises(StudioError, match="names none"):
        api.make_plugins(handle, PluginRequest(op="mmdeploy::grid_sampler", run=False), "unused", impl_code="x")


def test_the_recipe_editor_hands_preprocessing_recipe_the_request_its_hint_prints(app, monkeypatch):
    at = photos_added_on_the_data_page(app)
    ds_id = api.project_datasets(at.session_state["onnx_studio_project"])[0].id
    calls: list = []
    real = api.preprocessing_recipe

    def recording(base=None, *, file=None, changes=None):
        calls.append(changes)
        return real(base, file=file, changes=changes)
    monkeypatch.setattr(api, "preprocessing_recipe", recording, raising=False)
    at.text_input(key=f"rcp_mean_{ds_id}").set_value("103.94, 116.78,123.68").run()
    at.text_input(key=f"rcp_scale_{ds_id}").set_value("1").run()
    at.selectbox(key=f"rcp_color_{ds_id}").set_value("BGR").run()
    assert not at.exception, at.exception
    (hint,) = _hints(at, "onnx-studio data recipe")
    cli = recipe_args.request_of(build_parser().parse_args(shlex.split(hint)[1:]))
    page = [c for c in calls if c is not None][-1]
    assert isinstance(page, RecipeRequest), type(page)
    assert page == cli
    assert (page.changes["mean"], page.changes["scale"], page.changes["color"]) == ("103.94, 116.78,123.68", "1",
                                                                                    "BGR")
