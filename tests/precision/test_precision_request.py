"""One typed request per precision run (issue 34, item 2): the CLI, the page, batch stages and remote
targets build one ``PrecisionRequest``; it survives JSON, prints a command the real CLI parser reads back
into the same request, and a run on a target (the worker's side, and ``--target local``) does what a run
here does with every option, weight-only ones included (``--target`` used to drop them).

Oracles: the request's own fields (every one set away from its default), the real argparse parser, and
the weight-only pass's record of the block size / symmetry / accuracy level it quantized with."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex

import numpy as np
import pytest

from sample_models.catalog import path_of
from studio import api
from studio.batch.remote import _pack, remote_measure
from studio.cli import build_parser, main, precision_cmd, remote_args
from studio.core.errors import StudioError
from studio.core.requests import PrecisionRequest

FULL = PrecisionRequest(
    variants=("fp32", "int8", "int8-weights"), calibration="calib dir/calib.npz", calibration_method="entropy",
    samples=3, inputs="eval.npz", target_cosine=0.95, goal="top1-agreement>=0.9", dataset="photos",
    tasks={"logits": "classification"}, dims={"batch": 2, "seq len": 5},
    preprocess={"size": (32, 48), "layout": "NHWC", "mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25),
                "bgr": True},
    latency_budget_s=7.0, block_size="32", symmetric=False, accuracy_level=4, ratio=0.5, generation_steps=3)


def test_every_field_is_exercised_and_survives_json():
    default = PrecisionRequest()
    same = [f.name for f in dataclasses.fields(FULL) if getattr(FULL, f.name) == getattr(default, f.name)]
    assert same == [], f"set these away from their defaults in FULL: {same}"
    wire = json.loads(json.dumps(FULL.to_dict()))
    assert PrecisionRequest.from_dict(wire) == FULL
    # the same options given in another order or spelling are the same request
    assert dataclasses.replace(FULL, dims={"seq len": 5, "batch": 2}, variants=["fp32", "int8", "int8-weights"]) == FULL
    with pytest.raises(StudioError) as exc:                      # a newer client's option is refused, not dropped
        PrecisionRequest.from_dict({**wire, "int3_mode": True})
    assert exc.value.code == "BAD-REQUEST" and "int3_mode" in str(exc.value)


def test_the_request_prints_a_command_the_cli_reads_back_as_the_same_request():
    """The hint a page shows comes from the request; the CLI builds its request from those words."""
    hint = FULL.command("my model.onnx")
    args = build_parser().parse_args(shlex.split(hint)[1:])
    assert args.model == "my model.onnx"

    class Named:                                     # the project dataset the CLI would open by that name
        name = args.dataset

    rebuilt = precision_cmd.request_of(args, Named(), dict(api.parse_task_options(args.tasks)),
                                       remote_args.goal_of(args))
    assert rebuilt == FULL
    assert PrecisionRequest().command("m.onnx") == "onnx-studio precision m.onnx"


def test_the_goal_has_its_own_flag_and_the_old_spelling_still_works(capsys):
    p = build_parser()
    new = p.parse_args(["precision", "m.onnx", "--goal", "map-drop<=0.01", "--target", "edge"])
    assert remote_args.goal_of(new) == "map-drop<=0.01" and remote_args.targets_of(new) == ["edge"]
    assert capsys.readouterr().err == ""
    old = p.parse_args(["precision", "m.onnx", "--target", "top1-agreement>=0.99"])
    assert remote_args.goal_of(old) == "top1-agreement>=0.99" and remote_args.targets_of(old) == []
    assert "deprecated: write --goal" in capsys.readouterr().err
    with pytest.raises(StudioError):
        remote_args.goal_of(p.parse_args(["precision", "m.onnx", "--goal", "a>=1", "--target", "b<=2"]))


def _weight_only(report_json: dict) -> dict:
    return next(v for v in report_json["variants"] if v["name"] == "int8-weights")["details"]["weight_only"]


@pytest.mark.slow
def test_target_local_keeps_every_option(capsys):
    """``--target local`` ran api.precision with a subset of the options: the weight-only ones were
    dropped, so int8-weights was built with block auto (32 here), symmetric, accuracy level 0."""
    argv = ["precision", str(path_of("transformer_block")), "--variants", "fp32,int8-weights", "--block-size", "16",
            "--asymmetric", "--accuracy-level", "4", "--budget", "0.5", "--json"]
    assert main(argv) == 0
    here = _weight_only(json.loads(capsys.readouterr().out))
    assert main([*argv, "--target", "local"]) == 0
    there = _weight_only(json.loads(capsys.readouterr().out)["result"])
    assert (here["block_size"], here["symmetric"], here["accuracy_level"]) == (16, False, 4)
    assert there == here


@pytest.mark.slow
def test_the_worker_side_rebuilds_the_same_request_and_does_the_same(tmp_path):
    """What a remote target receives (the request as JSON, its files in the hashed package) is run by
    ``remote_measure`` as the worker does; it rebuilds the very request, and its variants match a run here."""
    model = path_of("transformer_block")
    handle = api.load(model)
    feeds = api.make_inputs(handle, count=3)
    calib = tmp_path / "calibration.npz"
    np.savez(calib, **{f"{k}/{i}": v for i, fs in enumerate(feeds.sets) for k, v in fs.items()})
    request = PrecisionRequest(variants=("fp32", "int8-weights"), calibration=str(calib), samples=3,
                               latency_budget_s=0.5, block_size="16", symmetric=False, accuracy_level=4,
                               target_cosine=0.999, generation_steps=3)
    blob = _pack({"m0/model.onnx": model, "data/calibration.npz": calib})
    answer = remote_measure("precision", blob, hashlib.sha256(blob).hexdigest(),
                            [("model", "m0/model.onnx", handle.sha256)],
                            {"calibration": "data/calibration.npz"}, {"request": json.loads(json.dumps(
                                request.to_dict()))})
    assert "error" not in answer, answer
    remote = answer["result"]
    assert remote.request == request                              # every field survived the trip
    local = api.precision(handle, request)
    assert local.request == request
    assert remote.calibration == local.calibration and "calibration.npz" in local.calibration
    for a, b in zip(local.variants, remote.variants, strict=True):
        assert (a.name, a.status, a.cosine, a.meets_target, dict(a.details)) == \
            (b.name, b.status, b.cosine, b.meets_target, dict(b.details))
    assert remote.variant("int8-weights").details["weight_only"]["block_size"] == 16
