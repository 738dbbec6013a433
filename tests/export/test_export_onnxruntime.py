"""ONNX Runtime target: the optimized model and the .ort load in ONNX Runtime with the
session options shipped beside them and give the original's outputs; levels are
labelled portable or hardware-specific; weights go external when asked or needed."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from studio import api
from tests.conftest import SAMPLES
from tests.export.conftest import conv_model


def _original_outputs(path, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _session(folder, profile):
    cfg = json.loads((folder / "session_options.json").read_text())["sessions"][profile]
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, cfg["graph_optimization_level"])
    for k, v in cfg["session_config_entries"].items():
        so.add_session_config_entry(k, v)
    return ort.InferenceSession(str(folder / cfg["file"]), so, providers=cfg["providers"])


def test_artifacts_run_with_their_session_options(cnn_export):
    folder = cnn_export.bundle / "onnxruntime"
    x = {"input": np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)}
    want = _original_outputs(SAMPLES / "cnn_unfused.onnx", x)[0]
    for profile in ("fast-start", "fast-inference", "ort-format"):
        got = _session(folder, profile).run(None, x)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    doc = json.loads((folder / "session_options.json").read_text())
    assert doc["optimized_at"] == "ORT_ENABLE_EXTENDED" and doc["portable"] is True and doc["default"] == "fast-start"
    assert doc["sessions"]["fast-start"]["graph_optimization_level"] == "ORT_DISABLE_ALL"
    assert doc["sessions"]["fast-inference"]["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert doc["sessions"]["ort-format"]["file"] == "model.ort"
    assert all(p["verified"] and p["measured_here"]["session_ms"] > 0 for p in doc["sessions"].values())
    model = onnx.load(folder / "model.onnx")
    domains = {n.domain for n in model.graph.node}
    assert "com.microsoft.nchwc" not in domains
    # extended level really optimized it: BatchNormalization folded into the convolutions
    assert not any(n.op_type == "BatchNormalization" for n in model.graph.node)


def test_level_all_is_labelled_hardware_specific(tmp_path):
    model = conv_model(tmp_path / "m" / "convnet.onnx")
    r = api.export(api.load(model), "ort", tmp_path / "out", ort_level="all", ort_format=False)
    art = r.target("onnxruntime").artifacts[0]
    assert art.portable is False and "hardware-specific" in art.label
    assert any("hardware-specific" in n and "not portable" in n for n in r.target("onnxruntime").notes)
    assert art.verification.ok                 # it still runs here, on the CPU it was made for
    domains = {n.domain for n in onnx.load(r.bundle / art.path).graph.node}
    assert "com.microsoft.nchwc" in domains
    assert json.loads((r.bundle / "onnxruntime" / "session_options.json").read_text())["portable"] is False


def test_external_data_when_asked_and_ort_maps_it(tmp_path):
    from studio.export.exporter import export_model
    from studio.export.options import ExportOptions

    model = conv_model(tmp_path / "m" / "convnet.onnx", channels=64)      # 6.9 KB conv weight: above ORT's 1 KB cut
    r = export_model(api.load(model), ExportOptions(targets=("ort",), external_data=True), tmp_path / "out")
    art = r.target("onnxruntime").artifacts[0]
    assert art.companions == ("onnxruntime/model.onnx.data",) and art.verification.ok
    proto = onnx.load(r.bundle / "onnxruntime" / "model.onnx", load_external_data=False)
    locations = {kv.value for t in proto.graph.initializer for kv in t.external_data if kv.key == "location"}
    assert locations == {"model.onnx.data"}
    assert any("memory-maps" in n for n in r.target("onnxruntime").notes)
    assert json.loads((r.bundle / "onnxruntime" / "session_options.json").read_text())["external_data"] == \
        "model.onnx.data"


def test_source_external_data_stays_loadable_elsewhere(tmp_path):
    """A model whose weights are external (small ones) must not point back at the source's data file."""
    r = api.export(api.load(SAMPLES / "external_data.onnx"), "ort", tmp_path / "out")
    assert r.ok, r.failures
    proto = onnx.load(r.bundle / "onnxruntime" / "model.onnx", load_external_data=False)
    locations = {kv.value for t in proto.graph.initializer for kv in t.external_data if kv.key == "location"}
    assert locations <= {"model.onnx.data"}


def test_custom_op_model_fails_clearly(tmp_path):
    r = api.export(api.load(SAMPLES / "mmdeploy_grid_sampler.onnx"), "ort", tmp_path / "out")
    assert not r.ok and r.exit_code == 1
    t = r.target("onnxruntime")
    assert t.status == "error" and "grid_sampler" in t.message and "\n" not in t.message
    assert (r.bundle / "report.md").read_text().index("## Failures") < (r.bundle / "report.md").read_text().index(
        "## Targets")


