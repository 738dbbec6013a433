"""Issue 34 "Done when": a page hint run by the CLI does what the page did. Precision and Profile's hints
were only parsed for a few options (tests/ui/test_cli_hints_33.py, test_cli_hints_pages.py); here the
request the page hands ``studio.api`` (a spy records it) equals, field by field, the request the CLI
builds from the page's own hint (``<cmd>_cmd.request_of`` over the real parser): the same request is
the same run, since the CLI and the page call the same facade function with it.

Oracles: the real argparse parser and the CLI's own request builder."""

from __future__ import annotations

import dataclasses
import shlex

from studio import api
from studio.cli import build_parser, precision_cmd, profile_cmd, remote_args
from studio.core.errors import StudioError
from tests.conftest import SAMPLES


class _Stop(StudioError):
    """Raised by the spy after it recorded the request: the page shows it as an error line."""


def _spy(calls: list):
    def spy(*args, **kwargs):
        calls.append(next(a for a in (*args, *kwargs.values()) if dataclasses.is_dataclass(a)
                          and type(a).__module__ == "studio.core.requests"))
        raise _Stop("recorded")
    return spy


def _differences(a, b) -> list[str]:
    return [f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)]


def test_the_precision_page_runs_the_request_its_hint_builds(app, monkeypatch):
    calls: list = []
    monkeypatch.setattr(api, "precision", _spy(calls), raising=False)
    at = app(str(SAMPLES / "yolo_detector.onnx")).run()
    at.switch_page("views/precision.py").run()
    at.selectbox(key="precision_method").set_value("entropy").run()
    at.slider(key="precision_target").set_value(0.95).run()
    at.number_input(key="precision_budget").set_value(9).run()
    (hint,) = [line for c in at.code for line in c.value.splitlines() if line.startswith("onnx-studio precision")]
    at.button(key="precision_run").click().run()
    (ran,) = calls
    args = build_parser().parse_args(shlex.split(hint)[1:])
    from_hint = precision_cmd.request_of(args, goal=remote_args.goal_of(args))
    assert _differences(ran, from_hint) == [], hint
    assert ran.dims and ran.calibration_method == "entropy"        # the page's own settings, not defaults


def test_the_profile_page_runs_the_request_its_hint_builds(app, monkeypatch):
    calls: list = []
    monkeypatch.setattr(api, "profile", _spy(calls), raising=False)
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/profile.py").run()
    at.number_input(key="profile_iterations").set_value(25).run()
    (hint,) = [line for c in at.code for line in c.value.splitlines() if line.startswith("onnx-studio profile")]
    at.button(key="profile_run").click().run()
    (ran,) = calls
    from_hint = profile_cmd.request_of(build_parser().parse_args(shlex.split(hint)[1:]))
    assert _differences(ran, from_hint) == [], hint
    assert ran.options.iterations == 25                              # the page's iterations, not the default
