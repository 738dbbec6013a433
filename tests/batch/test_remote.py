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
from studio.batch.executors import _model_files, _pack_model, remote_stage
from studio.batch.remote import remote_measure
from studio.batch.stages import StageTask
from studio.cli import main
from tests.conftest import assert_user_message

QUICK = ["--iterations", "5", "--rounds", "2", "--warmup", "1"]


def _quick():
    from profilers.profile import ProfileOptions

    return ProfileOptions(iterations=5, rounds=2, warmup=1)


def test_tampered_model_bytes_are_refused_where_they_arrive(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_STUDIO_WORKER_CACHE", str(tmp_path / "cache"))
    model = path_of("cnn_unfused")
    task = StageTask(api.load(model).sha256, "cnn_unfused.onnx", "inspect")
    other = _pack_model(_model_files(path_of("if_loop")))          # valid tar, wrong model
    result = remote_stage(task.to_dict(), other)
    assert result["outcome"]["status"] == "failed" and "does not match its content hash" in result["outcome"]["verdict"]
    # one flipped byte inside the right model's package
    blob = bytearray(_pack_model(_model_files(model)))
    with tarfile.open(fileobj=io.BytesIO(bytes(blob))) as tar:
        offset = tar.getmember("model.onnx").offset_data
    blob[offset + 100] ^= 0xFF
    assert remote_stage(task.to_dict(), bytes(blob))["outcome"]["status"] == "failed"
    assert not any((tmp_path / "cache" / "models").iterdir())          # nothing kept from a refused package
    # the profile/precision package: the whole tar is hashed before it is opened
    good = _pack_model(_model_files(model))
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
    on_edge, here = batch_api.profile_on(["edge", "local"], [model], ["ort"], _quick(), cluster=dask_cluster.address)
    assert on_edge.result.ok and here.result.ok
    assert on_edge.measured_by["target"] == "edge" and on_edge.measured_by["worker"] == edge_addr
    assert on_edge.measured_by["pid"] == edge_pid != os.getpid()
    assert here.target == "local" and here.measured_by["pid"] == os.getpid() and here.measured_by["worker"] is None
    assert on_edge.measured_by["engines"]["onnxruntime"]

    # the CLI labels each block with its machine and prints the targets side by side
    assert main(["profile", str(path_of("cnn_unfused")), "--targets", "edge,local", "--cluster",
                 dask_cluster.address, *QUICK]) == 0
    out = capsys.readouterr().out
    assert f"target   edge: measured on" in out and f"pid {edge_pid}" in out and "side by side" in out

    # precision on the target: the timing ran there too
    measured = batch_api.precision_on("edge", model, cluster=dask_cluster.address, variants=["fp32", "fp16"],
                                      latency_budget_s=3.0)
    assert measured.measured_by["pid"] == edge_pid and measured.result.variant("fp32").latency_ms is not None

    # a target no worker offers: one line naming the known ones
    assert main(["profile", str(path_of("cnn_unfused")), "--target", "gpu", "--cluster", dask_cluster.address,
                 *QUICK]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert_user_message(err, "no worker of the cluster offers target 'gpu'", "known targets: edge")
