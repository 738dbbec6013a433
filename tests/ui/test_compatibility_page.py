"""AppTest: the Compatibility page shows verdicts, findings with a fix button, and
applying the fix adds a version that re-checks clean for ONNX Runtime."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES, current_model


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
    # The two engines whose findings and overlays are read here. No fails on all five engines after the fix:
    # test_journey (this page, in a browser) and test_readme (`check --fix legalize-grid-sampler`, exit 0).
    at.session_state["compat_engines"] = ["onnxruntime", "openvino"]
    at = _goto(at)
    assert not at.exception
    assert at.multiselect(key="compat_engines").value == ["onnxruntime", "openvino"]
    text = " ".join(m.value for m in at.markdown)
    assert "❌ fails" in text
    codes = " ".join(e.label for e in at.expander)
    assert "ORT-NO-KERNEL" in codes and "OV-UNSUPPORTED" in codes
    assert any("onnx-studio check" in c.value for c in at.code)
    # The check colours the graph: the Graph page offers one compatibility overlay per engine.
    at.switch_page("views/graph.py").run()
    assert not at.exception
    options = at.selectbox(key="graph_overlay").options
    assert any(o.startswith("compatibility: onnxruntime") for o in options)
    assert any(o.startswith("compatibility: openvino") for o in options)
    at = _goto(at)                                   # back to the check, to apply its fix
    assert not at.exception
    button = next(b for b in at.button if b.label == "Fix: legalize-grid-sampler")
    at = button.click().run()
    assert not at.exception
    assert any("Applied" in s.value and "v1" in s.value for s in at.success)
    text = " ".join(m.value for m in at.markdown)
    assert "❌ fails" not in text
    assert "✅ runs" in text
    assert not any(b.label.startswith("Fix: legalize") for b in at.button)


@pytest.mark.covered_by("test_mmdeploy_fix_turns_onnxruntime_green")   # checks this too, on the same check
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


def test_fix_input_shapes_uses_the_dims_given_on_the_page(app):
    """DYNAMIC-SHAPE's fix takes the values typed next to the button; the new version has them."""
    import onnx

    at = app(str(SAMPLES / "transformer_block.onnx")).run()
    # The fix and its dims are what is tested, nothing per engine: the page checks on ONNX Runtime alone (on every
    # engine its checks converted the transformer for MNN and LiteRT, ~80% of the test; test_mnn_and_litert_columns
    # checks those columns).
    at.session_state["compat_engines"] = ["onnxruntime"]
    at = _goto(at)
    assert not at.exception
    assert at.multiselect(key="compat_engines").value == ["onnxruntime"]
    boxes = {n.label: n for n in at.number_input if n.key and n.key.startswith("compat_dim_")}
    assert set(boxes) >= {"batch", "sequence"}
    boxes["batch"].set_value(2)
    at = boxes["sequence"].set_value(7).run()
    cli = " ".join(c.value for c in at.code)
    assert "--fix fix-input-shapes" in cli and "--dim batch=2" in cli and "--dim sequence=7" in cli
    at = next(b for b in at.button if b.label == "Fix: fix-input-shapes").click().run()
    assert not at.exception
    assert any("Applied fix\\-input\\-shapes" in s.value for s in at.success)
    ws = current_model(at)
    latest = ws.versions[-1]
    assert latest.label == "fix: fix-input-shapes"
    model = onnx.load(ws.handle(latest.id).path, load_external_data=False)
    dims = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input]
    assert dims[0][:2] == [2, 7]


def test_not_run_badge_and_inputs_that_ran(app, tmp_path):
    """R39: a model that compiles but needs real inputs shows "compiles, not run" (not "fails"), and a
    model the input search ran says on which inputs."""
    import onnx

    from tests.seeded_input_models import framed_by_7, silero_like

    for build, expected in ((framed_by_7, "⏸️ compiles, not run"), (silero_like, "ran on input float32[1, 512]")):
        path = tmp_path / f"{build.__name__}.onnx"
        onnx.save(build(), path)
        at = _goto(app(str(path)).run())
        assert not at.exception
        shown = (" ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)).replace("\\", "")
        assert expected in shown and "❌ fails" not in shown


def _no_unexpected_error(at) -> None:
    assert not at.exception, at.exception
    assert not [e.value for e in at.error if "unexpected error" in e.value.lower()]


def test_mnn_and_litert_columns(app):
    """MNN and LiteRT are checked by default wherever their stack is installed (a real conversion
    and run each); the CLI hint names all five engines. Also this page's case of test_names_and_ids'
    test_no_page_shows_an_unexpected_error (no model, then the sample on the default engines), which is
    marked ``covered_by`` this test: the same page on the same sample and engines, checked once."""
    from tests.requirements import require_engine

    empty = app()
    empty.switch_page("views/compatibility.py").run()
    _no_unexpected_error(empty)
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at = _goto(at)
    _no_unexpected_error(at)
    require_engine("mnn")
    require_engine("litert")
    picker = at.multiselect(key="compat_engines")
    assert {"mnn", "litert"} <= set(picker.value), picker.value
    text = " ".join(m.value for m in at.markdown)
    assert "**MNN**" in text and "**LiteRT**" in text and "❌ fails" not in text
    assert any("--engines ort,openvino,tensorrt,mnn,litert" in c.value for c in at.code)
