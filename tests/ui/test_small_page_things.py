"""Small things a user met on the pages (issue 23), each checked where the user saw it: the Optimize
header follows the version it just saved; shared mode's start screen offers no path; Compatibility
checks, fixes and Precision runs are jobs of the project, and a failed fix leaves no artifact; a
constant input shows its value (TopK's K = 300), not ``in1 (1)``."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio import api
from studio.core.errors import StudioError
from tests.conftest import SAMPLES, current_model, save


def _captions(at) -> list[str]:
    return [c.value for c in at.caption]


def test_optimize_header_names_the_version_it_saved(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/optimize.py").run()
    assert any(c.startswith("Version v0 ") for c in _captions(at))
    at.button(key="opt_run").click().run()
    assert not at.exception
    assert any("Saved as version v1 (now selected)" in i.value for i in at.info)
    header = [c for c in _captions(at) if c.startswith("Version ")]
    assert header and header[0].startswith("Version v1 "), header        # not "Version v0" beside "Saved as v1"
    assert at.session_state["onnx_studio_version"] == "v1"


@pytest.mark.parametrize("shared", ["1", "0"])
def test_the_start_screen_offers_a_path_only_where_there_is_one(app, shared):
    at = app(ONNX_STUDIO_SHARED=shared).run()
    assert not at.exception
    start = " ".join(i.value for i in at.info)
    assert "Upload an ONNX model" in start
    assert ("give a path" in start) == (shared == "0"), start


def _jobs(at) -> list:
    return api.project_jobs(at.session_state["onnx_studio_project"])


def test_compatibility_checks_and_fixes_are_jobs(app):
    at = app(str(SAMPLES / "mmdeploy_grid_sampler.onnx")).run()
    at.session_state["compat_engines"] = ["onnxruntime"]      # the jobs are tested, not the engines' columns
    at.switch_page("views/compatibility.py").run()
    assert not at.exception
    assert at.multiselect(key="compat_engines").value == ["onnxruntime"]
    [check] = [j for j in _jobs(at) if j.kind == "check"]
    assert check.state == "done" and "onnxruntime: fails" in check.message
    assert check.version_id == "v0"
    at = next(b for b in at.button if b.label == "Fix: legalize-grid-sampler").click().run()
    assert not at.exception
    [fix] = [j for j in _jobs(at) if j.kind == "fix"]
    assert fix.state == "done" and fix.message == "saved as v1" and fix.args["pass"] == "legalize-grid-sampler"
    assert [j.kind for j in _jobs(at)].count("check") == 2             # the fixed version was checked again
    assert not api.project_artifacts(at.session_state["onnx_studio_project"])   # a fix makes a version, no artifact


def test_a_failed_fix_is_not_an_artifact(tmp_path):
    p = api.create_project("fixes")
    model, v0 = api.add_model(p, SAMPLES / "cnn_unfused.onnx")
    with pytest.raises(StudioError) as exc:                  # nothing to legalize in this model
        api.apply_fix(model, v0.id, "legalize-grid-sampler")
    assert exc.value.code == "FIX-NOOP"
    assert api.project_artifacts(p) == []
    folders = list((p.root / "artifacts").iterdir()) if (p.root / "artifacts").is_dir() else []
    assert folders == []                                     # and no folder left for it
    assert [v.id for v in api.project_model(p, model.id).versions] == ["v0"]


@pytest.mark.slow
def test_a_precision_run_is_a_job(app):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/precision.py").run()
    at.multiselect(key="precision_variants").set_value(["fp32", "fp16"]).run()
    at.number_input(key="precision_budget").set_value(5).run()
    at.button(key="precision_run").click().run()
    assert not at.exception
    [job] = [j for j in _jobs(at) if j.kind == "precision"]
    assert job.state == "done" and job.args["variants"] == ["fp32", "fp16"]
    assert current_model(at).id == job.model_id


def test_a_constant_input_shows_its_value(tmp_path):
    k = numpy_helper.from_array(np.array([300], np.int64), "k")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    big = numpy_helper.from_array(np.zeros((4, 4), np.float32), "w")
    g = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, name="topk"),
                           helper.make_node("Reshape", ["v", "shape"], ["r"], name="reshape"),
                           helper.make_node("MatMul", ["x4", "w"], ["m"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1000]),
                           helper.make_tensor_value_info("x4", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("i", TensorProto.INT64, None),
                           helper.make_tensor_value_info("m", TensorProto.FLOAT, None)], [k, shape, big])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    handle = api.load(save(m, tmp_path / "topk.onnx"))
    scene, _stats = api.graph_scene(api.graph_index(handle, api.inspect(handle)))
    boxes = {leaf["full"]: leaf["w"] for leaf in scene["leaves"]}
    assert boxes["topk"] == ["K = 300"]                  # the value, read back with numpy as written above
    assert boxes["reshape"] == ["shape = 1,-1"]
    assert boxes["mm"] == ["B ⟨4×4⟩"]                    # a real weight keeps its shape


def test_node_details_flops_read_as_a_count(app, tmp_path):
    """A node's caption said '0FLOPs' (a Constant) and '544.33 KFLOPs' (the count glued to the unit, corpus
    oww_melspectrogram's Nodes page); it reads 'FLOPs 72', like 'FLOPs ?' when unknown. Oracle: a Conv of
    2 output channels over length 8 with kernel 3 makes 2 x 6 outputs of 3 multiply-adds, 2 FLOPs each = 72."""
    import onnx

    w = numpy_helper.from_array(np.ones((2, 1, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6])], [w])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    at = app(str(path)).run()
    at.switch_page("views/nodes.py").run()
    assert not at.exception, at.exception
    (caption,) = [c for c in _captions(at) if c.startswith("domain ")]
    assert caption.endswith("FLOPs 72"), caption
