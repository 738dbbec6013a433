"""The model's dims setting (Overview page, or ``--dim`` with ``--project`` on the CLI) is what every
page and command uses: Compatibility/check, the diff view, Verify and Export. The model says its
size is 1280 (metadata ``imgsz``); its dims are set to 640; each asserts the shape the engine ran."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio import api
from tests.conftest import current_model, save

AT_640 = {"height": 640, "width": 640}


def _model(scale: float = 1.0) -> onnx.ModelProto:
    """Conv (k3, stride 2) + global pool on a free-size image; the exporter wrote imgsz 1280."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32) * scale,
                                "w")
    g = helper.make_graph([helper.make_node("Conv", ["images", "w"], ["c"], strides=[2, 2], name="conv"),
                           helper.make_node("GlobalAveragePool", ["c"], ["out"], name="pool")], "g",
                          [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, "height", "width"])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 1, 1])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.metadata_props.add(key="imgsz", value="[1280, 1280]")
    return m


@pytest.fixture
def model_path(tmp_path) -> Path:
    return save(_model(), tmp_path / "big.onnx")


def test_without_a_setting_the_model_runs_at_its_own_size(model_path):
    """The baseline the other tests differ from: 1280 is what the model says."""
    report = api.check(api.load(model_path), ["onnxruntime"])
    (v,) = report.verdicts
    assert v.ran_on["inputs"] == {"images": "float32[1, 3, 1280, 1280]"}


def test_cli_dims_set_once_are_used_by_check_and_export(model_path, tmp_path, capsys):
    from studio.cli import main

    assert main(["inspect", str(model_path), "--project", "p", "--dim", "height=640", "--dim", "width=640"]) == 0
    project = api.open_project("p")
    (m,) = api.project_models(project)
    assert api.get_settings(project, m.id)["dims"] == AT_640          # stored as the model's setting
    capsys.readouterr()
    assert main(["check", str(model_path), "--project", "p", "--engines", "ort", "--json"]) == 0
    out = capsys.readouterr()
    (v,) = json.loads(out.out)["verdicts"]
    assert v["ran_on"]["inputs"] == {"images": "float32[1, 3, 640, 640]"}
    assert "from the project: height=640, width=640" in out.err
    assert main(["export", str(model_path), "--project", "p", "--target", "ort", "-o", str(tmp_path / "out"),
                 "--no-zip", "--json"]) == 0
    manifest = json.loads(next((tmp_path / "out").glob("*/manifest.json")).read_text())
    assert manifest["verification"]["input_shapes"] == {"images": [1, 3, 640, 640]}
    assert manifest["options"]["dims"] == AT_640


def test_export_api_verifies_and_profiles_at_the_dims(model_path, tmp_path):
    result = api.export(api.load(model_path), ["tensorrt"], tmp_path / "out", zip=False, dims=AT_640)
    assert result.manifest["verification"]["input_shapes"] == {"images": [1, 3, 640, 640]}
    trt = json.dumps(result.manifest["targets"]["tensorrt"])
    assert "1x3x320x320:1x3x640x640:1x3x1280x1280" in trt              # the profile's opt is 640, not 1280


def _open(app, path: Path):
    """The model opened, its dims set to 640 in the Overview page's boxes (they start at the model's 1280)."""
    at = app(str(path)).run()
    boxes = {n.key: n for n in at.number_input if n.key and n.key.startswith("dim_")}
    assert boxes["dim_0_height"].value == 1280 and boxes["dim_1_width"].value == 1280
    boxes["dim_0_height"].set_value(640)
    at = boxes["dim_1_width"].set_value(640).run()
    assert not at.exception, at.exception
    assert at.session_state["onnx_studio_dims"] == AT_640
    return at


def test_compatibility_page_checks_at_the_dims(app, model_path):
    at = _open(app, model_path)
    at.session_state["compat_engines"] = ["onnxruntime", "openvino"]     # not the converters' minute of start-up
    at.switch_page("views/compatibility.py").run()
    assert not at.exception, at.exception
    ran = [c.value for c in at.caption if c.value.startswith("ran on")]
    assert ran and all("640, 640" in r and "1280" not in r for r in ran), ran
    assert any("--dim height=640 --dim width=640" in c.value for c in at.code)


def test_verify_page_compares_at_the_dims(app, model_path):
    at = _open(app, model_path)
    at.switch_page("views/verify.py").run()
    at.selectbox(key="verify_engine_b").set_value("onnxruntime").run()
    at.button(key="verify_run").click().run()
    assert not at.exception, at.exception
    shown = " ".join(c.value for c in at.caption).replace("\\", "")
    assert "inputs: random" in shown and "height=640, width=640" in shown


def test_export_page_verifies_at_the_dims(app, model_path):
    at = _open(app, model_path)
    at.switch_page("views/export.py").run()
    at.multiselect(key="exp_targets").set_value(["onnxruntime"]).run()
    assert any("--dim height=640 --dim width=640" in c.value for c in at.code)
    at.button(key="exp_run").click().run()
    assert not at.exception, at.exception
    result = at.session_state["onnx_studio_results"]["onnx_studio_export_result"][1]["result"]
    assert result.manifest["verification"]["input_shapes"] == {"images": [1, 3, 640, 640]}


def test_diff_view_labels_edges_at_the_dims(app, model_path):
    from tests.ui.test_graph_page import _graph, _viewer_data

    at = _open(app, model_path)
    ws = current_model(at)
    v1 = ws.add_model(_model(scale=2.0), "rescaled", parent="v0")
    at.session_state["onnx_studio_version"] = v1.id
    at = _graph(at.run(), "Diff")
    shapes = {e[3] for e in _viewer_data(at)["scene"]["edges"] if e[3]}
    assert "1×4×319×319" in shapes                       # (640 - 3) // 2 + 1
    assert not any("height" in s for s in shapes), shapes
    # the same through the facade, and the symbolic labels without the setting
    d = api.diff_versions(ws, "v0", v1.id, dims=AT_640)
    assert ("1×4×319×319" in json.dumps(api.diff_viewer_html(d), ensure_ascii=False))
