"""Options: targets, --shapes specs, validation, and the equivalent CLI command."""

from __future__ import annotations

import pytest

from studio.core.errors import StudioError
from studio.core.requests import ExportRequest
from studio.export.options import ExportOptions, ShapeRange, parse_shape_spec, parse_shapes, resolve_targets


def test_targets_resolve_aliases_and_all():
    assert resolve_targets("all") == ("onnxruntime", "openvino", "tensorrt", "triton")
    assert resolve_targets(["trt", "ort,ov"]) == ("onnxruntime", "openvino", "tensorrt")
    with pytest.raises(StudioError, match="unknown export target"):
        resolve_targets("coreml")
    with pytest.raises(StudioError, match="no export target"):
        resolve_targets(",")


def test_shape_specs():
    name, rng = parse_shape_spec("input=1x3x224x224:4x3x224x224:8x3x224x224")
    assert name == "input" and rng.min == (1, 3, 224, 224) and rng.max[0] == 8 and not rng.static
    assert parse_shape_spec("x=2x5")[1].static
    # The name is everything before the last '=': names with ':' and '=' work.
    assert parse_shape_spec("in:0=a=1x2")[0] == "in:0=a"
    for bad in ("x=1x2:3x4", "x=1x2:3x4:5", "=1x2", "x=axb", "x=4x2:2x2:8x2"):
        with pytest.raises(StudioError):
            parse_shape_spec(bad)
    assert parse_shapes({"x": [1, 2], "y": ([1], [2], [3]), "z": "1x2"}) == {
        "x": ShapeRange((1, 2), (1, 2), (1, 2)), "y": ShapeRange((1,), (2,), (3,)), "z": ShapeRange((1, 2), (1, 2), (1, 2))}


def test_options_validate():
    with pytest.raises(StudioError, match="precision"):
        ExportOptions(precision="int4")
    with pytest.raises(StudioError, match="optimization level"):
        ExportOptions(ort_level="fast")
    with pytest.raises(StudioError, match="max_batch"):
        ExportOptions(max_batch=0)
    opts = ExportOptions(targets=("ort",), shapes=["x=1x2"])
    assert opts.targets == ("onnxruntime",) and opts.shapes["x"].static and opts.ort_portable
    assert not ExportOptions(ort_level="all").ort_portable


def test_cli_command_round_trips_the_options():
    cmd = ExportRequest(targets=["onnxruntime", "tensorrt"], preset="safe", precision="fp16",
                        shapes=["input ids=1x8:2x16:4x64"], ort_level="basic", max_batch=4).command("my model.onnx")
    assert cmd == ("onnx-studio export 'my model.onnx' --target ort,tensorrt -o artifacts --preset safe "
                   "--precision fp16 --shapes 'input ids=1x8:2x16:4x64' --ort-level basic --max-batch 4")
    assert "--target all" in ExportRequest().command("m.onnx")
    cmd = ExportRequest(targets=["openvino"], ov_precisions=["fp32", "fp16"], ort_custom_ops=["/p/libx ort.so"],
                        ov_extensions=["/p/libov.so"]).command("m.onnx")
    assert cmd == ("onnx-studio export m.onnx --target openvino -o artifacts --ov-precisions fp32,fp16 "
                   "--ort-custom-ops '/p/libx ort.so' --ov-extension /p/libov.so")


def test_a_zero_dim_in_shapes_is_one_line_before_any_work(tmp_path):
    """--dim refuses 0 ("must be from 1 to 2,147,483,647"); --shapes took 1x0, and corpus romanizer_ar_encoder
    export --shapes src=1x0 ended in the verification workers' crashes (ONNX Runtime SIGABRT, MNN SIGSEGV) with
    the bundle half written. Now the same one-line refusal, nothing written."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    from studio import api
    from studio.core.bounds import OutOfRange

    for spec in ("src=1x0", "src=1x1:1x0:1x8", "src=1x1:1x4:0x8"):
        with pytest.raises(OutOfRange, match=r"--shapes src dim \d is 0: it must be from 1 to 2,147,483,647"):
            parse_shapes([spec])
    with pytest.raises(OutOfRange, match="dim 1 is 0"):
        parse_shapes({"src": [1, 0]})
    g = h.make_graph([h.make_node("Relu", ["src"], ["y"])], "g", [h.make_tensor_value_info("src", T.FLOAT, [1, "n"])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, "n"])])
    path = tmp_path / "relu.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)
    out = tmp_path / "out"
    with pytest.raises(StudioError, match="dim 1 is 0"):
        api.export(api.load(path), "onnxruntime", out, shapes=["src=1x0"], zip=False)
    assert not out.exists()
