"""R63 for the Optimize and Compatibility-fix saves: a result byte-identical to a version the model already
has is refused as "same as vN" (SameContentError), as Precision and Edit saves are, instead of becoming a
duplicate version. Oracle: the sha256 of the file the run wrote equals the earlier version's."""

from __future__ import annotations

import pytest

from studio import api
from studio.core.errors import SameContentError
from tests.conftest import SAMPLES


def test_optimizing_a_version_again_is_same_as_the_version_it_made(tmp_path):
    p = api.create_project("optimize twice")
    model, v0 = api.add_model(p, SAMPLES / "cnn_unfused.onnx")
    first = api.optimize(model.handle(v0.id), preset="safe", out_path=tmp_path / "one" / "o.onnx")
    assert first.ok and first.modified
    v1 = api.add_optimized_version(model, v0.id, first, preset="safe")
    again = api.optimize(model.handle(v0.id), preset="safe", out_path=tmp_path / "two" / "o.onnx")
    assert api.load(again.output).sha256 == v1.sha256            # the oracle: the bytes are v1's
    with pytest.raises(SameContentError, match="same as v1") as err:
        api.add_optimized_version(model, v0.id, again, preset="safe")
    assert err.value.version == "v1" and err.value.code == "SAME-CONTENT"
    assert [v.id for v in model.versions] == ["v0", "v1"]


def test_a_fix_applied_twice_is_same_as_the_first_fix():
    p = api.create_project("fix twice")
    model, v0 = api.add_model(p, SAMPLES / "transformer_block.onnx")
    dims = {"batch": 2, "sequence": 7}
    v1 = api.apply_fix(model, v0.id, "fix-input-shapes", dims=dims)
    with pytest.raises(SameContentError, match="same as v1") as err:
        api.apply_fix(model, v0.id, "fix-input-shapes", dims=dims)
    assert err.value.version == "v1"
    assert [v.id for v in model.versions] == ["v0", "v1"] and model.version("v1").sha256 == v1.sha256


def test_the_optimize_page_says_same_as_the_version(app):
    """The page's second run of a preset on v0 names v1 and saves nothing."""
    from tests.conftest import current_model

    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/optimize.py").run()
    at.button(key="opt_run").click().run()
    assert at.session_state["onnx_studio_version"] == "v1"
    picker = next(s for s in at.sidebar.selectbox if s.key and s.key.startswith("version_picker"))
    picker.set_value("v0").run()
    at.button(key="opt_run").click().run()
    assert not at.exception, at.exception
    assert any("same as v1" in e.value for e in at.error), [e.value for e in at.error]
    assert [v.id for v in current_model(at).versions] == ["v0", "v1"]


def test_cli_optimize_into_a_project_twice_notes_same_as_v1(tmp_path, capsys):
    """`optimize --project` run again: -o is written (the result the user asked for) and the project says
    "same as v1" instead of filing v2 with v1's bytes; before, v2 was a silent duplicate."""
    from studio.cli import main

    p = api.create_project("cli optimize twice")
    for i in (1, 2):
        out = tmp_path / f"o{i}.onnx"
        assert main(["optimize", str(SAMPLES / "cnn_unfused.onnx"), "-o", str(out), "--preset", "safe",
                     "--project", p.id]) == 0
    err = capsys.readouterr().err
    assert "same as v1" in err and out.exists()
    (info,) = api.project_models(p.id)
    versions = api.project_model(p.id, info.id).versions
    assert [v.id for v in versions] == ["v0", "v1"] and versions[1].sha256 == api.load(out).sha256
