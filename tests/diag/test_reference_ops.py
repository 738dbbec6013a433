"""The NumPy GridSample reference against ONNX Runtime's kernels (4-D and 5-D, every
mode/padding/align_corners), and the mmdeploy enum mapping."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from diagnostics.reference_ops import grid_sample, reference_evaluator
from tests.conftest import SAMPLES

CASES = [(2, m, p, a) for m, p, a in itertools.product(["linear", "nearest", "cubic"],
                                                       ["zeros", "border", "reflection"], [0, 1])]
CASES += [(3, m, p, a) for m, p, a in itertools.product(["linear", "nearest"], ["zeros", "border", "reflection"],
                                                        [0, 1])]


@pytest.mark.parametrize("nd,mode,padding,align", CASES)
def test_grid_sample_matches_onnxruntime(nd, mode, padding, align):
    rng = np.random.default_rng(nd * 7 + align)
    x = rng.standard_normal((2, 3, *(5, 6, 7)[:nd])).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, *(4, 3, 5)[:nd], nd)).astype(np.float32)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding, align_corners=align)
    model = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, None),
                                                              helper.make_tensor_value_info("g", 1, None)],
                                                [helper.make_tensor_value_info("y", 1, None)]),
                              opset_imports=[helper.make_opsetid("", 20)])
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "g": grid})[0]
    np.testing.assert_allclose(grid_sample(x, grid, mode, padding, align), expected, atol=1e-5)


def test_opset16_mode_names_and_bad_input():
    x = np.ones((1, 1, 2, 2), np.float32)
    g = np.zeros((1, 1, 1, 2), np.float32)
    assert grid_sample(x, g, "bilinear").shape == (1, 1, 1, 1)
    with pytest.raises(ValueError):
        grid_sample(x, g, "area")
    with pytest.raises(ValueError):
        grid_sample(x, np.zeros((1, 1, 1, 3), np.float32))


def test_evaluator_runs_the_mmdeploy_sample_like_the_standard_one():
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32),
             "grid": np.random.default_rng(1).uniform(-1, 1, (1, 8, 8, 2)).astype(np.float32)}
    custom = reference_evaluator(onnx.load(str(SAMPLES / "mmdeploy_grid_sampler.onnx"))).run(None, feeds)[0]
    standard = ort.InferenceSession(str(SAMPLES / "gridsample_4d.onnx"), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    np.testing.assert_allclose(custom, standard, atol=1e-5)
