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


def _streaming_lstm():
    """Silero VAD's shape of things: audio [?, ?] and a stacked LSTM state [2, ?, 8] (h, c; its free dim is
    the batch) that reaches the LSTM through Gather + Unsqueeze inside an If's branches."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    hid = 8
    w = helper.make_tensor("W", TensorProto.FLOAT, [1, 4 * hid, 1], rng.normal(size=4 * hid).tolist())
    r = helper.make_tensor("R", TensorProto.FLOAT, [1, 4 * hid, hid], rng.normal(size=4 * hid * hid).tolist())

    def branch(name):
        return helper.make_graph([
            helper.make_node("Gather", ["state", "zero"], ["h2"], axis=0, name=f"{name}_gh"),
            helper.make_node("Gather", ["state", "one"], ["c2"], axis=0, name=f"{name}_gc"),
            helper.make_node("Unsqueeze", ["h2", "ax0"], [f"{name}_h"], name=f"{name}_uh"),
            helper.make_node("Unsqueeze", ["c2", "ax0"], [f"{name}_c"], name=f"{name}_uc"),
        ], name, [], [helper.make_tensor_value_info(f"{name}_h", TensorProto.FLOAT, None),
                      helper.make_tensor_value_info(f"{name}_c", TensorProto.FLOAT, None)])

    nodes = [
        helper.make_node("Unsqueeze", ["input", "ax2"], ["x3"]),                 # [b, t, 1]
        helper.make_node("Transpose", ["x3"], ["xt"], perm=[1, 0, 2]),           # [t, b, 1]
        helper.make_node("If", ["flag"], ["h0", "c0"], then_branch=branch("t"), else_branch=branch("e")),
        helper.make_node("LSTM", ["xt", "W", "R", "", "", "h0", "c0"], ["y", "hn", "cn"], hidden_size=hid),
        helper.make_node("Concat", ["hn", "cn"], ["stateN"], axis=0),
    ]
    inits = [w, r, helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("ax0", TensorProto.INT64, [1], [0]), helper.make_tensor("ax2", TensorProto.INT64, [1], [2]),
             helper.make_tensor("flag", TensorProto.BOOL, [], [True])]
    graph = helper.make_graph(nodes, "vad", [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, None]),
        helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, None, hid])],
        [helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, None, hid])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_recurrent_state_dims_are_the_batch():
    """An RNN state's free dim is the batch: seeded at 1 like the audio's leading dim, and kept a batch size
    in every searched set. On the old code the seeded state was [2, 16, 8] and the searched ones took the
    audio's length ([2, 512, 8]): the LSTM refused every set (silero_vad_v5: 'not run: needs inputs')."""
    import onnxruntime as ort

    from studio.core.feeds import random_feeds, recurrent_state_inputs

    model = _streaming_lstm()
    assert recurrent_state_inputs(model) == {"state"}
    specs = input_specs(model)
    assert free_axes(specs) == {"input[0]": "batch", "input[1]": "sequence", "state[1]": "batch"}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sets = [random_feeds(specs)] + [recipe_feeds(specs, r) for r in search_recipes(model)]
    assert len(sets) > 3
    for feeds in sets:      # plain ORT, the oracle: every set the studio would try runs
        assert feeds["state"].shape[1] == feeds["input"].shape[0], {k: v.shape for k, v in feeds.items()}
        (state_n,) = sess.run(None, feeds)
        assert state_n.shape == (2, feeds["input"].shape[0], 8)
