"""Layer-wise comparison: finds the first diverging node, maps fused nodes by
tensor name, works in chunks of any size, exposes per-node errors for the graph
view, and refuses what it cannot do with one line."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio import api
from studio.accuracy.layerwise import compare_layers
from studio.core.errors import StudioError
from studio.core.feeds import input_specs, random_feeds
from tests.conftest import SAMPLES, assert_user_message, save


def _chain(perturb: str | None = None, depth: int = 12) -> onnx.ModelProto:
    """x -> (MatMul w_i -> Tanh) x depth; ``perturb`` changes the weight of that MatMul."""
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i in range(depth):
        w = (rng.standard_normal((16, 16)) / 4).astype(np.float32)
        if perturb == f"mm{i}":
            w = w + 0.5
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"tanh{i}"))
        cur = f"t{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [2, 16])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _feeds(path):
    return random_feeds(input_specs(onnx.load(str(path), load_external_data=False)))


def test_first_diverging_node_is_the_changed_one(tmp_path):
    a = save(_chain(), tmp_path / "a.onnx")
    b = save(_chain("mm7"), tmp_path / "b.onnx")
    lw = compare_layers(a, b, feeds=_feeds(a))
    assert lw.first_divergence is not None and lw.first_divergence.node == "mm7"
    assert all(x.error < 1e-6 for x in lw.layers if x.index < lw.first_divergence.index)
    assert lw.compared == 24 and lw.unmatched == 0
    errors = lw.node_errors()
    assert set(errors) == {f"mm{i}" for i in range(12)} | {f"tanh{i}" for i in range(12)}
    assert errors["mm6"] < 1e-6 < errors["mm7"]
    # One tensor per chunk gives the same answer.
    tiny = compare_layers(a, b, feeds=_feeds(a), chunk_bytes=1)
    assert tiny.chunks == 24 and tiny.first_divergence.node == "mm7"
    assert [round(x.error, 9) for x in tiny.layers] == [round(x.error, 9) for x in lw.layers]


def test_fused_nodes_map_back_by_tensor_name(tmp_path):
    """ORT's Conv+BatchNormalization fusion keeps the BN output's name: the fused Conv is
    compared against the original BN output; the vanished Conv output is counted unmatched."""
    src = SAMPLES / "cnn_unfused.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp_path / "fused.onnx")
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    fused = tmp_path / "fused.onnx"
    ops = [n.op_type for n in onnx.load(str(fused)).graph.node]
    assert "BatchNormalization" not in ops
    lw = compare_layers(src, fused, feeds=_feeds(src))
    assert lw.first_divergence is None and lw.unmatched > 0
    bn = [x for x in lw.layers if x.op_type == "BatchNormalization"]
    assert bn and all(x.matched_by == "tensor name" and x.candidate_node for x in bn)


def test_engines_through_the_facade(tmp_path):
    r = api.compare(SAMPLES / "cnn_unfused.onnx", SAMPLES / "cnn_unfused.onnx", engine="ort", engine_b="ov",
                    layerwise=True)
    lw = r.layerwise
    assert r.ok and lw.first_divergence is None and lw.compared >= 20
    assert lw.peak_worker_rss_bytes and lw.peak_worker_rss_bytes > 0
    from studio.charts.accuracy import layer_error_figure

    fig = layer_error_figure(lw)
    assert len(fig.data[0].x) == lw.compared
    d = r.to_dict()["layerwise"]
    assert d["compared"] == lw.compared and len(d["node_errors"]) > 0


def test_tensorrt_is_refused_with_a_reason(tmp_path):
    a = save(_chain(), tmp_path / "a.onnx")
    with pytest.raises(StudioError) as e:
        compare_layers(a, a, feeds=_feeds(a), engine_b="trt")
    assert_user_message(str(e.value), "tensorrt")


def test_shape_change_counts_as_divergence(tmp_path):
    a = save(_chain(depth=3), tmp_path / "a.onnx")
    m = _chain(depth=3)
    # Candidate: the middle Tanh output is transposed (same name, other shape).
    m.graph.node[3].output[0] = "t1_pre"
    m.graph.node.insert(4, helper.make_node("Transpose", ["t1_pre"], ["t1"], name="tr", perm=[1, 0]))
    m.graph.node[5].input[0] = "t1_back"
    m.graph.node.insert(5, helper.make_node("Transpose", ["t1"], ["t1_back"], name="tr2", perm=[1, 0]))
    onnx.checker.check_model(m)
    b = save(m, tmp_path / "b.onnx")
    lw = compare_layers(a, b, feeds=_feeds(a))
    assert lw.first_divergence is not None and lw.first_divergence.tensor == "t1"
    assert lw.first_divergence.rel_l2 is None and "shape" in lw.first_divergence.note


@pytest.mark.slow
def test_resnet50_layerwise_memory_below_twice_plain_inference(tmp_path):
    """Bounded memory on a 100+ layer model (R14-style): peak worker RSS of the chunked
    comparison < 2x the peak of a plain inference run, both in fresh workers."""
    from benchmarks.models import build_resnet50
    from studio.core.engines import get_engine
    from studio.core.sandbox import shutdown_pool

    path = build_resnet50(tmp_path / "r50")
    feeds = _feeds(path)
    shutdown_pool("mem-plain")
    plain = get_engine("ort").run(path, feeds, pool_key="mem-plain").details["peak_rss_bytes"]
    shutdown_pool("mem-plain")
    shutdown_pool("mem-lw")
    lw = compare_layers(path, path, feeds=feeds, pool_key="mem-lw")
    shutdown_pool("mem-lw")
    assert lw.compared > 150
    assert lw.peak_worker_rss_bytes < 2 * plain, (lw.peak_worker_rss_bytes / 2**20, plain / 2**20)


def _ort_optimized(src, dst, level) -> str:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return str(dst)


@pytest.mark.parametrize("level, at_least", [(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, 15),
                                              (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, 8)])
def test_ort_optimized_models_compare_layer_by_layer(tmp_path, level, at_least, capsys):
    """ORT-optimized models (what `export` writes for ONNX Runtime) have com.microsoft ops
    (FusedConv; NCHWc kernels at level "all") that ONNX shape inference cannot type: their
    tensors take the reference's dtype instead of being skipped (1 of 30 tensors was compared),
    NCHWc tensors are reordered to NCHW, and the text output says how many were skipped."""
    from studio.cli import main

    src = SAMPLES / "cnn_unfused.onnx"
    opt = _ort_optimized(src, tmp_path / "opt.onnx", level)
    r = api.compare(src, opt, layerwise=True)
    lw = r.layerwise
    assert lw.compared >= at_least and lw.skipped == 0, lw.to_dict()
    assert lw.first_divergence is None, lw.summary()            # the same computation, reordered or fused
    if level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL:
        assert any(x.matched_by == "NCHWc node" for x in lw.layers)
    assert main(["compare", str(src), opt, "--layerwise"]) == 0
    out = capsys.readouterr().out
    assert f"{lw.compared} tensors compared" in out and "0 skipped" in out
