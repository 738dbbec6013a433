"""Structures found in real third-party models (PP-OCR from paddle2onnx, scikit-learn
from skl2onnx, Silero VAD...), rebuilt in code: each test is the smallest graph that
made the studio fail on the real model."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from passes.pipeline import resolve_passes, run_passes
from studio import api
from studio.accuracy.runs import explain_engine_error
from studio.core.errors import StudioError, engine_message
from studio.core.feeds import input_specs, random_feeds, unnamed_dim_key
from studio.core.types import value_info
from studio.export.tensorrt import table_unsupported_ops
from tests.conftest import sha256_file, assert_user_message, parse_model, save


def _minus_one_batch_model() -> onnx.ModelProto:
    """paddle2onnx writes ``dim_value: -1`` for the batch dim (PP-OCR cls/rec models)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, "?", "?"])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t"]), helper.make_node("Identity", ["t"], ["u"]),
                           helper.make_node("Relu", ["u"], ["y"])],
                          "paddle", [x], [y], [one])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_minus_one_dim_value_is_an_unknown_dim():
    m = _minus_one_batch_model()
    # '?' is a placeholder, not one symbol tying height to width (each axis its own unknown dim)
    assert value_info(m.graph.input[0]).shape == (None, 3, None, None)
    feeds = random_feeds(input_specs(m))
    assert feeds["x"].shape[0] == 1 and feeds["x"].shape[1] == 3


def test_minus_one_dim_model_optimizes_and_verifies(tmp_path):
    src = save(_minus_one_batch_model(), tmp_path / "cls.onnx")
    res = run_passes(src, resolve_passes("safe"), tmp_path / "out.onnx")
    assert res.ok, [r.message for r in res.records]
    assert res.reference.startswith("ONNX Runtime"), res.reference


