"""The compatibility fix passes: op list after, checker, idempotence, must-not-apply cases."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import helper, numpy_helper

from passes.registry import make_pass
from tests.conftest import SAMPLES


def _run(name, model_proto):
    model = ir.serde.deserialize_model(model_proto)
    res = make_pass(name)(model)
    again = make_pass(name)(res.model)
    out = ir.serde.serialize_model(res.model)
    onnx.checker.check_model(out, full_check=True)
    return res, again, out


def _ops(model):
    return [(n.domain, n.op_type) for n in model.graph.node]


def test_legalize_grid_sampler_sample():
    res, again, out = _run("legalize-grid-sampler", onnx.load(str(SAMPLES / "mmdeploy_grid_sampler.onnx")))
    assert res.modified and not again.modified
    assert _ops(out) == [("", "Conv"), ("", "Relu"), ("", "GridSample")]
    gs = out.graph.node[-1]
    attrs = {a.name: helper.get_attribute_value(a) for a in gs.attribute}
    assert attrs == {"mode": b"bilinear", "padding_mode": b"zeros", "align_corners": 0}
    assert "mmdeploy" not in {o.domain for o in out.opset_import}


def test_legalize_raises_old_opset_and_maps_enums():
    node = helper.make_node("grid_sampler", ["x", "g"], ["y"], domain="mmdeploy", interpolation_mode=1,
                            padding_mode=2, align_corners=1)
    relu = helper.make_node("Relu", ["y"], ["z"])
    graph = helper.make_graph([node, relu], "g", [helper.make_tensor_value_info("x", 1, [1, 1, 4, 4]),
                                                 helper.make_tensor_value_info("g", 1, [1, 2, 2, 2])],
                              [helper.make_tensor_value_info("z", 1, [1, 1, 2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("mmdeploy", 1)])
    model.ir_version = 7
    res, _, out = _run("legalize-grid-sampler", model)
    assert next(o.version for o in out.opset_import if o.domain == "") >= 16
    attrs = {a.name: helper.get_attribute_value(a) for a in out.graph.node[0].attribute}
    assert attrs["mode"] == b"nearest" and attrs["padding_mode"] == b"reflection" and attrs["align_corners"] == 1
    assert any("opset 11 -> 16" in c.detail for c in res.changes)


def test_gridsample_standard_and_contrib_round_trip_numerically():
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32),
             "grid": np.random.default_rng(1).uniform(-1, 1, (1, 8, 8, 2)).astype(np.float32)}
    src = onnx.load(str(SAMPLES / "com_microsoft_gridsample.onnx"))
    ref = ort.InferenceSession(src.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    res, again, std = _run("gridsample-to-standard", src)
    assert res.modified and not again.modified and ("", "GridSample") in _ops(std)
    assert "com.microsoft" not in {o.domain for o in std.opset_import}
    res2, again2, back = _run("gridsample-to-contrib", std)
    assert res2.modified and not again2.modified and ("com.microsoft", "GridSample") in _ops(back)
    for m in (std, back):
        got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        np.testing.assert_allclose(got, ref, atol=1e-6)


def test_passes_do_not_apply_where_they_should_not():
    five_d = onnx.load(str(SAMPLES / "gridsample_5d.onnx"))
    for name in ("gridsample-to-contrib", "legalize-grid-sampler", "gridsample-to-standard",
                 "remove-initializers-from-inputs"):
        res = make_pass(name)(ir.serde.deserialize_model(five_d))
        assert not res.modified, name


def test_remove_initializers_from_inputs():
    w = numpy_helper.from_array(np.ones((2,), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 1, [2]), helper.make_tensor_value_info("w", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])], initializer=[w])
    res, again, out = _run("remove-initializers-from-inputs", helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert res.modified and not again.modified
    assert [i.name for i in out.graph.input] == ["x"] and [t.name for t in out.graph.initializer] == ["w"]
