"""detect_custom_ops: custom domains, unknown standard-domain ops, local functions expanded."""

from __future__ import annotations

import onnx
from onnx import helper

from diagnostics.custom_ops import detect_custom_ops, lookup, trt_plugin_available
from tests.conftest import SAMPLES
from tests.diag import trap_models as hm


def test_mmdeploy_sample_is_known_with_its_fix():
    infos = detect_custom_ops(onnx.load(str(SAMPLES / "mmdeploy_grid_sampler.onnx")))
    assert [(i.domain, i.op_type, i.count, i.nodes) for i in infos] == [("mmdeploy", "grid_sampler", 1,
                                                                          ("/grid_sampler",))]
    known = infos[0].known
    assert known.fix_pass == "legalize-grid-sampler" and known.engines["openvino"] == "no"
    assert "GridSample" in known.standard_equivalent


def test_unknown_default_op_and_custom_domain():
    assert detect_custom_ops(hm.unknown_default_op())[0].reason == "unknown op in a standard domain"
    info = detect_custom_ops(hm.custom_domain_op())[0]
    assert (info.qualified, info.known) == ("acme.ops::MyOp", None)


def test_standard_ops_and_local_functions_are_not_custom():
    fn = helper.make_function("local", "Twice", ["x"], ["y"], [helper.make_node("Add", ["x", "x"], ["y"])],
                              [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Twice", ["a"], ["b"], domain="local"),
                               helper.make_node("Relu", ["b"], ["c"])], "g",
                              [helper.make_tensor_value_info("a", 1, [2])], [helper.make_tensor_value_info("c", 1, [2])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 17),
                                                                    helper.make_opsetid("local", 1)])
    assert detect_custom_ops(model) == []


def test_knowledge_base_lookups():
    assert lookup("com.microsoft", "GridSample").fix_pass == "gridsample-to-standard"
    assert lookup("com.microsoft", "FusedConv").engines["onnxruntime"] == "kernel"      # domain-wide entry
    assert lookup("", "EfficientNMS_TRT").engines["tensorrt"] == "plugin"
    assert lookup("org.pytorch.aten", "ATen").engines == {"onnxruntime": "no", "openvino": "no", "tensorrt": "no"}
    assert trt_plugin_available("TRT_Attention", 11) and not trt_plugin_available("TRT_Attention", 10)
    assert not trt_plugin_available("CustomGeluPluginDynamic", 11)