def _zipmap_model() -> onnx.ModelProto:
    """skl2onnx's default classifier output: probabilities through ZipMap, a sequence of maps."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])
    label = helper.make_tensor_value_info("label", TensorProto.INT64, [None])
    probs = helper.make_value_info("output_probability", helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))
    nodes = [helper.make_node("Softmax", ["X"], ["p"], axis=1),
             helper.make_node("Identity", ["p"], ["p2"]),
             helper.make_node("ArgMax", ["p2"], ["label"], axis=1, keepdims=0),
             helper.make_node("ZipMap", ["p2"], ["output_probability"], domain="ai.onnx.ml",
                              classlabels_int64s=[0, 1, 2])]
    g = helper.make_graph(nodes, "zipmap", [x], [label, probs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
                             ir_version=8)


def test_zipmap_model_optimizes_and_keeps_its_map_outputs(tmp_path):
    """skl2onnx's most common output, seq(map(int64, float)), goes through the safe preset (R40):
    passes leave the map part alone and verification compares it."""
    src = save(_zipmap_model(), tmp_path / "rf.onnx")
    before = sha256_file(src)
    out = tmp_path / "out" / "rf.onnx"
    result = run_passes(src, resolve_passes("safe"), out)
    assert result.ok, result.summary()
    got = onnx.load(out)
    assert got.graph.output[1].type.WhichOneof("value") == "sequence_type"
    assert sha256_file(src) == before


# Silero VAD: ``input [?, ?]`` (unnamed dims), a sample rate compared with 16000 to choose an If
# branch, and a reflect Pad that needs a real window (512 samples): random feeds of 16 samples
# and a random sample rate make ONNX Runtime fail, and the user could not set the unnamed dim.
SILERO_LIKE = '''<ir_version: 8, opset_import: ["" : 17]>
g (float[?, ?] input, int64 sr) => (float[?, ?] y) <int64 rate = {16000}, int64[4] pads = {0, 32, 0, 32}> {
  is16k = Equal(sr, rate)
  y = If(is16k) <
    then_branch = t () => (float[?, ?] a) { a = Pad <mode = "reflect"> (input, pads) },
    else_branch = e () => (float[?, ?] b) { b = Identity(input) }
  >
}'''


def test_integer_input_compared_with_a_constant_gets_that_value():
    specs = {s.name: s for s in input_specs(parse_model(SILERO_LIKE))}
    assert specs["sr"].role == "compared"
    assert int(random_feeds(tuple(specs.values()))["sr"]) == 16000


def test_unnamed_dims_are_set_by_input_and_axis():
    specs = input_specs(parse_model(SILERO_LIKE))
    assert random_feeds(specs)["input"].shape == (1, 16)
    assert random_feeds(specs, {unnamed_dim_key("input", 1): 512})["input"].shape == (1, 512)


def test_check_finds_a_real_window_and_names_the_inputs_that_ran(tmp_path):
    """R39: the seeded 16 samples are too short for the reflect Pad; the input search runs the
    model at 512 and says so. A size the user fixes is kept; when nothing runs at it, the verdict
    is "not run" with the seeded inputs and how to change them, never "fails"."""
    handle = api.load(save(parse_model(SILERO_LIKE), tmp_path / "vad.onnx"))
    report = api.check(handle, ["onnxruntime"])
    verdict = report.verdict("onnxruntime")
    assert verdict.verdict == "runs" and verdict.ran_on["inputs"] == {"input": "float32[1, 512]", "sr": "int64=16000"}
    seeded = next(f for f in report.findings if f.code == "SEEDED-SIZE")
    assert "input float32[1, 16]" in seeded.message and "input float32[1, 512]" in seeded.message
    fixed = api.check(handle, ["onnxruntime"], dims={"input[1]": 512})
    assert not [f for f in fixed.findings if f.severity == "error"], fixed.findings
    assert fixed.verdict("onnxruntime").ran_on["tries"] == 1
    short = api.check(handle, ["onnxruntime"], dims={"input[1]": 8})
    assert short.verdict("onnxruntime").verdict == "not run"
    needs = next(f for f in short.findings if f.code == "NEEDS-INPUTS")
    assert "input float32[1, 8]" in needs.message and "sr int64=16000" in needs.message
    assert "INPUT[AXIS]=VALUE" in needs.fix_hint


def test_optimize_verifies_on_the_inputs_the_search_found(tmp_path):
    src = save(parse_model(SILERO_LIKE.replace("b = Identity(input)", "c = Identity(input)\n b = Identity(c)")),
               tmp_path / "vad.onnx")
    res = run_passes(src, resolve_passes("safe"), tmp_path / "out.onnx")
    assert res.reference.startswith("ONNX Runtime") and "searched inputs (input float32[1, 512]" in res.reference
    res = run_passes(src, resolve_passes("safe"), tmp_path / "out2.onnx", dims={"input[1]": 512})
    assert res.reference.startswith("ONNX Runtime") and "searched" not in res.reference, res.reference


# OpenVINO's messages lead with C++ source locations; the reason comes on later lines.
OV_RUN_ERROR = ("Exception from src/inference/src/cpp/infer_request.cpp:224:\n"
                "Exception from src/plugins/intel_cpu/src/node.cpp:794:\n"
                "[CPU] AvgPool node with name 'p2o.AveragePool.0' Check 'cmp::le(kernel, dim.get_length())' failed at "
                "src/core/shape_inference/include/pooling_shape_inference_util.hpp:149:\n")
OV_NO_RULE = ("Check 'false' failed at src/frontends/common_translators/src/unconverted_ops_report.cpp:151:\n"
              "FrontEnd API failed with OpConversionFailure:\nModel wasn't fully converted.\nSummary:\n"
              "-- No conversion rule found for operations: ai.onnx.ml.TreeEnsembleRegressor\n")
OV_ZIPMAP = ("Check 'false' failed at src/frontends/common/src/frontend.cpp:47:\nLoading input model\n"
             "Unsupported value_info type: output_probability\n")


def test_engine_message_keeps_the_reason_not_the_source_location():
    assert engine_message(OV_RUN_ERROR).startswith("[CPU] AvgPool node with name 'p2o.AveragePool.0'")
    assert "No conversion rule found for operations: ai.onnx.ml.TreeEnsembleRegressor" in engine_message(OV_NO_RULE)
    assert engine_message("InvalidArgument: bad input\nsecond line") == "InvalidArgument: bad input"


def test_openvino_unknown_op_keeps_its_domain_and_zipmap_is_explained():
    msg = explain_engine_error(engine_message(OV_NO_RULE), "OpenVINO", "gbr.onnx")
    assert "ai.onnx.ml.TreeEnsembleRegressor not supported by OpenVINO" in msg
    msg = explain_engine_error(engine_message(OV_ZIPMAP), "OpenVINO", "rf.onnx")
    assert "'output_probability' is not a tensor" in msg


# A scikit-learn regressor (skl2onnx: TreeEnsembleRegressor, ai.onnx.ml) runs on ONNX Runtime,
# so the TensorRT target's ONNX verified there, and was labelled "TensorRT-ready" although
# TensorRT's parser has no ai.onnx.ml importer at all.
TREES = '''<ir_version: 8, opset_import: ["" : 17, "ai.onnx.ml" : 3]>
g (float[N, 2] X) => (float[N, 1] variable) {
  variable = ai.onnx.ml.TreeEnsembleRegressor <n_targets = 1, nodes_featureids = [0, 0, 0],
      nodes_modes = ["BRANCH_LEQ", "LEAF", "LEAF"], nodes_nodeids = [0, 1, 2], nodes_treeids = [0, 0, 0],
      nodes_truenodeids = [1, 0, 0], nodes_falsenodeids = [2, 0, 0], nodes_values = [0.5, 0.0, 0.0],
      target_ids = [0, 0], target_nodeids = [1, 2], target_treeids = [0, 0], target_weights = [1.0, 2.0]> (X)
}'''


def test_tensorrt_export_warns_about_ops_its_parser_cannot_import(tmp_path):
    src = save(parse_model(TREES), tmp_path / "gbr.onnx")
    assert table_unsupported_ops(src) == ["ai.onnx.ml::TreeEnsembleRegressor"]
    r = api.export(api.load(src), "tensorrt", tmp_path / "out", zip=False)
    t = r.target("tensorrt")
    assert "cannot import" in t.message and "TreeEnsembleRegressor" in t.message
    assert not any("TensorRT-ready" in a.label for a in t.artifacts)
