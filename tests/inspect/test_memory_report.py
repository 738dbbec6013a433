"""api.memory_plan / api.memory_reorder: the plan of a two-branch model by hand, ORT's measured block
(the allocation shim's own reading, on the same feeds), a decoder's KV cache growing with the past
length it is given, the reorder as a verified pass equal to plain ORT, and the graph overlay."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from studio import api
from studio.core.requests import MemoryRequest
from tests.conftest import SAMPLES
from tests.memory_models import BIG, STEM, two_branch


def _save(model: onnx.ModelProto, path):
    onnx.save(model, str(path))
    return path


def test_plan_by_hand_and_what_ort_allocates(tmp_path):
    from studio.inspect.memory_measure import measure_ort_activations

    path = _save(two_branch(), tmp_path / "m.onnx")
    r = api.memory_plan(api.load(path), measure=True, engine_graph=False)     # the graph as written only
    assert r.peak_bytes == 3 * BIG and r.plan.peak_node == "q2"          # p3, q1, q2 live at q2
    assert [n for n, _ in r.plan.peak_tensors] == ["p3", "q1", "q2"]
    assert r.plan.order == ("s", "p1", "p2", "p3", "q1", "q2", "q3", "cat")    # ORT's reverse DFS
    assert r.node_live_bytes()["q2"] == 3 * BIG and set(r.node_live_bytes()) == set(r.plan.order)
    m, ov = r.measured                                                     # one per engine, ORT first
    assert m.error is None and m.engine == "onnxruntime" and ov.engine == "openvino"
    # the facade's measurement is ORT's real block (the shim read directly here), equal to the prediction
    assert m.measured_bytes == measure_ort_activations(path).pattern_bytes == m.predicted_bytes == r.plan.arena_bytes
    assert r.kv_cache is None and r.dims == ()
    d = r.to_dict()
    assert d["peak_bytes"] == 3 * BIG and d["measured"][0]["relative_error"] == 0.0 and "tensors" not in d


def test_live_memory_overlay_for_the_graph(tmp_path):
    h = api.load(_save(two_branch(), tmp_path / "m.onnx"))
    r = api.memory_plan(h)
    s = api.inspect(h)
    overlays = api.graph_overlays(api.graph_index(h, s), s, {"node_memory": r.node_live_bytes()})
    ov = overlays["live memory"]
    assert ov.kind == "numeric" and ov.aggregate == "max" and ov.values["q2"] == 3 * BIG
    assert "live memory" not in api.graph_overlays(api.graph_index(h, s), s, {})


def _kv_bytes_by_hand(spec, past: int) -> int:
    return sum(1 * spec.kv_heads * past * spec.head_dim * 4 for c in spec.cache if c.input)


@pytest.mark.slow
def test_decoder_plan_includes_the_kv_cache_at_the_given_past_length():
    h = api.load(SAMPLES / "llama_optimum.onnx")
    spec = api.decoder_spec(h)
    short, long = (api.memory_plan(h, {"past_sequence_length": n}, measure=True, engine_graph=False)
                   for n in (16, 64))
    for r, past in ((short, 16), (long, 64)):
        dims = dict(r.dims)
        # the decode step: one new token after the past, the mask over both (the cache contract)
        assert dims["past_sequence_length"] == past and dims["sequence_length"] == 1
        assert dims["past_sequence_length + sequence_length"] == past + 1
        assert any("decode step (past length" in n for n in r.notes)
        assert r.kv_cache is not None and r.kv_cache.past_length == past
        assert r.kv_cache.past_bytes == _kv_bytes_by_hand(spec, past) > 0
        lives = {t.name: t for t in r.plan.tensors}
        assert all(lives[n].kind == "input" and lives[n].bytes == 1 * spec.kv_heads * past * spec.head_dim * 4
                   for n in r.kv_cache.past_inputs)
        m = r.measured[0]
        assert m.engine == "onnxruntime" and m.error is None and abs(m.relative_error) <= 0.15, (past, m)
    assert long.peak_bytes > short.peak_bytes
    assert long.measured[0].measured_bytes > short.measured[0].measured_bytes   # the run saw the longer past
    over = api.memory_plan(h, {"past_sequence_length": 96})               # the sample's context is 96
    assert any("no room in the model's context of 96" in n for n in over.notes)


def _ort(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.slow
def test_reorder_lowers_predicted_and_measured_peak_and_equals_plain_ort(tmp_path):
    src = _save(two_branch(), tmp_path / "m.onnx")
    out = tmp_path / "out" / "reordered.onnx"
    r = api.memory_reorder(api.load(src), MemoryRequest(measure=True), out)
    assert r.modified and r.verified and r.lowers_peak and r.output == out
    assert r.before.peak_bytes == 3 * BIG and r.after.peak_bytes == 2 * BIG + 2 * STEM
    assert r.after.plan.order[:4] == ("s", "q1", "q2", "q3")
    before, after = r.before.measured[0].measured_bytes, r.after.measured[0].measured_bytes
    assert after < before and after == r.after.plan.arena_bytes
    x = np.random.RandomState(3).randn(1, 3, 32, 32).astype(np.float32)
    np.testing.assert_array_equal(_ort(src, x), _ort(out, x))


def test_reorder_of_a_dynamic_model_takes_the_plan_sizes(tmp_path):
    m = two_branch()
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "N"
    del m.graph.value_info[:]
    src = _save(m, tmp_path / "dyn.onnx")
    r = api.memory_reorder(api.load(src), MemoryRequest(dims={"N": 2}, measure=False), tmp_path / "dyn_out.onnx")
    # sizes at N=2 come from the plan (the pass alone sees no static size and would leave the order)
    assert dict(r.before.dims) == {"N": 2} and r.before.peak_bytes == 2 * 3 * BIG
    assert r.modified and r.verified and r.after.peak_bytes == 2 * (2 * BIG + 2 * STEM)


def test_weights_computed_at_run_time_are_measured_not_planned(tmp_path):
    """A Transpose of a weight: ORT's default level folds it (the plan counts it as a weight), the
    measured run has optimizations off and computes it each time (its prediction includes it)."""
    from onnx import TensorProto as T
    from onnx import helper as oh
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.random.RandomState(0).randn(256, 64).astype(np.float32), "W")
    g = oh.make_graph([oh.make_node("Transpose", ["W"], ["Wt"], name="t"),
                       oh.make_node("MatMul", ["x", "Wt"], ["m"], name="mm"),
                       oh.make_node("Relu", ["m"], ["r"], name="relu"), oh.make_node("Neg", ["r"], ["y"], name="neg")],
                      "g", [oh.make_tensor_value_info("x", T.FLOAT, [4, 64])],
                      [oh.make_tensor_value_info("y", T.FLOAT, [4, 256])], [w])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    r = api.memory_plan(api.load(_save(model, tmp_path / "wt.onnx")), measure=True, engine_graph=False)
    # the plan: x (1 KiB) + m (4 KiB) at mm, Relu in place into m, r + y (8 KiB) at neg; Wt is a weight
    assert r.plan.order == ("mm", "relu", "neg") and r.plan.arena_bytes == 4 * 256 * 4
    assert r.plan.live_bytes == (1024 + 4096, 4096, 8192) and r.plan.peak_node == "neg"
    m, ov = r.measured
    assert ov.predicted_bytes == r.plan.arena_bytes                 # OpenVINO folds Wt, as the plan does
    assert m.predicted_bytes == 256 * 64 * 4 + 4 * 256 * 4 == m.measured_bytes     # Wt (64 KiB) + m


def test_a_cyclic_graph_has_no_memory_plan(tmp_path):
    """Add reads Relu's output, Relu reads Add's: ORT refuses it at load ('the graph is not acyclic'); the plan
    left both nodes out and reported 0 bytes of activations with exit 0. Now a one-line error names them."""
    from onnx import TensorProto, helper

    from studio.core.errors import StudioError

    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["a"], name="add"),
                           helper.make_node("Relu", ["a"], ["b"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])])
    path = tmp_path / "cycle.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(Exception, match="not acyclic"):          # the oracle: plain ONNX Runtime refuses it
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(StudioError, match=r"the graph has a cycle: 2 node\(s\) in it or waiting on it "
                                          r"\('add', 'relu'\)"):
        api.memory_plan(api.load(path))
    # a well-formed graph with an If whose body reads an outer value is not a cycle
    body = helper.make_graph([helper.make_node("Neg", ["a2"], ["o"])], "then", [],
                             [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Abs", ["a2"], ["o2"])], "else", [],
                              [helper.make_tensor_value_info("o2", TensorProto.FLOAT, [4])])
    ok = helper.make_graph([helper.make_node("Relu", ["x"], ["a2"]),
                            helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=other)], "g",
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                            helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path2 = tmp_path / "if.onnx"
    onnx.save(helper.make_model(ok, opset_imports=[helper.make_opsetid("", 17)]), path2)
    assert api.memory_plan(api.load(path2)).plan.peak_bytes > 0
    # an Optimum merged decoder's If branches name their values as the If's outputs: inside names, not a cycle
    from studio.core.protowalk import cycle_nodes

    assert cycle_nodes(onnx.load(SAMPLES / "gpt2_decoder_merged.onnx", load_external_data=False).graph) == []
