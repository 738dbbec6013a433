"""A batch stage takes every option its own command does (issue 34, item 2): ``--stage-requests FILE`` (the
Batch request's ``stage_requests``) gives each stage its whole request, read over the batch's own defaults.
The precision stage used to keep only ``variants`` and the budget (samples, calibration, goal, tasks and the
weight-only options were dropped), and no stage's options could be chosen from the CLI.

Oracles: the requests of tests/batch/test_request_trips.py with every field set away from its default, what
the real facade call received (a spy that calls through to the real ``api.precision``), and the variants a
real ORT run measured. Sample model: cnn_unfused."""

from __future__ import annotations

import json

import pytest

from sample_models.catalog import path_of
from studio import api
from studio.batch.stages import StageTask, run_stage
from studio.cli import main
from studio.core.errors import StudioError
from studio.core.requests import (BATCH_STAGE_DEFAULTS, BATCH_STAGE_REQUESTS, BatchRequest, PrecisionRequest,
                                  batch_stage_request)
from tests.batch.test_request_trips import FULL


@pytest.mark.parametrize("stage", list(BATCH_STAGE_REQUESTS))
def test_every_option_of_a_stage_request_reaches_its_stage(stage):
    """The whole request (every field away from its default) goes through the batch request's JSON and the
    task's options, and the stage rebuilds the very request."""
    full = FULL[BATCH_STAGE_REQUESTS[stage]]
    batch = BatchRequest.from_dict(json.loads(json.dumps(
        BatchRequest(stages=(stage,), stage_requests={stage: full}).to_dict())))
    task_options = json.loads(json.dumps(batch.stage_options()[stage]))       # what a task carries
    assert batch_stage_request(stage, task_options) == full


def test_a_partial_request_is_read_over_the_batchs_own_defaults():
    """Keys left out keep the batch's defaults, nested options key by key (a shorter profile stays short)."""
    profile = batch_stage_request("profile", {"options": {"iterations": 7}})
    default = BATCH_STAGE_DEFAULTS["profile"]
    assert profile.options.iterations == 7
    assert (profile.options.warmup, profile.options.rounds) == (default.options.warmup, default.options.rounds) == (5, 5)
    assert batch_stage_request("precision", {"samples": 3}).latency_budget_s == 20.0
    assert batch_stage_request("export", {}) == BATCH_STAGE_DEFAULTS["export"]
    # --engines replaces a check or profile request's engines; the other stages keep theirs
    batch = BatchRequest(stages=("check", "export"), engines="ort",
                         stage_requests={"check": {"run": False}, "export": {"targets": ["openvino"]}})
    assert batch.stage_options()["check"]["engines"] == ["ort"] and batch.stage_options()["check"]["run"] is False
    assert batch.stage_options()["export"]["targets"] == ["openvino"]


def test_the_precision_stage_runs_the_whole_request(tmp_path, monkeypatch):
    """A real precision stage on ORT: the facade receives every option the stage request set (it used to get
    variants and the budget only), and the run measures exactly the variants asked for."""
    asked = {"variants": ["fp32", "fp16"], "samples": 3, "target_cosine": 0.97, "latency_budget_s": 0.5,
             "dims": {"batch": 1}, "generation_steps": 2}
    batch = BatchRequest(stages=("precision",), stage_requests={"precision": asked})
    received = []
    real = api.precision

    def spy(handle, request, **kw):
        received.append(request)
        return real(handle, request, **kw)

    monkeypatch.setattr(api, "precision", spy)
    handle = api.load(path_of("cnn_unfused"))
    task = StageTask(handle.sha256, "cnn_unfused.onnx", "precision", batch.stage_options()["precision"])
    outcome = run_stage(task, handle.path, tmp_path / "m")
    assert outcome.status in ("ok", "failed") and outcome.verdict, outcome
    (request,) = received
    assert request == PrecisionRequest(variants=("fp32", "fp16"), samples=3, target_cosine=0.97,
                                       latency_budget_s=0.5, dims={"batch": 1}, generation_steps=2)
    assert {k.split(":", 1)[1] for k in outcome.figures if k.startswith("ratio:")} <= {"fp32", "fp16"}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


