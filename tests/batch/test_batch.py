"""Batch runs: local pool and a real Dask cluster on loopback give the same rows; targets run
where they are labelled; resuming skips finished work. A worker killed mid-batch: test_lost_dask_worker.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest

from sample_models.catalog import path_of
from studio import api
from studio.batch import facade as batch_api
from studio.cli import main
from tests.conftest import backend_models, sha256_file

STAGES = ["inspect", "check", "optimize"]


def _models(tmp_path) -> list[Path]:
    chosen = [path_of("cnn_unfused"), path_of("if_loop"), path_of("transformer_block")]
    chosen += backend_models()[10::50][:2]
    hostile = tmp_path / "hostile.onnx"
    hostile.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n")
    return [*chosen, hostile]


def _summary(result) -> dict:
    return {(r.model.name, s): (o.status, o.figures.get("nodes"), o.figures.get("verdict:onnxruntime"))
            for r in result.rows for s, o in r.outcomes.items()}


def test_local_batch_rows_resume_and_reports(tmp_path):
    models = _models(tmp_path)
    before = {p: sha256_file(p) for p in models}
    r = batch_api.batch(models, tmp_path / "out", stages=STAGES, stage_options={"check": {"engines": ["onnxruntime"]}})
    by_name = {row.model.name: row for row in r.rows}
    assert by_name["hostile.onnx"].status() == "failed" and "Git LFS" in by_name["hostile.onnx"].model.error
    assert by_name["cnn_unfused.onnx"].outcomes["check"].status == "ok"
    assert r.ran == 5 * len(STAGES) and r.skipped == 0
    data = json.loads((tmp_path / "out" / "batch.json").read_text())
    assert len(data["rows"]) == 6
    html = (tmp_path / "out" / "batch.html").read_text()
    assert "sortable" in html and "Verdict matrix" in html and "<script>alert" not in html
    assert (tmp_path / "out" / "batch.csv").read_text().count("\n") == 7
    again = batch_api.batch(models, tmp_path / "out", stages=STAGES, stage_options={"check": {"engines": ["onnxruntime"]}})
    assert again.ran == 0 and again.skipped == 5 * len(STAGES)
    assert {p: sha256_file(p) for p in models} == before


@pytest.mark.slow
def test_cluster_matches_local_and_targets_run_where_labelled(tmp_path, dask_cluster):
    models = _models(tmp_path)[:3]
    opts = {"check": {"engines": ["onnxruntime"]}, "profile": {"iterations": 20, "rounds": 2, "warmup": 2}}
    local = batch_api.batch(models, tmp_path / "local", stages=STAGES, stage_options=opts)
    remote = batch_api.batch(models, tmp_path / "remote", stages=STAGES, cluster=dask_cluster.address, stage_options=opts)
    assert remote.executor == "dask" and _summary(remote) == _summary(local)
    optimized = next(r for r in remote.rows if r.model.name == "cnn_unfused.onnx").outcomes["optimize"]
    landed = tmp_path / "remote" / next(r.model.folder_name for r in remote.rows
                                        if r.model.name == "cnn_unfused.onnx") / optimized.artifacts[0]
    onnx.checker.check_model(str(landed))

    edge = batch_api.batch(models[:1], tmp_path / "edge", stages=["profile"], cluster=dask_cluster.address,
                           target="edge", stage_options=opts)
    (row,) = edge.rows
    assert row.outcomes["profile"].status == "ok" and row.outcomes["profile"].worker["target"] == "edge"
    from distributed import Client
    with Client(dask_cluster.address, timeout=30, set_as_default=False) as c:
        edge_addr = next(a for a, w in c.scheduler_info(n_workers=-1)["workers"].items()
                         if "target-edge" in (w.get("resources") or {}))
        assert row.outcomes["profile"].worker["pid"] == c.run(os.getpid, workers=[edge_addr])[edge_addr]
    assert row.outcomes["profile"].worker["worker"] == edge_addr
    assert "profile ran on" in (tmp_path / "edge" / "batch.html").read_text()
    # a worker killed mid-batch: tests/batch/test_lost_dask_worker.py


def test_bad_cluster_address_and_target_without_cluster_are_one_line_errors(tmp_path, capsys):
    assert main(["batch", str(path_of("cnn_unfused")), "-o", str(tmp_path / "o"), "--cluster", "http://x"]) == 2
    assert "tcp://HOST:PORT" in capsys.readouterr().err
    assert main(["batch", str(path_of("cnn_unfused")), "-o", str(tmp_path / "o"), "--target", "edge"]) == 2
    assert "--target needs a cluster" in capsys.readouterr().err


def test_a_batch_stops_only_its_own_sandbox_workers(tmp_path):
    from studio.core.sandbox import pool_info

    model = api.load(path_of("cnn_unfused"))
    api.inspect(model, pool_key="other-session")                  # another session's warm worker
    before = {p["pool"]: p["pid"] for p in pool_info()}
    assert before.get("other-session")
    r = batch_api.batch([path_of("cnn_unfused")], tmp_path / "out", stages=["inspect"], pool_key="mine")
    assert r.ran == 1
    after = {p["pool"]: p["pid"] for p in pool_info()}
    assert after.get("other-session") == before["other-session"]
    assert not [k for k in after if k.startswith("mine:")]       # the batch's own pools are gone
    # cancelling a batch kills its running workers, never another session's
    from studio.batch.executors import LocalExecutor
    from studio.batch.stages import StageTask

    ex = LocalExecutor(1, pool_prefix="mine")
    ex.submit(StageTask(model.sha256, "cnn_unfused.onnx", "inspect"), {"model": model.path}, tmp_path / "t").result()
    assert any(k.startswith("mine:") for k in (p["pool"] for p in pool_info()))
    ex.cancel()
    ex.close()
    after = {p["pool"]: p["pid"] for p in pool_info()}
    assert after.get("other-session") == before["other-session"] and not [k for k in after if k.startswith("mine:")]
    api.release_session("other-session")
