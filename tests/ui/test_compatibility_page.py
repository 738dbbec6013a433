"""AppTest: the Compatibility page shows verdicts, findings with a fix button, and
applying the fix adds a version that re-checks clean for ONNX Runtime."""

from __future__ import annotations

from tests.conftest import SAMPLES


def _goto(at):
    at.switch_page("views/compatibility.py")
    return at.run()


def test_page_without_model(app):
    at = app(None).run()
    at = _goto(at)
    assert not at.exception
    assert any("Open a model" in i.value for i in at.info)


def test_mmdeploy_fix_turns_onnxruntime_green(app):
    at = app(str(SAMPLES / "mmdeploy_grid_sampler.onnx")).run()
    at = _goto(at)
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "❌ fails" in text
    codes = " ".join(e.label for e in at.expander)
    assert "ORT-NO-KERNEL" in codes and "OV-UNSUPPORTED" in codes
    assert any("onnx-studio check" in c.value for c in at.code)
    button = next(b for b in at.button if b.label == "Fix: legalize-grid-sampler")
    at = button.click().run()
    assert not at.exception
    assert any("Applied" in s.value and "v1" in s.value for s in at.success)
    text = " ".join(m.value for m in at.markdown)
    assert "❌ fails" not in text
    assert "✅ runs" in text
    assert not any(b.label.startswith("Fix: legalize") for b in at.button)


def test_check_colours_the_graph(app):
    """After a check, the Graph page offers one compatibility overlay per engine."""
    from tests.conftest import SAMPLES

    at = app(str(SAMPLES / "mmdeploy_grid_sampler.onnx")).run()
    at.switch_page("views/compatibility.py").run()
    assert not at.exception
    at.switch_page("views/graph.py").run()
    assert not at.exception
    options = at.selectbox(key="graph_overlay").options
    assert any(o.startswith("compatibility: onnxruntime") for o in options)
    assert any(o.startswith("compatibility: openvino") for o in options)
