"""Triton model repository: config.pbtxt parsed with Triton's own ModelConfig schema
(tritonclient.grpc.model_config_pb2 via text_format.Parse) and its fields checked
against the model; batching only when every input and output shares a leading
dynamic dim; scalars; dtypes; the TensorRT config follows the profile."""

from __future__ import annotations

import onnx
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as pb

from studio import api
from studio.core.errors import StudioError
from studio.core.types import TensorInfo
from studio.export.triton import io_plan, triton_dtype
from tests.conftest import SAMPLES
from tests.export.conftest import conv_model


def _config(path) -> pb.ModelConfig:
    return text_format.Parse(path.read_text(), pb.ModelConfig())


def test_configs_parse_with_tritons_schema_and_match_the_model(cnn_export):
    repo = cnn_export.bundle / "triton" / "model_repository"
    assert sorted(p.name for p in repo.iterdir()) == ["cnn_unfused_onnxruntime", "cnn_unfused_openvino",
                                                     "cnn_unfused_tensorrt"]
    model = onnx.load(SAMPLES / "cnn_unfused.onnx", load_external_data=False)
    want_in = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim][1:]) for i in model.graph.input]
    want_out = [(o.name, [d.dim_value for d in o.type.tensor_type.shape.dim][1:]) for o in model.graph.output]
    for backend, platform, kind, files in (
            ("onnxruntime", "onnxruntime_onnx", pb.ModelInstanceGroup.KIND_CPU, ["model.onnx"]),
            ("openvino", "", pb.ModelInstanceGroup.KIND_CPU, ["model.bin", "model.xml"]),
            ("tensorrt", "tensorrt_plan", pb.ModelInstanceGroup.KIND_GPU, [])):
        folder = repo / f"cnn_unfused_{backend}"
        cfg = _config(folder / "config.pbtxt")
        assert cfg.name == folder.name and cfg.backend == backend and cfg.platform == platform
        assert cfg.max_batch_size == 8                           # the leading 'batch' dim of input and output
        assert [(i.name, list(i.dims)) for i in cfg.input] == want_in
        assert [(o.name, list(o.dims)) for o in cfg.output] == want_out
        assert all(i.data_type == pb.TYPE_FP32 for i in [*cfg.input, *cfg.output])
        assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
        assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
        assert [(g.kind, g.count) for g in cfg.instance_group] == [(kind, 1)]
        if files:
            assert sorted(p.name for p in (folder / "1").iterdir()) == files
    # No plan here: the version folder is absent and a note says how to build it.
    trt = repo / "cnn_unfused_tensorrt"
    assert not (trt / "1").exists() and "build_engine.py --plan 1/model.plan" in (trt / "README.md").read_text()
    arts = {a.path: a for a in cnn_export.target("triton").artifacts}
    assert arts["triton/model_repository/cnn_unfused_onnxruntime/1/model.onnx"].verification.ok
    assert arts["triton/model_repository/cnn_unfused_openvino/1/model.xml"].verification.ok
    assert arts["triton/model_repository/cnn_unfused_tensorrt/README.md"].verification.status == "not verified"


def test_no_shared_batch_dim_means_max_batch_size_zero(tmp_path):
    # Output has no batch dim (a reduction): Triton cannot batch it.
    g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    path = tmp_path / "m" / "reduce.onnx"
    path.parent.mkdir()
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    r = api.export(api.load(path), "triton", tmp_path / "out", zip=False)
    cfg = _config(r.bundle / "triton" / "model_repository" / "reduce_onnxruntime" / "config.pbtxt")
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    assert list(cfg.input[0].dims) == [-1, 4]
    # A scalar output: dims [1] with an empty reshape (Triton needs rank >= 1).
    assert list(cfg.output[0].dims) == [1] and cfg.output[0].HasField("reshape") and not cfg.output[0].reshape.shape
    assert r.target("triton").artifacts[1].verification.ok


def test_io_plan_and_dtypes():
    plan = io_plan([TensorInfo("ids", "int64", ("b", "s")), TensorInfo("mask", "bool", ("b", "s"))],
                   [TensorInfo("y", "float16", ("b", "s", 8))], max_batch=16)
    assert plan.max_batch_size == 16
    assert [(s.name, s.dtype, s.dims) for s in plan.inputs] == [("ids", "TYPE_INT64", (-1,)),
                                                                ("mask", "TYPE_BOOL", (-1,))]
    assert plan.outputs[0].dtype == "TYPE_FP16" and plan.outputs[0].dims == (-1, 8)
    fixed = io_plan([TensorInfo("x", "float32", ("b", 3))], [TensorInfo("y", "float32", ("b",))], 8,
                    fixed={"x": (2, 3)})
    assert fixed.max_batch_size == 0 and fixed.inputs[0].dims == (2, 3)
    capped = io_plan([TensorInfo("x", "float32", ("b", 3))], [TensorInfo("y", "float32", ("b",))], 8, batch_limit=4)
    assert capped.max_batch_size == 4
    with pytest.raises(StudioError, match="no type"):
        triton_dtype(TensorInfo("z", "complex64", (1,)))


def test_tensorrt_config_follows_the_profile(tmp_path):
    model = conv_model(tmp_path / "m" / "convnet.onnx")
    r = api.export(api.load(model), ["tensorrt", "triton"], tmp_path / "out", shapes=["x=1x3x16x16:2x3x16x16:4x3x16x16"],
                   zip=False)
    repo = r.bundle / "triton" / "model_repository"
    trt = _config(repo / "convnet_tensorrt" / "config.pbtxt")
    assert trt.max_batch_size == 4 and list(trt.dynamic_batching.preferred_batch_size) == [2, 4]
    ort = _config(repo / "convnet_onnxruntime" / "config.pbtxt")
    assert ort.max_batch_size == 8


def test_model_name_is_sanitized(tmp_path):
    model = conv_model(tmp_path / "m" / "convnet.onnx")
    r = api.export(api.load(model), "triton", tmp_path / "out", name="../../my model\x00", zip=False)
    repo = r.bundle / "triton" / "model_repository"
    assert sorted(p.name for p in repo.iterdir()) == ["my_model_onnxruntime", "my_model_openvino",
                                                     "my_model_tensorrt"]
    assert r.bundle.parent == (tmp_path / "out").resolve() and r.bundle.name.startswith("my_model-")


def test_non_tensor_outputs_are_refused_clearly(tmp_path, capsys):
    """A classifier with a ZipMap output (seq(map)): ONNX Runtime exports it; TensorRT and Triton
    say in one line why they cannot, and no traceback reaches the user."""
    from studio.cli import main

    seq = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["p"]),
                           helper.make_node("ZipMap", ["p"], ["probs"], domain="ai.onnx.ml", classlabels_int64s=[0, 1])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
                          [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["N", 2]),
                           helper.make_value_info("probs", seq)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
                          ir_version=8)
    path = tmp_path / "m" / "zipmap.onnx"
    path.parent.mkdir()
    onnx.save(m, path)
    assert main(["export", str(path), "-o", str(tmp_path / "out"), "--no-zip"]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    assert "onnxruntime  ok" in out
    assert "refused for TensorRT: 'probs' is a seq(map(int64,float32))" in out
    assert "error: triton: onnxruntime: 'probs' has dtype seq(map(int64,float32)), which Triton has no type for" in err