@pytest.mark.parametrize("level", ["basic", "extended"])
def test_portable_levels(tmp_path, level):
    model = conv_model(tmp_path / "m" / "convnet.onnx")
    r = api.export(api.load(model), "ort", tmp_path / "out", ort_level=level, ort_format=False)
    art = r.target("onnxruntime").artifacts[0]
    assert art.portable is True and art.verification.ok
    doc = json.loads((r.bundle / "onnxruntime" / "session_options.json").read_text())
    assert doc["optimized_at"] == {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED"}[level]
    assert "ort-format" not in doc["sessions"]


def test_level_all_on_an_old_ir_model_verifies_after_the_legacy_inputs_pass(tmp_path):
    """ORT_ENABLE_ALL on an IR-3 model (initializers listed as graph inputs) wrote layout initializers that
    are not graph inputs: an invalid model, caught by the reload. The export now runs
    remove-initializers-from-inputs first (IR 3 -> 4), so the artifact is valid (says so in a note)."""
    from tests.conftest import ONNX_DATA

    path = ONNX_DATA / "pytorch-converted" / "test_Conv2d" / "model.onnx"
    assert onnx.load(path, load_external_data=False).ir_version == 3
    ok = api.export(api.load(path), "ort", tmp_path / "a", zip=False)
    assert ok.ok, ok.failures
    done = api.export(api.load(path), "ort", tmp_path / "b", ort_level="all", zip=False)
    assert done.ok, done.failures
    artifact = onnx.load(done.bundle / "onnxruntime" / "model.onnx", load_external_data=False)
    assert artifact.ir_version >= 4
    assert any("remove-initializers-from-inputs" in n for n in done.manifest["deploy"]["notes"])


def _layernorm_opset12(path):
    """A decomposed LayerNorm at opset 12: ORT's extended level fuses it into LayerNormalization,
    which ONNX defines only from opset 17 (ORT loads it; onnx.checker and other tools do not)."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    nodes = [h.make_node("ReduceMean", ["x"], ["m"], axes=[-1]), h.make_node("Sub", ["x", "m"], ["d"]),
             h.make_node("Pow", ["d", "two"], ["p"]), h.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
             h.make_node("Add", ["v", "eps"], ["ve"]), h.make_node("Sqrt", ["ve"], ["s"]),
             h.make_node("Div", ["d", "s"], ["n"]), h.make_node("Mul", ["n", "g"], ["ng"]),
             h.make_node("Add", ["ng", "b"], ["y"])]
    inits = [nh.from_array(np.array(2, np.float32), "two"), nh.from_array(np.array(1e-5, np.float32), "eps"),
             nh.from_array(np.linspace(0.5, 1.5, 8, dtype=np.float32), "g"),
             nh.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "b")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 4, 8])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 12)])
    m.ir_version = 7
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, path)
    return path


def test_extended_level_falls_back_to_basic_when_ort_writes_invalid_onnx(tmp_path):
    r = api.export(api.load(_layernorm_opset12(tmp_path / "m" / "ln.onnx")), "ort", tmp_path / "out", zip=False,
                   ort_format=False)
    t = r.target("onnxruntime")
    assert r.ok and t.artifacts[0].verification.ok
    saved = onnx.load(r.bundle / "onnxruntime" / "model.onnx")
    onnx.checker.check_model(saved, full_check=True)
    assert "LayerNormalization" not in {n.op_type for n in saved.graph.node}
    assert any("level 'basic' instead" in n for n in t.notes)
    doc = json.loads((r.bundle / "onnxruntime" / "session_options.json").read_text())
    assert doc["optimized_at"] == "ORT_ENABLE_BASIC"


def test_image_model_made_for_small_inputs_is_verified_at_the_small_size(tmp_path):
    """x [N, 3, ?, ?] that only runs at 48x48 (a text recognizer's height): the export's reference
    retries at the small seeded size instead of failing every target."""
    from tests.diag.test_seeded_sizes import _needs_48

    (tmp_path / "m").mkdir()
    model = _needs_48(tmp_path / "m" / "rec.onnx")
    r = api.export(api.load(model), ["ort", "openvino"], tmp_path / "out",
                   zip=False, ort_format=False)
    assert r.ok, r.failures
    assert all(a.verification.ok for t in r.targets for a in t.artifacts if a.verification)
