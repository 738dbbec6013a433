"""A Stop button is on the page only while its job runs: once the run is over it is gone,
whichever page ran it (issue 15: dead Stop buttons stayed after runs)."""

from __future__ import annotations

from tests.conftest import SAMPLES


def _stop_buttons(at) -> list:
    return [b for b in at.button if b.label == "Stop"]


def test_verify_run_leaves_no_stop_button(app):
    """widgets.run_stoppable (Verify, Precision, Export, Plugins) clears its Stop after the run."""
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/verify.py").run()
    assert _stop_buttons(at) == []
    at.button(key="verify_run").click().run()
    assert not at.exception
    assert any(s.value.startswith("PASS") for s in at.success), [e.value for e in at.error]
    assert _stop_buttons(at) == []


def test_profile_shows_stop_only_during_a_run(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/profile.py").run()
    at.multiselect(key="profile_engines").set_value(["ort"])
    at.number_input(key="profile_iterations").set_value(5)
    at.number_input(key="profile_warmup").set_value(1)
    at.number_input(key="profile_rounds").set_value(2)
    at.run()
    assert _stop_buttons(at) == []            # nothing to stop before a run
    at.button(key="profile_run").click().run()
    assert not at.exception
    assert len(at.dataframe) >= 1             # the run finished with results
    assert _stop_buttons(at) == []
    assert not any("Stopped" in i.value for i in at.info)
