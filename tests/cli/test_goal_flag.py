"""The task-metric goal is ``--goal METRIC>=X`` on every command (issue 34, item 2): ``compare`` and
``data eval`` called it ``--target`` (which names a machine elsewhere), ``export`` ``--task-target``. The old
spellings still work, with one deprecation line on stderr; both at once are refused.

Oracles: the real argparse parser, the CLI's own refusal naming the flag, and the value handed to the
facade (a spy on ``api.compare``)."""

from __future__ import annotations

import pytest

from sample_models.catalog import path_of
from studio import api
from studio.cli import build_parser, main, task_args
from studio.core.errors import StudioError

GOAL = "top1-agreement>=0.99"
COMMANDS = {
    "compare": (["compare", "a.onnx", "b.onnx"], "--target"),
    "data eval": (["data", "eval", "photos", "--project", "p", "--model", "m.onnx"], "--target"),
    "export": (["export", "m.onnx", "--target", "ort", "-o", "out"], "--task-target"),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_goal_is_named_goal_and_the_old_spelling_still_works(command, capsys):
    argv, old = COMMANDS[command]
    parser = build_parser()
    new = parser.parse_args([*argv, "--goal", GOAL])
    assert task_args.goal(new) == GOAL and capsys.readouterr().err == ""
    former = parser.parse_args([*argv, old, GOAL])
    assert task_args.goal(former) == GOAL
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"note: '{old} METRIC>=X' is deprecated: write --goal METRIC>=X"]
    with pytest.raises(StudioError) as exc:
        task_args.goal(parser.parse_args([*argv, "--goal", GOAL, old, "map-drop<=0.01"]))
    assert exc.value.code == "BAD-OPTION" and old in str(exc.value)
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command.split(), "--help"])
    shown = capsys.readouterr().out
    assert "--goal METRIC>=X" in shown and f"{old} METRIC" not in shown     # the old spelling is hidden
    if command == "export":
        assert new.target == ["ort"]                          # export's --target still names its targets


def test_compare_hands_the_goal_to_the_run(capsys, monkeypatch):
    """Without a dataset the goal is refused by its new name; with one, the facade gets it whichever
    spelling was used."""
    model = str(path_of("cnn_unfused"))
    assert main(["compare", model, model, "--goal", GOAL]) == 2
    assert "--goal is judged on a dataset" in capsys.readouterr().err
    seen = []

    class Stop(Exception):
        pass

    def spy(*a, **k):
        seen.append(a[2].goal)                    # the CompareRequest the flags built
        raise Stop

    monkeypatch.setattr(api, "open_project", lambda name: object())
    monkeypatch.setattr(api, "dataset", lambda project, name: None)
    monkeypatch.setattr(api, "compare", spy)
    monkeypatch.setattr(task_args, "choices", lambda *a, **k: {})
    for flag in ("--goal", "--target"):
        with pytest.raises(Stop):
            main(["compare", model, model, "--project", "p", "--dataset", "photos", flag, GOAL])
    assert seen == [GOAL, GOAL]
