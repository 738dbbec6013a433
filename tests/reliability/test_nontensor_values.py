"""R40: models whose values are not all tensors: sklearn-style classifiers with ZipMap's
``seq(map(int64, float))`` output, sequence inputs and outputs, optional types. inspect,
check, optimize and export handle them; passes that cannot leave them alone with the reason;
verification compares them element by element."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from studio.core.model_io import HIDDEN_TYPES_KEY
from studio import api
from studio.core.compare import compare_outputs
from tests.conftest import sha256_file
from tests.nontensor_models import optional_model, sequence_input_model, sequence_model, zipmap_classifier


def _save(tmp_path, name, model):
    path = tmp_path / "in" / f"{name}.onnx"
    path.parent.mkdir(exist_ok=True)
    onnx.save(model, path)
    return path


@pytest.fixture
def zipmap(tmp_path):
    return _save(tmp_path, "classifier", zipmap_classifier())


def test_inspect_names_the_non_tensor_output(zipmap):
    summary = api.inspect(api.load(zipmap))
    kinds = {o.name: (o.kind, o.dtype) for o in summary.outputs}
    assert kinds["output_probability"] == ("sequence", "seq(map(int64,float32))")


def test_optimize_a_zipmap_classifier(zipmap, tmp_path):
    before = sha256_file(zipmap)
    out = tmp_path / "out" / "classifier.onnx"
    result = api.optimize(api.load(zipmap), preset="safe", out_path=out)
    assert result.ok, result.summary()
    assert sha256_file(zipmap) == before
    saved = onnx.load(out)
    onnx.checker.check_model(saved, full_check=True)
    assert [n.op_type for n in saved.graph.node] == ["LinearClassifier", "ZipMap"]     # both Identities gone
    prob = next(o for o in saved.graph.output if o.name == "output_probability")
    assert prob.type == zipmap_classifier().graph.output[1].type                       # seq(map) declared again
    assert HIDDEN_TYPES_KEY not in {p.key for p in saved.metadata_props}
    changed = next(r for r in result.records if r.modified)
    modes = {k: d.mode for k, d in changed.verification.numeric.outputs.items()}
    assert any(k.startswith("output_probability[0][") and m.startswith("sequence element") for k, m in modes.items())
    assert modes["output_label"] == "exact"


@pytest.mark.parametrize("name", ["onnxsim", "fix-cast-types", "convert-fp16", "quantize-int8-dynamic"])
def test_passes_that_rewrite_protos_or_load_results_take_zipmap_models(zipmap, tmp_path, name):
    """These passes hand the model to a proto-reading tool (onnxsim, ONNX type inference, the
    quantizer) and read its result back: 'choosing a configuration failed: SerdeError' before."""
    options = {name: {"budget_s": 0.5}} if name in ("convert-fp16", "quantize-int8-dynamic") else {}   # latency unread
    result = api.optimize(api.load(zipmap), passes=[name], out_path=tmp_path / "out" / "m.onnx", pass_options=options)
    record = result.records[0]
    assert record.status in ("changed", "unchanged"), record.message
    onnx.checker.check_model(onnx.load(tmp_path / "out" / "m.onnx"), full_check=True)


def test_convert_fp16_leaves_a_sequence_output_model_alone_with_the_reason(tmp_path):
    src = _save(tmp_path, "seq", sequence_model())
    result = api.optimize(api.load(src), passes=["convert-fp16"], out_path=tmp_path / "out" / "m.onnx")
    record = result.records[0]
    assert result.ok and record.status == "unchanged"
    assert any("'seq' is a sequence output" in n for n in record.notes)


@pytest.mark.parametrize("build", [sequence_model, optional_model])
def test_optimize_sequence_and_optional_models(tmp_path, build):
    src = _save(tmp_path, build.__name__, build())
    result = api.optimize(api.load(src), preset="safe", out_path=tmp_path / "out" / "m.onnx")
    assert result.ok and result.modified, result.summary()
    onnx.checker.check_model(onnx.load(tmp_path / "out" / "m.onnx"), full_check=True)


def test_export_a_model_with_a_sequence_input_for_onnx_runtime(tmp_path):
    """The seeded sequence feed reaches the worker as a list (it arrived as a tensor before)."""
    src = _save(tmp_path, "seqin", sequence_input_model())
    result = api.export(api.load(src), "ort", tmp_path / "out", zip=False)
    assert result.ok, result.failures
    statuses = [a.verification.status for t in result.targets for a in t.artifacts if a.verification]
    assert statuses and set(statuses) == {"passed"}


def test_export_a_zipmap_classifier(zipmap, tmp_path):
    ort = api.export(api.load(zipmap), "ort", tmp_path / "ort", preset="safe", zip=False)
    assert ort.ok, ort.failures
    ov = api.export(api.load(zipmap), "openvino", tmp_path / "ov", zip=False)
    assert not ov.ok
    message = ov.targets[0].message
    assert "OpenVINO takes tensors only" in message and "output_probability" in message and "\n" not in message


def test_check_says_openvino_takes_tensors_only(zipmap):
    report = api.check(api.load(zipmap), engines=("openvino",))
    codes = {f.code for f in report.findings}
    assert "OV-NON-TENSOR" in codes
    assert report.verdict("openvino").verdict == "fails"
    assert api.check(api.load(zipmap), engines=("onnxruntime",)).verdict("onnxruntime").verdict.startswith("runs")


def test_sequences_of_maps_keys_equal_values_within_tolerance():
    ref = {"p": [{0: np.float32(0.25), 1: np.float32(0.75)}], "s": [np.ones(3, np.float32)]}
    near = {"p": [{0: np.float32(0.25 + 1e-7), 1: np.float32(0.75)}], "s": [np.ones(3, np.float32)]}
    assert compare_outputs(ref, near)
    assert not compare_outputs(ref, {"p": [{0: np.float32(0.25), 2: np.float32(0.75)}], "s": ref["s"]})
    assert not compare_outputs(ref, {"p": [{0: np.float32(0.35), 1: np.float32(0.65)}], "s": ref["s"]})
    assert not compare_outputs(ref, {"p": ref["p"], "s": [np.ones(3, np.float32), np.ones(3, np.float32)]})
    extra = compare_outputs({"s": [np.ones(2)]}, {"s": [np.ones(2), np.ones(2)]})
    assert not extra


def test_export_an_optional_model_for_onnx_runtime_says_why_there_is_no_ort_file(tmp_path):
    src = _save(tmp_path, "opt", optional_model())
    result = api.export(api.load(src), "ort", tmp_path / "out", zip=False)
    assert result.ok, result.failures
    notes = " ".join(result.targets[0].notes)
    assert "the ORT format has no optional types ('opt' is one)" in notes
