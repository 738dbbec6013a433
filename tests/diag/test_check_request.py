"""One typed request per check (issue 34, item 2): the CLI, the Compatibility page and batch build one
``CheckRequest`` (studio.core.requests); it survives JSON, prints a command the real CLI parser reads back
into the same request, and a batch stage runs every option of it (it passed the engines alone before).

Oracles: the request's own fields (every one set away from its default), the real argparse parser, and the
report's own record of what ran (``ran_on``: None for a session-only check)."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from sample_models.catalog import path_of
from studio import api
from studio.batch import facade as batch_api
from studio.cli import build_parser, check_cmd, main
from studio.core.errors import StudioError
from studio.core.requests import CheckRequest

FULL = CheckRequest(engines=("onnxruntime", "openvino"), eps=("cpu", "cuda"), trt_version="11", run=False,
                    dims={"batch": 2, "seq len": 5}, inputs="real inputs/x.npz", tasks={"logits": "classification"})


def test_every_field_is_exercised_and_survives_json():
    default = CheckRequest()
    same = [f.name for f in dataclasses.fields(FULL) if getattr(FULL, f.name) == getattr(default, f.name)]
    assert same == [], f"set these away from their defaults in FULL: {same}"
    for request in (FULL, default):
        assert CheckRequest.from_dict(json.loads(json.dumps(request.to_dict()))) == request
    assert dataclasses.replace(FULL, eps="cpu,cuda", dims={"seq len": 5, "batch": 2}) == FULL
    with pytest.raises(StudioError) as exc:
        CheckRequest.from_dict({**FULL.to_dict(), "strict": True})
    assert exc.value.code == "BAD-REQUEST" and "strict" in str(exc.value)


@pytest.mark.parametrize("request_", [FULL, CheckRequest()], ids=["full", "default"])
def test_the_request_prints_a_command_the_cli_reads_back_as_the_same_request(request_):
    hint = request_.command("my model.onnx")
    args = build_parser().parse_args(shlex.split(hint)[1:])
    assert (args.command, args.model) == ("check", "my model.onnx")
    assert check_cmd.request_of(args, tasks=dict(api.parse_task_options(args.tasks))) == request_


def test_the_pages_hint_is_the_request_it_ran(app, monkeypatch):
    seen: list[CheckRequest] = []
    real = api.check
    # The request the page passes is what is compared; the check itself runs sessions only (run=False): a full run
    # converted cnn_unfused for MNN and LiteRT, which test_mnn_and_litert_columns does on this page.
    monkeypatch.setattr(api, "check", lambda handle, request, **k: seen.append(request) or
                        real(handle, dataclasses.replace(request, run=False), **k))
    at = app(str(path_of("cnn_unfused"))).run()
    at.switch_page("views/compatibility.py").run()
    assert not at.exception, at.exception
    (ran,) = seen
    assert isinstance(ran, CheckRequest)
    (hint,) = [c.value for c in at.code if c.value.startswith("onnx-studio check") and "--fix" not in c.value]
    assert hint == ran.command("cnn_unfused.onnx")
    assert check_cmd.request_of(build_parser().parse_args(shlex.split(hint)[1:])) == ran


def test_a_batch_stage_and_the_cli_run_the_same_request(tmp_path, capsys):
    """Sessions only (--no-run) on ONNX Runtime: the batch stage ran the model before (it kept the
    engines alone), so its verdict recorded a run the request did not ask for."""
    request = CheckRequest(engines=["onnxruntime"], run=False)
    model = path_of("cnn_unfused")
    batch = batch_api.batch([model], tmp_path / "batch", stages=["check"], stage_options={"check": request.to_dict()})
    (row,) = batch.rows
    outcome = row.outcomes["check"]
    stage = json.loads((tmp_path / "batch" / row.model.folder_name / outcome.artifacts[0]).read_text())
    capsys.readouterr()
    assert main(shlex.split(request.command(str(model)))[1:] + ["--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert [(v["engine"], v["verdict"], v["ran_on"]) for v in stage["verdicts"]] == \
        [(v["engine"], v["verdict"], v["ran_on"]) for v in cli["verdicts"]] == [("onnxruntime", "runs", None)]