def test_the_cli_refuses_a_bad_stage_requests_file_in_one_line(tmp_path, capsys):
    model, out = str(path_of("cnn_unfused")), str(tmp_path / "out")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{\"precision\": ")
    assert main(["batch", model, "--stages", "precision", "--stage-requests", str(bad_json), "-o", out]) != 0
    assert "not valid JSON" in _one_line(capsys)

    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[precision]\nint3_mode = true\n")
    assert main(["batch", model, "--stages", "precision", "--stage-requests", str(unknown), "-o", out]) != 0
    assert "int3_mode" in _one_line(capsys)

    not_run = tmp_path / "not_run.json"
    not_run.write_text(json.dumps({"export": {"targets": ["ort"]}}))
    assert main(["batch", model, "--stages", "inspect", "--stage-requests", str(not_run), "-o", out]) != 0
    err = _one_line(capsys)
    assert "export stage" in err and "--stages" in err

    assert main(["batch", model, "--stages", "precision", "--stage-requests", str(tmp_path / "missing.json"),
                 "-o", out]) != 0
    _one_line(capsys)
    assert not (tmp_path / "out").exists()                     # refused before any work


def test_a_cluster_batch_refuses_stage_requests_naming_files_here(tmp_path):
    """A cluster worker cannot read this machine's calibration file: refused before any connection."""
    batch = BatchRequest(stages=("precision",), stage_requests={"precision": {"calibration": "calib.npz"}})
    assert batch.local_files() == ["precision.calibration"]
    from studio.batch import facade as batch_api

    with pytest.raises(StudioError) as exc:
        batch_api.batch([str(path_of("cnn_unfused"))], tmp_path / "out", batch, cluster="tcp://127.0.0.1:9")
    assert "precision.calibration" in str(exc.value) and "without --cluster" in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_the_cli_runs_a_stage_request_file(tmp_path, capsys):
    """The CLI door, end to end on the local pool: a TOML file's precision request is what the stage measured
    (its variants only), and the batch's report keeps the whole request it ran."""
    requests = tmp_path / "stages.toml"
    requests.write_text('[precision]\nvariants = ["fp32", "fp16"]\nsamples = 2\nlatency_budget_s = 0.5\n')
    out = tmp_path / "out"
    assert main(["batch", str(path_of("cnn_unfused")), "--stages", "precision", "--stage-requests", str(requests),
                 "-o", str(out), "--workers", "1", "--json"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    (row,) = result["rows"]
    figures = row["stages"]["precision"]["figures"]
    assert {k.split(":", 1)[1] for k in figures if k.startswith("ratio:")} == {"fp32", "fp16"}
    # the report keeps the whole request each stage ran (its provenance), as the stage rebuilt it
    kept = json.loads((out / "batch.json").read_text())["stage_options"]["precision"]
    assert batch_stage_request("precision", kept) == PrecisionRequest(variants=("fp32", "fp16"), samples=2,
                                                                      latency_budget_s=0.5)


def test_target_local_is_this_machine_as_for_every_other_command(tmp_path, capsys):
    """``--target local`` ran nowhere ("--target needs a cluster"); it is this machine, as ``precision``,
    ``profile`` and ``check`` read it: the same tasks (the same keys) as a batch without ``--target``."""
    model, out = str(path_of("cnn_unfused")), tmp_path / "out"
    assert main(["batch", model, "--stages", "inspect", "-o", str(out), "--workers", "1", "--target", "local",
                 "--json"]) == 0, capsys.readouterr().err
    first = json.loads(capsys.readouterr().out)
    assert first["ran"] == 1 and first["rows"][0]["stages"]["inspect"]["target"] is None
    assert main(["batch", model, "--stages", "inspect", "-o", str(out), "--workers", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] == 1           # already finished: the same task


def test_a_stage_request_may_set_what_clears_a_default():
    """Named passes clear the preset and a duration the iterations: a stage request setting them is read over
    the batch's own defaults only, so it does not clash with the command's (``give either a preset or ...``)."""
    optimize = batch_stage_request("optimize", {"passes": ["eliminate-identity", "fuse-conv-bn"]})
    assert optimize.passes == ("eliminate-identity", "fuse-conv-bn") and optimize.preset is None
    profile = batch_stage_request("profile", {"options": {"duration_s": 2.0}})
    assert profile.options.duration_s == 2.0 and profile.options.iterations is None
    assert (profile.options.warmup, profile.options.rounds) == (5, 5)            # the batch's shorter profile
