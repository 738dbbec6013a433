"""AppTest: the Plugins page lists the model's custom op, shows its signature, runs the generated and an
edited Python op against the reference in a fresh worker, writes the packages, and refuses to run code on a
shared server."""

from __future__ import annotations

from tests.conftest import SAMPLES


def _goto(at):
    at.switch_page("views/plugins.py")
    return at.run()


def test_page_without_model(app):
    at = _goto(app(None).run())
    assert not at.exception
    assert any("Open a model" in i.value for i in at.info)


def test_run_generated_and_edited_op(app):
    at = _goto(app(str(SAMPLES / "mmdeploy_grid_sampler.onnx")).run())
    assert not at.exception
    assert at.selectbox(key="plugin_op_choice").value == "mmdeploy::grid_sampler"
    assert any("Signature of" in m.value and "grid" in m.value for m in at.markdown)
    # The code editor component (an iframe) is out of AppTest's reach: the plain-text toggle gives the same
    # text in a text area (the browser test drives the component itself).
    assert not at.text_area, "the code editor is the default, not the text area"
    at = at.toggle(key="plugin_code_grid_sampler_ort-python__plain").set_value(True).run()
    assert not at.exception
    editor = at.text_area(key="plugin_code_grid_sampler_ort-python")
    assert "def compute(" in editor.value
    at = at.button(key="plugin_run").click().run()
    assert not at.exception
    assert any("match the reference" in s.value for s in at.success), [e.value for e in at.error]
    # An edited body that returns the wrong dtype: a clear message, the page lives on.
    bad = editor.value.replace("    mode = _MODES[int(interpolation_mode)]\n",
                               "    return np.zeros((2, 2))\n    mode = _MODES[int(interpolation_mode)]\n", 1)
    at.text_area(key="plugin_code_grid_sampler_ort-python").set_value(bad)
    at = at.button(key="plugin_run").click().run()
    assert not at.exception
    errors = [e.value.replace("\\", "") for e in at.error]
    assert any("returned float64[2,2], declared float32[1,4,8,8]" in e for e in errors), errors
    # The edit survives going back to the code editor, and Reset puts the generated body back in both.
    at = at.toggle(key="plugin_code_grid_sampler_ort-python__plain").set_value(False).run()
    at = at.toggle(key="plugin_code_grid_sampler_ort-python__plain").set_value(True).run()
    assert at.text_area(key="plugin_code_grid_sampler_ort-python").value == bad
    at = at.button(key="plugin_code_grid_sampler_ort-python__reset").click().run()
    assert at.text_area(key="plugin_code_grid_sampler_ort-python").value == editor.value
    assert any("--impl" in c.value for c in at.code)
    at = at.button(key="plugin_generate").click().run()
    assert not at.exception
    assert any(b.label.startswith("Download the plugin packages") for b in at.get("download_button"))


def test_shared_mode_does_not_run_code(app):
    at = _goto(app(str(SAMPLES / "mmdeploy_grid_sampler.onnx"), ONNX_STUDIO_SHARED="1").run())
    assert not at.exception
    assert any("disabled on this shared server" in i.value for i in at.info)
    assert not any(b.key == "plugin_run" for b in at.button)


def test_plain_editor_when_the_component_is_missing(app, monkeypatch):
    from studio.ui import widgets

    monkeypatch.setattr(widgets, "_code_editor_component", lambda: None)   # not installed, or broken
    at = _goto(app(str(SAMPLES / "mmdeploy_grid_sampler.onnx")).run())
    assert not at.exception
    toggle = at.toggle(key="plugin_code_grid_sampler_ort-python__plain")
    assert toggle.value and toggle.disabled
    assert "def compute(" in at.text_area(key="plugin_code_grid_sampler_ort-python").value
