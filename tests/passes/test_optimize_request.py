"""One typed request per optimize run (issue 34, item 2): the CLI, the Optimize page and batch build one
``OptimizeRequest`` (studio.core.requests); ``run_pipeline`` takes it; the other callers of the pipeline
(fixes, export, precision variants) build one too; a user's .npz becomes feeds in one place.

Oracles: the request's own fields (every one set away from its default), the real argparse parser, the
pipeline's own record of the passes it ran, the bytes of the files written, and an AST walk of the code."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import shlex
from pathlib import Path

import onnx
import pytest

from sample_models.catalog import path_of
from studio import api
from studio.batch import facade as batch_api
from studio.cli import build_parser, main, optimize_cmd
from studio.core.errors import StudioError
from studio.core.requests import OptimizeRequest
from tests.conftest import ROOT, current_model

FULL = OptimizeRequest(
    passes=("eliminate-identity", "convert-opset", "fix-input-shapes"), dims={"batch": 2, "seq len": 5},
    pass_options={"convert-opset": {"target": 18}, "fold-constants": {"max_growth": 2.5, "skip": ["a b", "c"],
                                                                      "name": "x=y"}},
    on_failure="revert", verify=False, time_budget_s=12.25, inputs="real inputs/x.npz")
PRESET = OptimizeRequest(preset="ort", dims={"N": 3}, time_budget_s=0.1 + 0.2)


def test_every_field_is_exercised_and_survives_json():
    default = OptimizeRequest()
    same = [f.name for f in dataclasses.fields(FULL) if getattr(FULL, f.name) == getattr(default, f.name)
            and f.name != "preset"]                      # preset: FULL names passes, PRESET a preset
    assert same == [], f"set these away from their defaults in FULL: {same}"
    assert PRESET.preset != default.preset == "safe"
    for request in (FULL, PRESET, default):
        wire = json.loads(json.dumps(request.to_dict()))
        assert OptimizeRequest.from_dict(wire) == request
    # the same options given in another order or spelling are the same request
    assert dataclasses.replace(FULL, dims={"seq len": 5, "batch": 2}, passes=list(FULL.passes)) == FULL
    assert OptimizeRequest(preset=None, passes=[]) == OptimizeRequest(preset="safe") == default
    with pytest.raises(StudioError) as exc:                      # a newer client's option is refused, not dropped
        OptimizeRequest.from_dict({**FULL.to_dict(), "aggressive": True})
    assert exc.value.code == "BAD-REQUEST" and "aggressive" in str(exc.value)
    with pytest.raises(StudioError) as exc:
        OptimizeRequest(preset="safe", passes=["cse"])
    assert exc.value.code == "BAD-OPTION"
    with pytest.raises(StudioError) as exc:                      # the facade's keywords are the request's fields
        api.optimize(api.load(path_of("cnn_unfused")), preset="safe", verfy=False)
    assert exc.value.code == "BAD-REQUEST" and "verfy" in str(exc.value)


@pytest.mark.parametrize("request_", [FULL, PRESET, OptimizeRequest()], ids=["passes", "preset", "default"])
def test_the_request_prints_a_command_the_cli_reads_back_as_the_same_request(request_):
    hint = request_.command("my model.onnx", "out dir/o.onnx")
    args = build_parser().parse_args(shlex.split(hint)[1:])
    assert (args.command, args.model, args.output) == ("optimize", "my model.onnx", "out dir/o.onnx")
    assert optimize_cmd.request_of(args) == request_
    assert OptimizeRequest().command("m.onnx") == "onnx-studio optimize m.onnx -o m-safe.onnx --preset safe"


def _spy_requests(monkeypatch) -> list[OptimizeRequest]:
    import passes.optimize as optimize

    seen: list[OptimizeRequest] = []
    real = optimize.run_pipeline
    monkeypatch.setattr(optimize, "run_pipeline", lambda path, request, *a, **k: seen.append(request) or
                        real(path, request, *a, **k))
    return seen


def test_the_pages_hint_is_the_request_it_ran(app, monkeypatch):
    """The Optimize page's hint is the command of the request it runs, time budget included (the page's
    900 s budget was not in its hint before), and the version it keeps stores that request."""
    seen = _spy_requests(monkeypatch)
    at = app(str(path_of("cnn_unfused"))).run()
    at.switch_page("views/optimize.py").run()
    at.selectbox(key="opt_preset").set_value("custom").run()
    at.multiselect(key="opt_passes").set_value(["eliminate-identity", "convert-opset", "fuse-conv-bn"]).run()
    at.number_input(key="opt_target").set_value(18).run()
    at.radio(key="opt_on_failure").set_value("revert").run()
    at.button(key="opt_run").click().run()
    assert not at.exception, at.exception
    (ran,) = seen
    hints = [c.value for c in at.code if c.value.startswith("onnx-studio optimize")]
    assert hints == [ran.command("cnn_unfused.onnx")]
    args = build_parser().parse_args(shlex.split(hints[0])[1:])
    assert optimize_cmd.request_of(args) == ran
    assert (ran.passes, dict(ran.options)["convert-opset"], ran.on_failure, ran.time_budget_s) == (
        ("eliminate-identity", "convert-opset", "fuse-conv-bn"), {"target": 18}, "revert", 900.0)
    assert current_model(at).version("v1").provenance["request"] == ran.to_dict()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_batch_stage_and_the_cli_run_the_same_request_to_the_same_file(tmp_path, capsys, monkeypatch):
    """Batch used to pass the preset alone: a request naming passes ran ``safe`` there. Sample model
    cnn_unfused (code-built), two passes, revert on failure."""
    request = OptimizeRequest(passes=["eliminate-identity", "fuse-conv-bn"], on_failure="revert")
    model = path_of("cnn_unfused")
    batch = batch_api.batch([model], tmp_path / "batch", stages=["optimize"],
                            stage_options={"optimize": request.to_dict()})
    (row,) = batch.rows
    outcome = row.outcomes["optimize"]
    assert outcome.status == "ok", outcome.verdict
    from_batch = tmp_path / "batch" / row.model.folder_name / outcome.artifacts[0]
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cli" / "m.onnx"
    assert main(shlex.split(request.command(str(model), str(out)))[1:] + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in report["records"]] == list(request.passes)
    assert _sha(from_batch) == _sha(out)
    nodes = len(onnx.load(str(out)).graph.node)
    assert outcome.figures["nodes_after"] == nodes < outcome.figures["nodes_before"]


def test_an_npz_becomes_feeds_in_one_place(tmp_path, monkeypatch):
    """optimize --inputs and a fix's inputs both go through studio.core.feeds.npz_feeds, called by the
    pipeline with the request's path."""
    import passes.pipeline as pipeline
    from diagnostics.fixes import fix_to_file
    from studio.core.feeds import save_npz

    model = path_of("cnn_unfused")
    save_npz(api.make_inputs(api.load(model), count=2).sets, tmp_path / "real.npz")
    monkeypatch.chdir(tmp_path)
    calls: list[str] = []
    real = pipeline.npz_feeds
    monkeypatch.setattr(pipeline, "npz_feeds", lambda path, m: calls.append(str(path)) or real(path, m))
    r = api.optimize(api.load(model), OptimizeRequest(passes=["fuse-conv-bn"], inputs="real.npz"),
                     out_path=tmp_path / "o" / "m.onnx")
    assert r.ok and r.modified
    fixed = fix_to_file(model, ["fuse-conv-bn"], tmp_path / "f" / "m.onnx", inputs="real.npz")
    assert fixed.ok and calls == ["real.npz", "real.npz"]


