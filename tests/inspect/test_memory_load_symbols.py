"""ORT's buffer reuse on the shapes it infers at load time: the file's dim names are carried, a name ONNX's
own inference makes up for a dim it cannot compute (``unk__6``: a Conv's output width on a symbolic input)
is an unnamed dim to ORT, never "the same size" as another (issue 32 item 4).

Oracle: ORT's own memory-pattern block on REAL paddle2onnx OCR recognisers (tuned-on part; inputs
[?, 3, 48, ?]), read by the allocation shim in a child process, with its optimizations off and at its
default options. Before this change the plan kept the made-up names, shared buffers ORT keeps apart and
was +16.7 % over ORT's block in both views (3360 vs 2880 KiB on PP-OCRv4 rec).
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.inspect.memory_measure import measure_ort_activations
from studio.inspect.memory_plan import as_ort_loads, file_symbols
from studio.inspect.memory_report import unoptimized_plan
from studio.inspect.ort_optimized import load_types, optimized_plan
from studio.inspect.summary import summarize
from tests.corpus import corpus_feeds, corpus_model


def test_only_the_files_own_dim_names_are_kept(tmp_path):
    """Code-built: x [1, 4, 'h', 'w'] -> Conv: ONNX's inference names the Conv's output dims unk__N; the
    file declares only h and w (and 'n' in value_info), so those made-up names become unnamed dims."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4, 3, 3], [0.0] * 144)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2]),
                           helper.make_node("Relu", ["y"], ["z"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "h", "w"])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [w],
                          value_info=[helper.make_tensor_value_info("q", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert file_symbols(model) == {"h", "w", "n"}
    inferred = onnx.shape_inference.infer_shapes(model)
    made_up = [d.dim_param for vi in inferred.graph.value_info if vi.name == "y"
               for d in vi.type.tensor_type.shape.dim if d.dim_param]
    assert made_up and all(d.startswith("unk__") for d in made_up)        # ONNX names them, ORT does not
    assert as_ort_loads((1, 4, made_up[0], "h"), file_symbols(model)) == (1, 4, None, "h")
    path = tmp_path / "conv.onnx"
    onnx.save(model, path)
    types = load_types(api.load(path))
    assert types["y"][0][:2] == (1, 4) and types["y"][0][2:] == (None, None)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rapidocr_ppocrv4_rec", "gutenye_ppocrv4_rec"])
def test_ocr_recogniser_plans_equal_orts_block_in_both_views(name):
    path, feeds = corpus_model(name), corpus_feeds(name)
    h = api.load(path)
    as_run = optimized_plan(h, feeds)[0].arena_bytes
    assert as_run == measure_ort_activations(path, feeds=feeds, optimized=True).pattern_bytes
    s = summarize(h, _dims(h, feeds))
    off = unoptimized_plan(h, s, s.memory_plan).arena_bytes
    assert off == measure_ort_activations(path, feeds=feeds).pattern_bytes


def _dims(h, feeds):
    from studio.core.feeds import input_specs, unnamed_dim_key

    out = {}
    for s in input_specs(h.proto):
        if s.name in feeds and s.shape is not None:
            for axis, d in enumerate(s.shape):
                if not isinstance(d, int) and axis < feeds[s.name].ndim:
                    out[d if isinstance(d, str) else unnamed_dim_key(s.name, axis)] = int(feeds[s.name].shape[axis])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["captcha_whisperer_crnn"])
def test_nchwc_values_on_a_symbolic_input_carry_orts_load_time_shapes(name):
    """A REAL image model with a symbolic batch and fixed sides, planned over ORT's optimized graph: the
    values its NCHWc layout made (reorder_token_N, no value_info in the file ORT writes) take the shape
    ORT's inference gives them (the batch symbol, known channels and sides), so the plan reuses them as
    ORT does. Before: captcha +28.6 % (2700 vs 2100 KiB) against ORT's block."""
    from studio.inspect.memory_plan import declared_types
    from studio.inspect.ort_optimized import _made_types

    path, feeds = corpus_model(name), corpus_feeds(name)
    plan, og, _ = optimized_plan(api.load(path), feeds)
    declared = declared_types(og.model.graph)
    made = _made_types(og.model.graph, declared, og.shapes)
    assert made and all(isinstance(s[0], str) for s in made.values())       # the batch symbol carried
    assert all(isinstance(s[1], int) for s in made.values())
    measured = measure_ort_activations(path, feeds=feeds, optimized=True).pattern_bytes
    assert abs(plan.arena_bytes - measured) <= 0.05 * measured, (plan.arena_bytes, measured)


def test_load_types_have_no_shapes_computed_from_values(tmp_path):
    """Code-built: y = Reshape(x, Concat(Shape(x)[0:1], [-1])) on x [1, 's', 4]. ONNX's inference with data
    propagation knows y is [1, 4*s] (named); ORT's load-time inference does not compute shapes from
    values, so for the memory plan y's dims are unknown."""
    from studio.inspect.shapes import sandboxed_shapes

    nodes = [helper.make_node("Shape", ["x"], ["sh"], start=0, end=1),
             helper.make_node("Concat", ["sh", "m1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s", 4])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                          [helper.make_tensor("m1", TensorProto.INT64, [1], [-1])])
    path = tmp_path / "reshape.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    h = api.load(path)
    propagated = sandboxed_shapes(path, h.proto, None)[0].values["y"].shape
    assert propagated is not None and propagated[0] == 1                  # data propagation knew dim 0
    loads = load_types(h)["y"][0]
    assert not [d for d in (loads or ()) if d is not None], loads         # ORT at load: no dim known


@pytest.mark.slow
def test_a_transformer_with_computed_reshapes_plans_equal_orts_block_in_both_views():
    """chython rxnmap (REAL, tuned-on; inputs [1, seq_len]): its attention Reshapes take shapes computed by
    Shape -> Gather -> Concat. Planned with the propagated shapes the plan shared buffers ORT keeps apart:
    +65.0 % (2113 vs 1281 KiB) as run and +62.4 % with optimizations off."""
    name = "chython_rxnmap"
    path, feeds = corpus_model(name), corpus_feeds(name)
    h = api.load(path)
    assert optimized_plan(h, feeds)[0].arena_bytes == measure_ort_activations(path, feeds=feeds,
                                                                               optimized=True).pattern_bytes
    s = summarize(h, _dims(h, feeds))
    assert unoptimized_plan(h, s, s.memory_plan).arena_bytes == measure_ort_activations(path, feeds=feeds).pattern_bytes
