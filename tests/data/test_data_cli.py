"""onnx-studio data add|list|show|eval|rm against a project."""

from __future__ import annotations

import json

from sample_models.catalog import path_of
from studio.cli import main
from tests.photos import photo_folder
from tests.requirements import require_module

require_module("skimage.data")


def test_data_cli_roundtrip(tmp_path, capsys):
    photos = photo_folder(tmp_path / "photos", n_per_class=2)
    (photos / "junk.jpg").write_bytes(b"junk")
    model = str(path_of("image_classifier"))
    assert main(["data", "add", str(photos), "--project", "p1", "--name", "real", "--model", model]) == 0
    out = capsys.readouterr().out
    assert "real: 6 image sample(s), 1 skipped" in out and "imagenet" in out and "junk.jpg" in out
    assert main(["data", "list", "--project", "p1", "--json"]) == 0
    assert [d["name"] for d in json.loads(capsys.readouterr().out)] == ["real"]
    assert main(["data", "show", "real", "--project", "p1", "--model", model]) == 0
    assert "float32[1, 3, 64, 64]" in capsys.readouterr().out
    assert main(["data", "eval", "real", "--project", "p1", "--model", model, "--engine", "openvino",
                 "--goal", "top1-agreement>=0.99"]) == 0
    out = capsys.readouterr().out
    assert "logits (classification): top1-agreement 1" in out and "target top1-agreement>=0.99: met" in out
    assert main(["data", "add", str(photos), "--project", "p1", "--name", "real"]) == 2
    assert "already has a dataset named 'real'" in capsys.readouterr().err
    assert main(["data", "rm", "real", "--project", "p1"]) == 2
    assert main(["data", "rm", "real", "--project", "p1", "--yes"]) == 0
    assert main(["data", "show", "real", "--project", "p1"]) == 2
    assert "no dataset 'real'" in capsys.readouterr().err


def test_compare_on_a_dataset_reports_task_metrics(tmp_path, capsys):
    photos = photo_folder(tmp_path / "photos", n_per_class=2)
    model = str(path_of("image_classifier"))
    assert main(["data", "add", str(photos), "--project", "p2", "--name", "real", "--model", model]) == 0
    capsys.readouterr()
    assert main(["compare", model, model, "--engine-b", "openvino", "--project", "p2", "--dataset", "real",
                 "--goal", "top1-agreement>=0.99"]) == 0
    out = capsys.readouterr().out
    assert "dataset real" in out and "task       logits (classification): top1-agreement 1" in out
    assert "target     top1-agreement>=0.99: met" in out


def test_profile_times_on_a_dataset_sample(tmp_path, capsys):
    photos = photo_folder(tmp_path / "photos", n_per_class=1)
    model = str(path_of("image_classifier"))
    assert main(["data", "add", str(photos), "--project", "p3", "--name", "real", "--model", model]) == 0
    capsys.readouterr()
    assert main(["profile", model, "--project", "p3", "--dataset", "real", "--iterations", "5", "--rounds", "2",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "dataset-inputs.npz" in json.dumps(data["feeds"]) or "dataset-inputs" in json.dumps(data["options"])


def test_export_parity_on_a_dataset(tmp_path, capsys):
    photos = photo_folder(tmp_path / "photos", n_per_class=1)
    model = str(path_of("image_classifier"))
    assert main(["data", "add", str(photos), "--project", "p4", "--name", "real", "--model", model,
                 "--split", "0.4"]) == 0
    capsys.readouterr()
    assert main(["export", model, "--target", "ort", "--target", "openvino", "-o", str(tmp_path / "out"),
                 "--project", "p4", "--dataset", "real", "--goal", "top1-agreement>=0.99"]) == 0
    out = capsys.readouterr().out
    assert "task metrics of every artifact" in out and "all met" in out
    bundle = next((tmp_path / "out").glob("*/parity.json"))
    parity = json.loads(bundle.read_text())
    kinds = {r["engine"] for r in parity["artifacts"]}
    assert {"onnxruntime", "openvino"} <= kinds and all(r["target_met"] for r in parity["artifacts"])
    import zipfile
    (z,) = (tmp_path / "out").glob("*.zip")
    assert any(n.endswith("parity.json") for n in zipfile.ZipFile(z).namelist())
