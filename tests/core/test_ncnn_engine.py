"""ncnn, the sixth engine, added through the engine table (issue 34 item 5): a real pnnx conversion
and ncnn run against a plain onnxruntime call, its check's per-node verdicts from a real conversion,
and the table driving the CLI's engine choices and ``api.engines()``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.requirements import require_engine

ROOT = Path(__file__).resolve().parents[2]
MOBILENET = ROOT / "sample_models" / "mobilenet_like.onnx"      # code-built sample: Conv, HardSwish, Gemm
TRANSFORMER = ROOT / "sample_models" / "transformer_block.onnx"  # code-built sample: Gather embeddings


@pytest.fixture(scope="module")
def ncnn_here():
    require_engine("ncnn")


def _plain_ort(path: Path, feeds: dict) -> dict:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_ncnn_f32_and_f16_against_plain_onnxruntime(ncnn_here, tmp_path):
    from studio.core.engines import RunOptions, get_engine

    model = tmp_path / "user" / "m.onnx"
    model.parent.mkdir()
    shutil.copy(MOBILENET, model)
    before = sorted(p.name for p in model.parent.iterdir())
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = _plain_ort(model, {"input": x})["logits"]
    f32 = get_engine("ncnn").run(model, {"input": x}, options=RunOptions(precision="f32"))
    f16 = get_engine("ncnn").run(model, {"input": x}, options=RunOptions(precision="f16"))
    got32, got16 = f32.outputs["logits"], f16.outputs["logits"]
    assert got32.shape == want.shape == (1, 10) and got32.dtype == np.float32
    err32, err16 = float(np.abs(got32 - want).max()), float(np.abs(got16 - want).max())
    assert err32 < 1e-4                       # fp32 storage and arithmetic pinned (measured 7e-7)
    assert 1e-5 < err16 < 5e-2               # fp16 storage really used: the numbers move, a little (1e-3)
    assert int(np.argmax(got16)) == int(np.argmax(want))
    # the mechanism: pnnx converted at the feed shapes with fp16 weights only when asked, in a folder of its own
    assert f32.details["converter_command"][:3] == ["pnnx", "model.onnx", "inputshape=[1,3,32,32]f32"]
    assert "fp16=0" in f32.details["converter_command"] and "fp16=1" in f16.details["converter_command"]
    assert f32.details["convert_ms"] > 0 and f32.engine == "ncnn"
    assert sorted(p.name for p in model.parent.iterdir()) == before     # nothing written beside the user's file


def test_ncnn_runner_protocol_converts_once_per_shape(ncnn_here, tmp_path):
    """The one runner protocol: prepare converts for the feed shapes, bind/infer reuse it; a new shape
    converts again (pnnx works at fixed shapes)."""
    from studio.core.engines.sessions import RUNNERS, open_runner
    from studio.core.jobs import JobContext

    assert RUNNERS["ncnn"] == "studio.core.engines.ncnn:NcnnRunner"
    ctx = JobContext(scratch=tmp_path, out_dir=tmp_path)
    runner = open_runner("ncnn", MOBILENET, {"precision": "f32"}, ctx)    # dynamic batch: converts on prepare
    assert runner.input_names == ["input"] and runner.output_names == ["logits"]
    assert runner.effective_precision == "f32"
    x1 = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    runner.prepare({"input": x1})
    first = runner.details["converter_command"]
    out = runner.infer({"input": x1})["logits"]
    np.testing.assert_allclose(out, _plain_ort(MOBILENET, {"input": x1})["logits"], atol=1e-4)
    bound = runner.bind({"input": x1})
    np.testing.assert_allclose(bound()["logits"], out, atol=0)
    assert runner.details["converter_command"] is first                   # no second conversion
    runner.close()


def test_ncnn_check_names_the_nodes_pnnx_leaves_unlowered(ncnn_here):
    """transformer_block's embedding Gathers stay ncnn-less layers after pnnx: the check fails naming
    exactly those ONNX nodes (oracle: ncnn's own layer registry and the model's Gather nodes)."""
    import ncnn

    from diagnostics.compatibility import check_model
    from studio.core.model import load as load_model

    assert ncnn.layer_to_index("Gather") == -1 and ncnn.layer_to_index("Convolution") >= 0
    report = check_model(load_model(TRANSFORMER), ["ncnn"])
    verdict = next(v for v in report.verdicts if v.engine == "ncnn")
    assert verdict.verdict == "fails" and verdict.decided_by == "real session"
    flagged = {f.node for f in report.findings if f.code == "NCNN-UNSUPPORTED" and f.op_type == "Gather"}
    gathers = {n.name for n in onnx.load(str(TRANSFORMER)).graph.node if n.op_type == "Gather"}
    assert flagged and flagged <= gathers
    runs = check_model(load_model(MOBILENET), ["ncnn"])
    assert next(v for v in runs.verdicts if v.engine == "ncnn").verdict == "runs"


def test_engine_table_drives_cli_choices_and_api_engines(ncnn_here, capsys):
    from studio import api
    from studio.cli import main
    from studio.core.engines.table import ENGINES

    rows = {r["name"]: r for r in api.engines()}
    assert list(rows) == [r.name for r in ENGINES]
    assert rows["ncnn"]["kind"] == "converted" and rows["ncnn"]["precisions"] == ["f32", "f16"]
    assert rows["ncnn"]["suffix"] == ".ncnn.param" and rows["ncnn"]["label"] == "ncnn"
    assert main(["check", str(MOBILENET), "--engines", "ncnn", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engines"] == ["ncnn"] and out["verdicts"][0]["verdict"] == "runs"
    # compare's --engine-b choices come from the table too; the run goes through the converted-engine path
    assert main(["compare", str(MOBILENET), str(MOBILENET), "--engine", "ort", "--engine-b", "ncnn", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["candidate"]["engine"] == "ncnn" and cmp["comparison"]["ok"] is True
    assert cmp["candidate"]["precision"].startswith("f32 weights, converted")
    assert cmp["comparison"]["outputs"]["logits"]["max_abs"] < 1e-4


def test_layerwise_first_divergence_runs_on_ncnn(ncnn_here):
    """Layer-wise comparison reaches ncnn through the table (a converted row that fuses ops): every
    marked tensor of the chunk model is converted by pnnx and read back by its ONNX name."""
    from studio import api

    res = api.compare(MOBILENET, MOBILENET, engine="ort", engine_b="ncnn", layerwise=True)
    lw = res.layerwise
    assert lw is not None and lw.first_divergence is None
    assert lw.compared >= 20          # mobilenet_like: 26 tensors compared, none without a counterpart


def test_ncnn_export_bundle_reloads_in_plain_ncnn(ncnn_here, tmp_path, capsys):
    """The ncnn export target: a verified .param/.bin bundle (+ the blob map) that plain ncnn, driven
    only by the files, runs to plain onnxruntime's numbers."""
    import ncnn

    from studio.cli import main

    model = tmp_path / "user" / "m.onnx"
    model.parent.mkdir()
    shutil.copy(MOBILENET, model)
    assert main(["export", str(model), "--target", "ncnn", "--out", str(tmp_path / "out"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    target = next(t for t in res["targets"] if t["target"] == "ncnn")
    art = target["artifacts"][0]
    assert target["status"] == "passed" and art["verification"]["status"] == "passed"
    assert art["path"] == "ncnn/model.ncnn.param"
    assert art["companions"] == ["ncnn/model.ncnn.bin", "ncnn/model.ncnn.json"]
    folder = next((tmp_path / "out").glob("m-*/ncnn"))
    assert "ncnn.Net" in (folder / "README.md").read_text()
    io = json.loads((folder / "model.ncnn.json").read_text())
    (name, blob, batch), = io["inputs"]
    (out_name, out_blob, out_batch), = io["outputs"]
    assert (name, out_name, batch, out_batch) == ("input", "logits", 0, 0)
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    net = ncnn.Net()
    net.opt.use_fp16_storage = net.opt.use_fp16_packed = net.opt.use_fp16_arithmetic = False
    assert net.load_param(str(folder / "model.ncnn.param")) == 0 and net.load_model(str(folder / "model.ncnn.bin")) == 0
    with net.create_extractor() as ex:
        ex.input(blob, ncnn.Mat(x, batch_index=batch).clone())
        _, mat = ex.extract(out_blob)
        got = np.array(mat.numpy(batch_index=out_batch), copy=True)
    np.testing.assert_allclose(got.reshape(1, 10), _plain_ort(MOBILENET, {"input": x})["logits"], atol=1e-4)
    assert sorted(p.name for p in model.parent.iterdir()) == ["m.onnx"]


@pytest.mark.slow
def test_precision_runs_ncnn_fp32_and_fp16_against_ort_fp32(ncnn_here, capsys):
    """precision's variants for ncnn come from its row (f32, f16): both judged against ORT's fp32; fp16
    storage moves the numbers a little, fp32 does not (pinned)."""
    from studio.cli import main

    assert main(["precision", str(MOBILENET), "--variants", "fp32,fp32-ncnn,fp16-ncnn", "--budget", "0.5",
                 "--json"]) in (0, 1)
    rows = {v["name"]: v for v in json.loads(capsys.readouterr().out)["variants"]}
    assert rows["fp32-ncnn"]["engine"] == rows["fp16-ncnn"]["engine"] == "ncnn"
    assert rows["fp32-ncnn"]["status"] == rows["fp16-ncnn"]["status"] == "ok"
    assert rows["fp32-ncnn"]["max_abs"] < 1e-4 < rows["fp16-ncnn"]["max_abs"] < 5e-2
    assert rows["fp16-ncnn"]["cosine"] > 0.999


def test_ncnn_real_model_without_a_batch_axis(ncnn_here):
    """oww_alexa (openWakeWord, real corpus): pnnx marks no batch axis (batch_index=233) on its [1, 16, 96]
    input; the blob map must still carry the output (the first parser missed it: 'unknown output name 13')
    and the values must be plain onnxruntime's."""
    from studio.core.engines import get_engine
    from tests.corpus import corpus_model

    path = corpus_model("oww_alexa")
    feeds = {"onnx::Flatten_0": np.random.default_rng(4).random((1, 16, 96)).astype(np.float32)}
    got = get_engine("ncnn").run(path, feeds).outputs["13"]
    want = _plain_ort(path, feeds)["13"]
    assert got.shape == want.shape == (1, 1)
    np.testing.assert_allclose(got, want, atol=1e-5)
