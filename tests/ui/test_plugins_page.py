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
    assert any("--impl" in c.value for c in at.code)
    at = at.button(key="plugin_generate").click().run()
    assert not at.exception
    assert any(b.label.startswith("Download the plugin packages") for b in at.get("download_button"))


def test_shared_mode_does_not_run_code(app):
    at = _goto(app(str(SAMPLES / "mmdeploy_grid_sampler.onnx"), ONNX_STUDIO_SHARED="1").run())
    assert not at.exception
    assert any("disabled on this shared server" in i.value for i in at.info)
    assert not any(b.key == "plugin_run" for b in at.button)
