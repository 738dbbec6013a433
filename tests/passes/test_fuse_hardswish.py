"""fuse-hardswish: paddle2onnx's x·Clip(x+3,0,6)/6 as HardSwish (opset >= 14) or HardSigmoid·x (below).
Values worked out by hand: hardswish(-4) = 0, hardswish(1) = 1·4/6, hardswish(5) = 5·6/6 = 5."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.conftest import parse_model
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
    r = check_applies(tmp_path, _hardswish(opset, div_first=div_first), "fuse-hardswish", expected)
    assert r.records[0].counts["hardswish_fused"] == 1
    np.testing.assert_allclose(_run(r.output), BY_HAND, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kw", [{"three": "2.9"}, {"extra_use": True}])
def test_not_a_hardswish_is_left_alone(kw, tmp_path):
    r = run_one(tmp_path, _hardswish(12, **kw), "fuse-hardswish")
    assert r.records[0].status == "unchanged"
    assert ops(r.output) == ["Add", "Clip", "Mul", "Div"]
    parse_model(_hardswish(12, **kw))      # the model itself is valid