PRODUCTION = ("studio", "passes", "diagnostics", "profilers")


def _calls(name: str):
    for room in PRODUCTION:
        for path in sorted((ROOT / room).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if name not in text:        # a call of ``name`` spells it: only those files are parsed and walked
                continue
            tree = ast.parse(text)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == name:
                    yield path.relative_to(ROOT).as_posix(), node


def test_every_caller_of_the_pipeline_hands_it_a_request():
    """No module assembles its own pass list and keywords for the pipeline: the second argument of each
    ``run_pipeline`` call is a request (a name, never a list), pass objects are handed over only where
    they were resolved from that request (passes/optimize.py), and ``run_passes`` (code-built passes) is
    for tests."""
    callers = {}
    for where, call in _calls("run_pipeline"):
        if where == "passes/pipeline.py":
            continue
        assert len(call.args) >= 2 and isinstance(call.args[1], ast.Name) and call.args[1].id == "request", where
        assert not {k.arg for k in call.keywords} & {"verify", "on_failure", "dims", "time_budget_s"}, where
        callers[where] = {k.arg for k in call.keywords}
    assert {w for w, kw in callers.items() if "passes" in kw} == {"passes/optimize.py"}
    assert {"diagnostics/fixes.py", "studio/export/prepare.py", "studio/export/tensorrt.py",
            "studio/precision/variants.py", "passes/optimize.py"} <= set(callers)
    assert [w for w, _ in _calls("run_passes") if w != "passes/pipeline.py"] == []
