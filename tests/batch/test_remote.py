"""Remote targets: profile/precision timings run on the Dask worker offering target-NAME (its
pid, host and target come back with the figures); a missing target is a one-line error;
a package whose bytes do not match its hash is refused on the worker."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from sample_models.catalog import path_of
from studio import api
from studio.batch import facade as batch_api
from studio.batch.executors import model_files, pack_model, remote_stage
from studio.batch.remote import remote_measure
from studio.batch.stages import StageTask
from studio.cli import main
from studio.core.requests import CheckRequest, PrecisionRequest
from tests.conftest import assert_user_message

QUICK = ["--iterations", "5", "--rounds", "2", "--warmup", "1"]


def _quick():
    from studio.core.requests import ProfileRequest

    return ProfileRequest.of(iterations=5, rounds=2, warmup=1)


def test_tampered_model_bytes_are_refused_where_they_arrive(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_STUDIO_WORKER_CACHE", str(tmp_path / "cache"))
    model = path_of("cnn_unfused")
    task = StageTask(api.load(model).sha256, "cnn_unfused.onnx", "inspect")
    other = pack_model(model_files(path_of("if_loop")))          # valid tar, wrong model
    result = remote_stage(task.to_dict(), other)
    assert result["outcome"]["status"] == "failed" and "does not match its content hash" in result["outcome"]["verdict"]
    # one flipped byte inside the right model's package
    blob = bytearray(pack_model(model_files(model)))
    with tarfile.open(fileobj=io.BytesIO(bytes(blob))) as tar:
        offset = tar.getmember("model.onnx").offset_data
    blob[offset + 100] ^= 0xFF
    assert remote_stage(task.to_dict(), bytes(blob))["outcome"]["status"] == "failed"
    assert not any((tmp_path / "cache" / "models").iterdir())          # nothing kept from a refused package
    # the profile/precision package: the whole tar is hashed before it is opened
    good = pack_model(model_files(model))
    refused = remote_measure("profile", good, "0" * 64, [("m", "model.onnx", task.model_sha256)], {}, {})
    assert refused["code"] == "HASH-MISMATCH" and "result" not in refused


def test_target_without_a_cluster_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.delenv("ONNX_STUDIO_CLUSTER", raising=False)
    assert main(["profile", str(path_of("cnn_unfused")), "--target", "edge", *QUICK]) == 2
    assert_user_message(capsys.readouterr().err.strip().splitlines()[-1], "--target needs a cluster")
    assert main(["profile", str(path_of("cnn_unfused")), "--target", "bad name!"]) == 2
    assert "target name" in capsys.readouterr().err


@pytest.mark.slow
def test_targets_measure_on_the_labelled_worker_side_by_side(dask_cluster, capsys):
    from distributed import Client

    with Client(dask_cluster.address, timeout=30, set_as_default=False) as c:
        workers = c.scheduler_info(n_workers=-1)["workers"]
        (edge_addr,) = [a for a, w in workers.items() if "target-edge" in (w.get("resources") or {})]
        edge_pid = c.run(os.getpid, workers=[edge_addr])[edge_addr]      # the process the scheduler knows
    assert batch_api.cluster_targets(dask_cluster.address) == ["edge"]

    model = api.load(path_of("cnn_unfused"))
    on_edge, here = batch_api.profile_on(["edge", "local"], [model], _quick(), cluster=dask_cluster.address)
    assert on_edge.result.ok and here.result.ok
    assert on_edge.measured_by["target"] == "edge" and on_edge.measured_by["worker"] == edge_addr
    assert on_edge.measured_by["pid"] == edge_pid != os.getpid()
    assert here.target == "local" and here.measured_by["pid"] == os.getpid() and here.measured_by["worker"] is None
    assert on_edge.measured_by["engines"]["onnxruntime"]
    assert on_edge.request == here.request == _quick()          # the request each far end rebuilt and ran
    assert [v.id for v in on_edge.result.variants] == [v.id for v in here.result.variants]

    # check on the target (issue 34): the whole request travels; the worker's verdicts are those of a run here
    check = CheckRequest(engines=("onnxruntime",), dims={"batch": 2})
    checked = batch_api.check_on("edge", model, check, cluster=dask_cluster.address)
    assert checked.measured_by["pid"] == edge_pid and checked.request == check
    assert [(v.engine, v.verdict, v.ran_on) for v in checked.result.verdicts] == \
        [(v.engine, v.verdict, v.ran_on) for v in api.check(model, check).verdicts]
    assert main(["check", str(path_of("cnn_unfused")), "--engines", "ort", "--target", "edge", "--cluster",
                 dask_cluster.address]) == 0
    assert "target   edge: measured on" in capsys.readouterr().out

    # the CLI labels each block with its machine and prints the targets side by side
    assert main(["profile", str(path_of("cnn_unfused")), "--targets", "edge,local", "--cluster",
                 dask_cluster.address, *QUICK]) == 0
    out = capsys.readouterr().out
    assert f"target   edge: measured on" in out and f"pid {edge_pid}" in out and "side by side" in out

    # precision on the target: the timing ran there too
    measured = batch_api.precision_on("edge", model, PrecisionRequest(variants=("fp32", "fp16"),
                                                                      latency_budget_s=0.5),
                                      cluster=dask_cluster.address)
    assert measured.measured_by["pid"] == edge_pid and measured.result.variant("fp32").latency_ms is not None

    # a target no worker offers: one line naming the known ones
    assert main(["profile", str(path_of("cnn_unfused")), "--target", "gpu", "--cluster", dask_cluster.address,
                 *QUICK]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert_user_message(err, "no worker of the cluster offers target 'gpu'", "known targets: edge")


@pytest.mark.slow
def test_precision_on_a_target_runs_the_whole_request(dask_cluster, capsys, tmp_path):
    """Issue 34: ``precision --target NAME`` passed the worker a subset of its options (no weight-only
    options, generation steps or tasks): the same flags here and on target edge built different int8-weights
    models. Now the whole request travels (JSON) with its calibration file; the worker rebuilds the very
    request (``report.request``) and builds and judges the same variants as a run here."""
    import json

    import numpy as np

    model = path_of("transformer_block")
    feeds = api.make_inputs(api.load(model), count=3)
    calib = tmp_path / "calibration.npz"
    np.savez(calib, **{f"{k}/{i}": v for i, fs in enumerate(feeds.sets) for k, v in fs.items()})
    argv = ["precision", str(model), "--variants", "fp32,int8-weights", "--block-size", "16", "--asymmetric",
            "--accuracy-level", "4", "--steps", "3", "--calibration", str(calib), "--samples", "3",
            "--target-cosine", "0.999", "--budget", "0.5", "--json"]
    assert main(argv) == 0
    here = json.loads(capsys.readouterr().out)
    assert main([*argv, "--target", "edge", "--cluster", dask_cluster.address]) == 0
    there = json.loads(capsys.readouterr().out)
    assert there["target"] == "edge" and there["measured_by"]["target"] == "edge"
    there = there["result"]
    wo = {r["name"]: r["details"].get("weight_only") for r in here["variants"]}["int8-weights"]
    assert (wo["block_size"], wo["symmetric"], wo["accuracy_level"]) == (16, False, 4)
    assert here["calibration"] == there["calibration"] and "calibration.npz" in here["calibration"]
    for a, b in zip(here["variants"], there["variants"], strict=True):
        assert (a["name"], a["status"], a["cosine"], a["meets_target"], a["details"]) == \
            (b["name"], b["status"], b["cosine"], b["meets_target"], b["details"])

    # the API door: what the worker ran is the request that was sent, field for field
    request = PrecisionRequest(variants=("fp32", "int8-weights"), calibration=str(calib), samples=3,
                               block_size="16", symmetric=False, accuracy_level=4, generation_steps=3,
                               target_cosine=0.999, latency_budget_s=0.5, tasks={"last_hidden_state": "embedding"},
                               dims={"batch": 1})
    measured = batch_api.precision_on("edge", api.load(model), request, cluster=dask_cluster.address)
    assert measured.measured_by["target"] == "edge" and measured.result.request == request
