"""The presets run fuse-hardswish before fuse-conv-scale. The other way round, on MobileNetV3 / PP-LCNet's
Conv -> x*Clip(x+3,0,6)/6 -> Conv, fuse-conv-scale moved the /6 into the next Conv's weights and fuse-hardswish
never saw its pattern (corpus rapidocr_ppocrv3_det, ort preset: 1 of 20 hard-swishes fused by ORT into its
Convs). Oracle: plain onnxruntime, optimizer off and on, at two input sizes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from passes.pipeline import resolve_passes, run_passes
from tests.conftest import save
from tests.passes.pass_helpers import ops

SIZES = ((1, 3, 16, 16), (2, 3, 12, 20))


def _conv_act_conv(opset: int, tail: str, three: float = 3.0) -> onnx.ModelProto:
    """Conv -> x*Clip(x+three,0,6) then /6 (``tail`` "div": Div by 6, "mul": Mul by 1/6) -> Conv, free N/H/W."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(three, np.float32), "three"),
             numpy_helper.from_array(np.array(6 if tail == "div" else 1 / 6, np.float32), "k")]
    clip = (helper.make_node("Clip", ["a", "zero", "six"], ["cl"]) if opset >= 11
            else helper.make_node("Clip", ["a"], ["cl"], min=0.0, max=6.0))
    if opset >= 11:
        inits += [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                  numpy_helper.from_array(np.array(6, np.float32), "six")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c1", "three"], ["a"]), clip,
             helper.make_node("Mul", ["c1", "cl"], ["m"]),
             helper.make_node("Div" if tail == "div" else "Mul", ["m", "k"], ["hs"]),
             helper.make_node("Conv", ["hs", "w2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, "H", "W"])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def _plain_ort(path, x: np.ndarray, level: ort.GraphOptimizationLevel) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _assert_same_in_plain_ort(src, out) -> None:
    for i, shape in enumerate(SIZES):
        x = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        ref = _plain_ort(src, x, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
            np.testing.assert_allclose(_plain_ort(out, x, level), ref, rtol=1e-5, atol=1e-5)


def _weights(path, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer if t.name == name)


def _fusion_passes(preset: str) -> list:
    """The preset's fuse-conv-scale and fuse-hardswish, in its order and with its options."""
    return [p for p in resolve_passes(preset) if p.name in ("fuse-conv-scale", "fuse-hardswish")]


@pytest.mark.parametrize("tail", ["div", "mul"])
@pytest.mark.parametrize("preset,opset,expected", [
    (preset, 14, ["Conv", "HardSwish", "Conv"]) for preset in ("safe", "ort", "openvino", "tensorrt")] + [
    ("ort", 12, ["Conv", "HardSigmoid", "Mul", "Conv"]),
    ("ort", 10, ["Conv", "HardSigmoid", "Mul", "Conv"]),        # Clip's bounds as attributes
])
def test_the_presets_fuse_the_hardswish_before_its_scale_moves(preset, opset, expected, tail, tmp_path):
    """The hard-swish is fused and the next Conv's weights are untouched (old code: the /6 moved into w2,
    fuse-hardswish unchanged)."""
    src = save(_conv_act_conv(opset, tail), tmp_path / "in" / "m.onnx")
    r = run_passes(src, _fusion_passes(preset), tmp_path / "out" / "m.onnx")
    assert r.ok, [rec.message for rec in r.records]
    assert ops(r.output) == expected
    np.testing.assert_array_equal(_weights(r.output, "w2"), _weights(src, "w2"))
    _assert_same_in_plain_ort(src, r.output)


@pytest.mark.parametrize("preset", ["safe", "openvino"])
def test_below_opset_14_a_hardswish_left_for_openvino_still_gives_its_scale(preset, tmp_path):
    """Below opset 14 these presets leave the four nodes (OpenVINO fuses them into the Conv itself); their /6
    then moves into the next Conv as before: ORT runs one Div fewer, OpenVINO compiles the same op count."""
    src = save(_conv_act_conv(12, "div"), tmp_path / "in" / "m.onnx")
    r = run_passes(src, _fusion_passes(preset), tmp_path / "out" / "m.onnx")
    assert r.ok and [rec.status for rec in r.records] == ["unchanged", "changed"]
    assert ops(r.output) == ["Conv", "Add", "Clip", "Mul", "Conv"]
    np.testing.assert_allclose(_weights(r.output, "w2"), _weights(src, "w2") / 6, rtol=1e-6)
    _assert_same_in_plain_ort(src, r.output)
