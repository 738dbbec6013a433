"""fuse-hardswish: paddle2onnx's x·Clip(x+3,0,6)/6 as HardSwish (opset >= 14) or HardSigmoid·x (below).
Values worked out by hand: hardswish(-4) = 0, hardswish(1) = 1·4/6, hardswish(5) = 5·6/6 = 5."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import parse_model
from passes.pipeline import resolve_passes, run_passes
from studio.core.errors import StudioError
from tests.conftest import save
from tests.passes.pass_helpers import check_applies, ops, run_one


def _hardswish(opset: int, *, three: str = "3.0", div_first: bool = False, extra_use: bool = False) -> str:
    clip = ("c = Clip(a, zero, six)" if opset >= 11 else "c = Clip<min = 0.0, max = 6.0>(a)")
    body = (f"d = Div(c, six)\n  y = Mul(x, d)" if div_first else "m = Mul(x, c)\n  y = Div(m, six)")
    out = "float[1,4] y, float[1,4] a" if extra_use else "float[1,4] y"
    return (f'<ir_version: 8, opset_import: ["" : {opset}]>\n'
            f"g (float[1,4] x) => ({out}) <float three = {{{three}}}, float zero = {{0.0}}, float six = {{6.0}}> {{\n"
            f"  a = Add(x, three)\n  {clip}\n  {body}\n}}")


X = np.array([[-4.0, -1.5, 1.0, 5.0]], np.float32)
BY_HAND = np.array([[0.0, -1.5 * 1.5 / 6, 4.0 / 6, 5.0]], np.float32)


def _run(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]


@pytest.mark.parametrize("opset,expected", [(12, ["HardSigmoid", "Mul"]), (10, ["HardSigmoid", "Mul"]),
                                            (14, ["HardSwish"])])
@pytest.mark.parametrize("div_first", [False, True])
def test_four_nodes_become_hardswish(opset, expected, div_first, tmp_path):
    r = check_applies(tmp_path, _hardswish(opset, div_first=div_first), "fuse-hardswish", expected,
                      options={"below_opset_14": "hardsigmoid"})
    assert r.records[0].counts["hardswish_fused"] == 1
    np.testing.assert_allclose(_run(r.output), BY_HAND, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kw", [{"three": "2.9"}, {"extra_use": True}])
def test_not_a_hardswish_is_left_alone(kw, tmp_path):
    r = run_one(tmp_path, _hardswish(12, **kw), "fuse-hardswish")
    assert r.records[0].status == "unchanged"
    assert ops(r.output) == ["Add", "Clip", "Mul", "Div"]
    parse_model(_hardswish(12, **kw))      # the model itself is valid


def _conv_hardswish_conv(opset: int) -> onnx.ModelProto:
    """Conv -> x*Clip(x+3,0,6)/6 -> Conv, as paddle2onnx writes MobileNetV3 (PP-OCR) below opset 14."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(3, np.float32), "three"),
             numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(6, np.float32), "six")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c1", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["cl"]),
             helper.make_node("Mul", ["c1", "cl"], ["m"]), helper.make_node("Div", ["m", "six"], ["hs"]),
             helper.make_node("Conv", ["hs", "w2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)      # the pass reads x's dtype, as in paddle2onnx's files


def _ov_compiled_ops(path) -> int:
    """How many ops OpenVINO's CPU plugin runs for the model (its own fusions done)."""
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return len(compiled.get_runtime_model().get_ops())


def _preset_pass(preset: str, **options):
    return next(p for p in resolve_passes(preset, options={"fuse-hardswish": options} if options else None)
                if p.name == "fuse-hardswish")


@pytest.mark.parametrize("preset", ["openvino", "safe"])
def test_below_opset_14_other_presets_leave_what_openvino_fuses(preset, tmp_path):
    """OpenVINO fuses the four nodes into the Conv, not HardSigmoid*x (PP-OCRv4 det: 409 -> 550 compiled ops,
    1.4x slower): the openvino and safe presets must not make OpenVINO compile more ops."""
    src = save(_conv_hardswish_conv(12), tmp_path / "in" / "m.onnx")
    r = run_passes(src, [_preset_pass(preset)], tmp_path / "out" / "m.onnx")
    assert r.records[0].status == "unchanged"
    assert "left as they are below opset 14" in " ".join(r.records[0].notes)
    assert _ov_compiled_ops(r.output) <= _ov_compiled_ops(src)


def test_below_opset_14_the_ort_preset_fuses_and_set_wins(tmp_path):
    src = save(_conv_hardswish_conv(12), tmp_path / "in" / "m.onnx")
    r = run_passes(src, [_preset_pass("ort")], tmp_path / "out" / "m.onnx")
    assert r.records[0].status == "changed" and r.records[0].verification.ok
    assert ops(r.output) == ["Conv", "HardSigmoid", "Mul", "Conv"]
    x = np.random.default_rng(1).random((1, 3, 16, 16), dtype=np.float32)
    plain = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
             for p in (src, r.output)]
    np.testing.assert_allclose(plain[1], plain[0], rtol=1e-5, atol=1e-5)
    assert _preset_pass("ort", below_opset_14="keep").options["below_opset_14"] == "keep"   # --set wins


def test_opset_14_hardswish_costs_openvino_nothing(tmp_path):
    src = save(_conv_hardswish_conv(14), tmp_path / "in" / "m.onnx")
    r = run_passes(src, [_preset_pass("openvino")], tmp_path / "out" / "m.onnx")
    assert ops(r.output) == ["Conv", "HardSwish", "Conv"]
    assert _ov_compiled_ops(r.output) <= _ov_compiled_ops(src)


def test_a_wrong_form_is_one_line(tmp_path):
    from passes.registry import make_pass
    import onnx_ir as ir
    with pytest.raises(StudioError, match="below_opset_14 must be keep or hardsigmoid"):
        make_pass("fuse-hardswish", below_opset_14="hsig").call(ir.from_proto(_conv_hardswish_conv(12)))
