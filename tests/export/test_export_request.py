"""One typed request per export (issue 34, item 2): the CLI, the Export page and the batch stage build one
``ExportRequest``; the bundle's manifest keeps it (``request``), and the command it prints is what the CLI
reads back into the same request. Oracles: the real argparse parser and the manifest the bundle carries
(written by the export, read back from disk). Sample model: cnn_unfused, ONNX Runtime target only."""

from __future__ import annotations

import json
import shlex

from sample_models.catalog import path_of
from studio import api
from studio.batch.stages import BATCH_EXPORT, StageTask, run_stage
from studio.cli import build_parser, export_cmd, main
from studio.core.requests import ExportRequest


def _manifest(bundle) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def test_the_manifest_keeps_the_request_the_cli_built_and_a_batch_stage_runs_the_same(tmp_path, capsys):
    model = str(path_of("cnn_unfused"))
    argv = ["export", model, "--target", "ort", "-o", str(tmp_path / "cli"), "--no-zip", "--max-batch", "4",
            "--dim", "batch=2", "--ort-level", "basic", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    from pathlib import Path

    kept = ExportRequest.from_dict(_manifest(Path(out["bundle"]))["request"])
    assert kept == export_cmd.request_of(build_parser().parse_args(argv))
    assert (kept.targets, kept.zip, kept.max_batch, dict(kept.dims), kept.ort_level) == (
        ("ort",), False, 4, {"batch": 2}, "basic")
    # its own command line builds it again
    assert export_cmd.request_of(build_parser().parse_args(shlex.split(kept.command(model, "x"))[1:])) == kept

    # a batch stage with that request's options keeps the same request in its bundle
    handle = api.load(model)
    task = StageTask(handle.sha256, "cnn_unfused.onnx", "export", kept.to_dict())
    outcome = run_stage(task, handle.path, tmp_path / "batch" / "m")
    assert outcome.status == "ok", outcome.verdict
    (bundle,) = [p for p in (tmp_path / "batch" / "m" / "export").iterdir() if p.is_dir()]
    assert ExportRequest.from_dict(_manifest(bundle)["request"]) == kept
    assert BATCH_EXPORT == ExportRequest(targets=("ort",), zip=False)
