"""The input search's parts (diagnostics.input_search): which run errors the inputs can cause,
which sizes and values are tried, and that a recipe rebuilds the same feeds."""

from __future__ import annotations

import numpy as np
import pytest

from diagnostics.input_search import (
    MAX_TRIES,
    InputRecipe,
    compared_constants,
    free_axes,
    input_dependent,
    recipe_feeds,
    search_recipes,
    studio_chosen,
)
from studio.core.feeds import input_specs
from tests.conftest import parse_model

# Messages of real runs (ONNX Runtime 1.32, OpenVINO 2026.4) on models that compiled.
INPUT_DEPENDENT = [
    "InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while running Pad "
    "node. Name:'pad' Status Message: Pad reflect: pre-pad (64) exceeds maximum allowed (15) for axis 2.",
    "Fail: [ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape node. Name:'frames' "
    "Status Message: The input tensor cannot be reshaped to the requested shape. Input shape:{1,16}",
    "InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : running Conv node. Name:'stft' Status Message: "
    "Invalid input shape: {228}",
    "InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : running Gather node. Status Message: indices "
    "element out of data bounds, idx=5 must be within the inclusive range [-3,2]",
    "InvalidArgument: running SplitToSequence node. Status Message: split_size_sum (10) != split_dim_size (1)",
    "RuntimeError: Exception from src/inference/src/cpp/infer_request.cpp:224:\n[CPU] Pad node with name 'pad' "
    "Check 'pad_mode != op::PadMode::REFLECT || (cmp::lt(begin_lb, dim_lb))' failed at pad_shape_inference.hpp:94",
    "RuntimeError: [CPU] Multiply node with name 'Y' Check 'input_shape[j] == 1' failed: Eltwise shape infer input "
    "shapes dim index: 0 mismatch",
]
NOT_INPUTS = [
    "NotImplemented: [ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Foo(1) node",
    "RuntimeError: StringNormalizer: Failed to construct locale with name:en_US.UTF-8",
    "",
    "RuntimeError: ",
]


@pytest.mark.parametrize("message", INPUT_DEPENDENT)
def test_input_dependent_errors(message):
    assert input_dependent(message)


@pytest.mark.parametrize("message", NOT_INPUTS)
def test_errors_no_input_fixes(message):
    assert not input_dependent(message)


VAD = '''<ir_version: 8, opset_import: ["" : 17]>
g (float[?, ?] input, int64 sr, float[1, 3, H, W] image) => (float[?, ?] y) <int64 rate = {16000}> {
  low = Less(sr, rate)
  y = If(low) <
    then_branch = t () => (float[?, ?] a) <int64 eight = {8000}> {
        is8k = Equal(sr, eight)
        a = Identity(input)
    },
    else_branch = e () => (float[?, ?] b) { b = Identity(input) }
  >
}'''


def test_sizes_values_and_bounds():
    model = parse_model(VAD)
    specs = input_specs(model)
    assert free_axes(specs) == {"input[0]": "batch", "input[1]": "sequence", "H": "image", "W": "image"}
    # Comparisons in the main graph and in a branch body, both sides of each.
    assert compared_constants(model) == {"sr": (16000, 16001, 15999, 8000)}
    recipes = search_recipes(model)
    assert 0 < len(recipes) <= MAX_TRIES and len(set(map(repr, recipes))) == len(recipes)
    assert InputRecipe({}, {}) not in recipes                      # never the seeded set again
    lengths = [r.dims.get("input[1]") for r in recipes]
    assert {512, 1024, 4096, 16000} <= set(lengths)
    assert {320, 640} <= {r.dims.get("H") for r in recipes}
    assert any(r.dims.get("input[0]") == 2 for r in recipes)
    assert {r.values["sr"] for r in recipes} == {16000, 16001, 15999, 8000}
    # A user's --dim stays in every set.
    assert all(r.dims["input[1]"] == 300 for r in search_recipes(model, {"input[1]": 300}))


def test_recipe_rebuilds_the_same_feeds():
    specs = input_specs(parse_model(VAD))
    recipe = InputRecipe({"input[1]": 512, "H": 32, "W": 32}, {"sr": 8000})
    a, b = recipe_feeds(specs, recipe), recipe_feeds(specs, recipe)
    assert a["input"].shape == (1, 512) and int(a["sr"]) == 8000 and a["image"].shape == (1, 3, 32, 32)
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_studio_chosen():
    fixed = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1, 16] x) => (float[1, 16] y) '
                        '{ y = Relu(x) }')
    assert not studio_chosen(fixed)
    model = parse_model(VAD)
    assert studio_chosen(model) and not studio_chosen(model, inputs="real.npz")


IMAGE = '''<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 3, H, W] image) => (float[1, 3, H, W] y) { y = Relu(image) }'''


@pytest.mark.parametrize("error, runs", [
    # no input fixes these: the small image size is not tried (a converted engine would convert again)
    ("RuntimeError: the converted model needs op(s) the engine's runtime lacks: TensorFlow op(s) SplitV", 1),
    ("NotImplemented: [ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Foo(1)", 1),
    # a size error may pass at the small size: it is tried (and the search goes on to other sizes)
    ("InvalidArgument: Invalid input shape: {1,3,320,320}", 2),
])
def test_seeded_sets_stop_at_an_error_no_input_fixes(error, runs):
    from diagnostics.input_search import run_search

    model = parse_model(IMAGE)
    shapes = []

    def infer(feeds):
        shapes.append(feeds["image"].shape)
        raise RuntimeError(error)

    out = run_search(model, infer, budget_s=0)
    assert len(shapes[:2]) == runs and out.tries >= runs and (runs == 2 or len(shapes) == 1), shapes
    assert runs == 1 or shapes[1] == (1, 3, 48, 48)          # the second seeded set is the small image size
    assert out.first_error and error.split(":", 1)[1].strip()[:20] in out.first_error
