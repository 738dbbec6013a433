"""Issue 34 item 2: the Optimize page and ``batch --stages optimize`` run the one ``OptimizeRequest`` on a
remote target as ``optimize --target NAME`` does.

- The Optimize page (AppTest) offers the cluster's targets ('local' and 'edge'); the request it sends to
  'edge' equals, field by field, the request the CLI builds from the page's own hint (which names
  ``--target edge``); the result is the edge worker's (its pid, the page says where it ran), and is saved as
  a version of the model the page optimized, byte-identical to a local run of the CLI's request.
- ``batch --stages optimize --target edge`` sends the optimize stage to the edge worker (its task carries the
  OptimizeRequest), and the model that comes back is byte-identical to a local batch's.

Oracles: the real argparse parser and ``optimize_cmd.request_of``; the edge worker's pid from Dask itself;
the optimized bytes of a plain local ``api.optimize`` / local batch run. Figures are of the cnn_unfused
sample model (code-built), not of the real corpus.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from pathlib import Path

import pytest

from sample_models.catalog import path_of
from studio import api
from studio.batch import facade as batch_api
from studio.batch.executors import LocalExecutor
from studio.batch.runner import run_batch
from studio.cli import build_parser, main, optimize_cmd, remote_args
from studio.core.requests import OptimizeRequest
from tests.conftest import SAMPLES, current_model, open_sample


def _edge_pid(address: str) -> tuple[str, int]:
    """(address, pid) of the worker offering target 'edge', asked of the scheduler and that worker."""
    from distributed import Client

    with Client(address, timeout=30, set_as_default=False) as c:
        edge = next(a for a, w in c.scheduler_info(n_workers=-1)["workers"].items()
                    if "target-edge" in (w.get("resources") or {}))
        return edge, c.run(os.getpid, workers=[edge])[edge]


def _differences(a, b) -> list[str]:
    return [f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)]


def _hint(at) -> str:
    (hint,) = [line for c in at.code for line in c.value.splitlines() if line.startswith("onnx-studio optimize")]
    return hint


@pytest.mark.slow
def test_the_optimize_page_runs_its_request_on_the_chosen_target(app, dask_cluster, tmp_path):
    at = app(str(SAMPLES / "cnn_unfused.onnx"), ONNX_STUDIO_CLUSTER=dask_cluster.address).run()
    at.switch_page("views/optimize.py").run()
    assert not at.exception, at.exception
    picker = at.selectbox(key="opt_machine")
    assert picker.options == ["local", "edge"] and picker.value == "local"
    at.radio(key="opt_on_failure").set_value("revert").run()
    dim = next(n for n in at.number_input if n.key.startswith("opt_dim_"))
    dim.set_value(2).run()
    assert "--target" not in _hint(at)                     # 'local' runs here, as the CLI without --target
    at.selectbox(key="opt_machine").set_value("edge").run()
    hint = _hint(at)
    at.button(key="opt_run").click().run()
    assert not at.exception, at.exception

    args = build_parser().parse_args(shlex.split(hint)[1:])
    from_hint = optimize_cmd.request_of(args)
    assert remote_args.targets_of(args) == ["edge"]
    saved = at.session_state["onnx_studio_results"]["onnx_studio_optimize_result"][1]
    measured = saved["measured"]
    assert _differences(measured.request, from_hint) == [], hint      # what edge ran is what the hint asks
    assert measured.request.on_failure == "revert" and dict(measured.request.dims) == {"batch": 2}
    address, pid = _edge_pid(dask_cluster.address)
    assert measured.target == "edge" and measured.measured_by["target"] == "edge"
    assert (measured.measured_by["worker"], measured.measured_by["pid"]) == (address, pid) and pid != os.getpid()
    assert any("Optimized and verified on target edge" in i.value for i in at.info)
    assert _hint(at) == hint                               # the report's hint is the one the run was asked with

    # saved as a version of the model optimized, the bytes a local run of the CLI's request writes
    model = current_model(at)
    v1 = model.version("v1")
    assert at.session_state["onnx_studio_version"] == "v1" and v1.parent == "v0"
    assert OptimizeRequest.from_dict(v1.provenance["request"]) == from_hint
    local = api.optimize(api.load(SAMPLES / "cnn_unfused.onnx"), from_hint, out_path=tmp_path / "here.onnx")
    assert local.ok and model.handle("v1").path.read_bytes() == (tmp_path / "here.onnx").read_bytes()

    # another model opened in the same session shows nothing of this result
    at.switch_page("views/overview.py").run()
    open_sample(at, "if_loop")
    at.switch_page("views/optimize.py").run()
    assert not any("on target edge" in i.value for i in at.info)
    assert not [v for v in current_model(at).versions if v.id != "v0"]


def test_a_batch_target_sends_the_optimize_stage_with_its_request(tmp_path, monkeypatch):
    """No cluster needed: the tasks a batch makes. With ``target`` the optimize stage's task is addressed to
    it (as profile's and precision's are) and carries the OptimizeRequest; inspect stays where it runs."""
    sent = []

    class Recording(LocalExecutor):
        def submit(self, task, files, out_dir):
            sent.append(task)
            return super().submit(task, files, out_dir)

    executor = Recording(1, pool_prefix="test-batch-target")
    request = OptimizeRequest(dims={"batch": 2}, on_failure="revert")
    result = run_batch([path_of("cnn_unfused")], tmp_path / "out", stages=["inspect", "optimize"], executor=executor,
                       stage_options={"optimize": request.to_dict()}, target="edge")
    by_stage = {t.stage: t for t in sent}
    assert by_stage["inspect"].target is None and by_stage["optimize"].target == "edge"
    assert OptimizeRequest.from_dict(by_stage["optimize"].options) == request
    (row,) = result.rows
    assert row.outcomes["optimize"].status == "ok" and row.outcomes["optimize"].target == "edge"


def test_a_remote_optimize_stage_sends_back_the_models_external_data(monkeypatch, tmp_path):
    """The worker side of a Dask batch task, in this process: an optimized model whose weights are saved
    externally (the threshold set to 0) comes back with its .data file (before, only the .onnx came back: a
    landed model without its weights). Oracle: plain onnxruntime on the landed model and on the source."""
    import numpy as np

    from studio.batch.executors import _land, model_files, pack_model, remote_stage
    from studio.batch.stages import StageTask
    from studio.core import model_io
    from tests.conftest import ort_reference

    monkeypatch.setattr(model_io, "EXTERNAL_THRESHOLD", 0)
    monkeypatch.setenv("ONNX_STUDIO_WORKER_CACHE", str(tmp_path / "cache"))
    source = path_of("external_data")
    request = OptimizeRequest(passes=("fuse-matmul-add",))              # changes the model: saved anew
    task = StageTask(api.load(source).sha256, source.name, "optimize", request.to_dict(), "edge")
    outcome = _land(remote_stage(task.to_dict(), pack_model(model_files(source))), tmp_path / "out" / "m" / "x")
    assert outcome.status == "ok", outcome.verdict
    assert sorted(Path(a).name for a in outcome.artifacts) == ["optimized.onnx", "optimized.onnx.data"]
    landed = tmp_path / "out" / "m" / outcome.artifacts[0]
    assert api.load(landed).external_files                               # its weights are in the side file
    feeds = {"input": np.random.default_rng(0).standard_normal((2, 128)).astype(np.float32)}
    for got, want in zip(ort_reference(landed, feeds).values(), ort_reference(source, feeds).values()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _landed(result_json: dict, out: Path) -> bytes:
    (row,) = result_json["rows"]
    outcome = row["stages"]["optimize"]
    assert outcome["status"] == "ok", outcome
    (artifact,) = outcome["artifacts"]            # relative to the model's own folder of the batch
    (path,) = out.glob(f"*/{artifact}")
    return path.read_bytes()


@pytest.mark.slow
def test_batch_optimize_on_a_target_gives_the_bytes_of_a_local_batch(dask_cluster, tmp_path, capsys):
    model = str(path_of("cnn_unfused"))
    assert main(["batch", model, "--stages", "optimize", "-o", str(tmp_path / "here"), "--json"]) == 0
    here = json.loads(capsys.readouterr().out)
    assert main(["batch", model, "--stages", "optimize", "-o", str(tmp_path / "edge"), "--cluster",
                 dask_cluster.address, "--target", "edge", "--json"]) == 0
    edge = json.loads(capsys.readouterr().out)
    assert edge["executor"] == "dask"
    (row,) = edge["rows"]
    ran = row["stages"]["optimize"]
    address, pid = _edge_pid(dask_cluster.address)
    assert ran["target"] == "edge" and ran["worker"]["target"] == "edge"
    assert (ran["worker"]["worker"], ran["worker"]["pid"]) == (address, pid)
    optimized = _landed(edge, tmp_path / "edge")
    assert optimized == _landed(here, tmp_path / "here")
    assert optimized != Path(model).read_bytes()                       # the stage did change the model
    assert "optimize ran on" in (tmp_path / "edge" / "batch.html").read_text()
