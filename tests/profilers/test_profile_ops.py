"""Per-op time: ORT trace aggregation, mapping kernels back to ONNX nodes, and
real runs on small models (node count and op types right, sum close to the
end-to-end time)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from profilers.latency import variant_args
from profilers.ops import OpNodeIndex, RawKernel, aggregate_ort_events, attribute, measure_ops
from profilers.variants import EngineSpec
from studio.core.feeds import input_specs, random_feeds
from studio.core.sandbox import Limits
from tests.conftest import SAMPLES, parse_model, save

LIMITS = Limits(timeout_s=120)


def _event(name, ts, dur, op="Conv", cat="Node"):
    return {"cat": cat, "name": name, "ts": ts, "dur": dur, "ph": "X",
            "args": {"op_name": op, "provider": "CPUExecutionProvider"}}


def test_aggregate_ort_events_skips_warmup_runs():
    events = [{"cat": "Session", "name": "model_loading_uri", "ts": 0, "dur": 10}]
    # 2 warm-up runs (slow) and 3 measured runs; each run has two kernels and fences.
    for start, conv in [(100, 500), (1000, 400), (2000, 50), (3000, 60), (4000, 40)]:
        events.append({"cat": "Session", "name": "model_run", "ts": start, "dur": conv + 30})
        events.append(_event("/conv/Conv_fence_before", start + 1, 1))
        events.append(_event("/conv/Conv_kernel_time", start + 2, conv))
        events.append(_event("/relu/Relu_kernel_time", start + 3 + conv, 10, op="Relu"))
    kernels, run_ms, nested = aggregate_ort_events(events, runs=3)
    assert nested == 0
    by_name = {k.name: k for k in kernels}
    assert set(by_name) == {"/conv/Conv", "/relu/Relu"}
    assert by_name["/conv/Conv"].per_run_us == (50.0, 60.0, 40.0)
    assert by_name["/conv/Conv"].typical_us == 50.0 and by_name["/conv/Conv"].calls == 3
    assert by_name["/relu/Relu"].op_type == "Relu"
    assert run_ms == pytest.approx(0.08)


def test_a_body_kernel_starting_with_its_control_flow_node_is_the_nested_one():
    """ORT writes a Loop's body kernels before the Loop's own event; one can start in the same microsecond."""
    events = [{"cat": "Session", "name": "model_run", "ts": 100, "dur": 50},
              _event("/Loop/body/Add_kernel_time", 110, 5, op="Add"),
              _event("/Loop_kernel_time", 110, 30, op="Loop")]
    kernels, _, nested = aggregate_ort_events(events, runs=1)
    assert nested == 1 and [(k.name, k.per_run_us) for k in kernels] == [("/Loop", (30.0,))]


MODEL = '''<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,3,8,8] y) <float[3,3,3,3] w, float[3] scale, float[3] bias, float[3] mean, float[3] var>
{
    c = Conv <pads = [1,1,1,1]> (x, w)
    b = BatchNormalization (c, scale, bias, mean, var)
    r = Relu (b)
    a = Add (r, x)
    y = Relu (a)
}'''


def _graph():
    return OpNodeIndex.from_model(onnx.parser.parse_model(MODEL))


def test_graph_index_keys_like_the_nodes_page():
    g = _graph()
    assert g.keys == ("Conv_0", "BatchNormalization_1", "Relu_2", "Add_3", "Relu_4")
    assert g.resolve("Conv_0") == (0, "exact")
    assert g.resolve("r") == (2, "tensor")             # OpenVINO names unnamed nodes after their output
    assert g.resolve("r_nchwc") == (2, "prefix")       # ORT's NCHWc kernels: <output>_nchwc
    assert g.resolve("Add_3/SomeFusion/") == (3, "prefix")
    assert g.resolve("Multiply_4061") is None


def test_attribute_fused_kernels_and_orphans():
    g = _graph()
    kernels = [
        # ORT style: Conv+BN+Relu named after the Relu's output; Add+Relu named after the Add.
        RawKernel("r_nchwc", "Conv", "CPU", (100.0, 120.0, 110.0), 3),
        RawKernel("Add_3", "Add", "CPU", (10.0, 10.0, 10.0), 3),
        RawKernel("ReorderOutput_token_7", "ReorderOutput", "CPU", (5.0, 5.0, 5.0), 3),
    ]
    out, per_node, unassigned = attribute(kernels, g, runs=3)
    by_name = {k.name: k for k in out}
    conv = by_name["r_nchwc"]
    assert conv.onnx_nodes == ("Conv_0", "BatchNormalization_1", "Relu_2")   # Conv and BN absorbed forwards
    assert conv.anchor == "Conv_0" and conv.mapping == "prefix"             # time goes to the Conv
    assert by_name["Add_3"].onnx_nodes == ("Add_3", "Relu_4")                # epilogue Relu absorbed backwards
    assert by_name["ReorderOutput_token_7"].anchor is None
    assert per_node == {"Conv_0": pytest.approx(0.11), "Add_3": pytest.approx(0.01)}
    assert unassigned == ()
    assert sum(k.share for k in out) == pytest.approx(1.0)


def test_attribute_openvino_original_names():
    g = _graph()
    kernels = [RawKernel("Multiply_77", "Convolution", "brgconv", (30.0,), 1, ("Multiply_77", "b", "r")),
               RawKernel("y", "Subgraph", "jit", (3.0,), 1, ("a", "y"))]
    out, per_node, _ = attribute(kernels, g, runs=1)
    assert out[0].onnx_nodes == ("Conv_0", "BatchNormalization_1", "Relu_2")
    assert out[0].anchor == "Conv_0"                   # Convolution matches Conv
    assert out[1].onnx_nodes == ("Add_3", "Relu_4") and out[1].anchor == "Add_3"
    assert set(per_node) == {"Conv_0", "Add_3"}


def _matmul_chain(tmp_path, n=4, size=192):
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        inits.append(numpy_helper.from_array(rng.standard_normal((size, size)).astype(np.float32) / size, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return save(model, tmp_path / "chain.onnx"), model


def _model_runs(events):
    """ORT's ``model_run`` events in time order: the warm-up runs, then the profiled ones."""
    return sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])


def _top_level_kernel_us(events, run):
    """Microseconds of ``run`` spent in kernels, read straight from ORT's trace: every kernel event in the
    run's window that no longer kernel event on the same thread contains (an If/Loop body's kernels run
    inside their node's kernel)."""
    kernels = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
               and run["ts"] <= e["ts"] <= run["ts"] + run["dur"]]

    def inside(e, f):
        return (f is not e and f.get("tid") == e.get("tid") and f["dur"] > e["dur"]
                and f["ts"] <= e["ts"] and e["ts"] + e["dur"] <= f["ts"] + f["dur"])
    return sum(e["dur"] for e in kernels if not any(inside(e, f) for f in kernels))


def _assert_kernels_within_runs_within_calls(ops, events, runs):
    """The order that holds on any machine, whatever its load, between the figures of the same profiled runs:
    each run's time in kernels <= ORT's own model_run duration <= the timed call around it <= the span from
    the end of the run before it to the start of the run after it (the calls are back to back). Medians keep
    an order that holds run by run, so: in kernels <= ORT's run time <= end-to-end <= the ``runs // 2 + 1``-th
    smallest of those spans (one call, the last, has no span). ORT's trace is in whole microseconds."""
    every = _model_runs(events)
    assert len(every) > runs, "the warm-up runs are in the trace too"
    profiled = every[-runs:]
    assert ops.in_kernels_ms == pytest.approx(
        float(np.median([_top_level_kernel_us(events, r) for r in profiled])) / 1000.0, rel=1e-6, abs=1e-6)
    assert ops.engine_run_ms == pytest.approx(float(np.median([r["dur"] for r in profiled])) / 1000.0, abs=1e-6)
    spans = sorted((after["ts"] - (before["ts"] + before["dur"])) / 1000.0
                   for before, after in zip(every[-runs - 1:-2], every[-runs + 1:]))
    us = 1e-3
    assert ops.in_kernels_ms <= ops.engine_run_ms + 2 * us, (ops.in_kernels_ms, ops.engine_run_ms)
    assert ops.engine_run_ms <= ops.end_to_end_ms * (1 + 1e-3) + 2 * us, (ops.engine_run_ms, ops.end_to_end_ms)
    assert ops.end_to_end_ms <= spans[runs // 2] * (1 + 1e-3) + 3 * us, (ops.end_to_end_ms, spans)
    assert ops.coverage == pytest.approx(ops.in_kernels_ms / ops.end_to_end_ms)
    assert ops.overhead_ms == pytest.approx(ops.end_to_end_ms - ops.in_kernels_ms)


def _assert_mapped(ops, at_least: float):
    """Attribution without timing: ``at_least`` of the kernels (counted, not weighted by time: one preempted
    kernel must not move it) map to ONNX nodes, none of the unmapped ones is a convolution, and the
    time-weighted ``mapped_share`` is the arithmetic of the kernels' own times."""
    mapped = [k for k in ops.kernels if k.anchor is not None]
    assert ops.kernels and len(mapped) / len(ops.kernels) > at_least, [(k.name, k.op_type) for k in ops.kernels]
    assert not [k.name for k in ops.kernels if k.anchor is None and "conv" in k.op_type.lower()]
    total = sum(k.ms for k in ops.kernels)
    assert ops.mapped_share == pytest.approx(sum(k.ms for k in mapped) / total if total else 0.0)


def _run_ops(path, model, spec, tmp_path, runs=8):
    arrays = {}
    feeds = random_feeds(input_specs(model))
    v = variant_args("t0-x", spec.label, path, spec.to_args(), feeds, 0, arrays)
    return measure_ops(v, arrays, model, warmup=2, runs=runs, out_dir=tmp_path / "job", limits=LIMITS,
                       pool_key="test-profile-ops")


def test_ort_per_op_one_kernel_per_node_without_optimizations(tmp_path):
    path, model = _matmul_chain(tmp_path)
    ops = _run_ops(path, model, EngineSpec("onnxruntime", opt_level="disable"), tmp_path)
    # Node count and op types are exactly the graph's; every kernel maps to its own node.
    assert len(ops.kernels) == len(model.graph.node)
    assert sorted(k.op_type for k in ops.kernels) == sorted(n.op_type for n in model.graph.node)
    assert all(k.mapping == "exact" and k.onnx_nodes == (k.anchor,) for k in ops.kernels)
    assert set(ops.per_node_ms) == {n.name for n in model.graph.node}
    assert ops.mapped_share == 1.0
    by_type = {t.op_type: t for t in ops.by_op_type}
    assert by_type["MatMul"].kernels == 4 and by_type["MatMul"].share > 0.5
    shares = ops.node_time_share()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert max(shares, key=shares.get).startswith("mm")
    # The trace lands in the job folder, and is a chrome trace.
    events = json.loads((tmp_path / "job" / ops.trace_file).read_text())
    assert any(e.get("name") == "mm0_kernel_time" for e in events)
    # Time in kernels is the median over the profiled runs of each run's kernel sum (a median of sums, so it
    # may sit a hair below the sum of medians), and end-to-end and the overhead come from the same runs: checked
    # against ORT's own trace, never against a fixed share of end-to-end (a share is the machine's load).
    _assert_kernels_within_runs_within_calls(ops, events, runs=8)


def test_ort_per_op_on_optimized_sample_maps_fused_kernels(tmp_path):
    path = SAMPLES / "cnn_unfused.onnx"
    model = onnx.load(str(path))
    ops = _run_ops(path, model, EngineSpec("onnxruntime"), tmp_path, runs=4)
    assert len(ops.kernels) < len(model.graph.node)      # BN folded, Relu fused, Identity gone
    _assert_mapped(ops, 0.8)
    conv_anchors = [k.anchor for k in ops.kernels if k.op_type == "Conv"]
    assert conv_anchors and all(a and a.endswith("/Conv") for a in conv_anchors)
    assert all(n.startswith("/") for n in ops.per_node_ms)


def test_openvino_per_op_counters_and_synthesized_trace(tmp_path):
    path = SAMPLES / "cnn_unfused.onnx"
    model = onnx.load(str(path))
    ops = _run_ops(path, model, EngineSpec("openvino"), tmp_path, runs=4)
    assert ops.engine == "openvino"
    _assert_mapped(ops, 0.7)
    convs = [k for k in ops.kernels if k.op_type == "Convolution"]
    assert len(convs) == sum(1 for n in model.graph.node if n.op_type == "Conv")
    assert all(k.anchor and k.anchor.endswith("/Conv") for k in convs)
    trace = json.loads((tmp_path / "job" / ops.trace_file).read_text())
    assert trace["traceEvents"] and "synthesized" in trace["otherData"]["note"]


def test_unnamed_nodes_are_keyed_like_the_nodes_page(tmp_path):
    model = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1,512] x) => (float[1,512] y) '
                        '{ a = Relu(x) b = Sigmoid(a) y = Add(a, b) }')
    path = save(model, tmp_path / "unnamed.onnx")
    ops = _run_ops(path, model, EngineSpec("onnxruntime", opt_level="disable"), tmp_path, runs=3)
    assert set(ops.per_node_ms) == {"Relu_0", "Sigmoid_1", "Add_2"}


def test_control_flow_bodies_are_not_counted_twice(tmp_path):
    """The sample's If and Loop bodies run inside their nodes' kernels: a run's time in kernels is its
    top-level kernels' time (counted twice, the bodies' kernels put it above ORT's own run time) and the time
    lands on the main graph's If and Loop nodes."""
    path = SAMPLES / "if_loop.onnx"
    model = onnx.load(str(path))
    ops = _run_ops(path, model, EngineSpec("onnxruntime"), tmp_path, runs=4)
    events = json.loads((tmp_path / "job" / ops.trace_file).read_text())
    assert any("/body/" in e.get("name", "") for e in events)          # the bodies' kernels are in the trace
    _assert_kernels_within_runs_within_calls(ops, events, runs=4)
    assert {"If", "Loop"} <= {k.op_type for k in ops.kernels}
    loop = next(k for k in ops.kernels if k.op_type == "Loop")
    assert loop.anchor == "/Loop" and ops.per_node_ms["/Loop"] > 0
    assert any("If/Loop/Scan bodies" in n for n in ops.notes)
    assert not any("/body/" in k.name for k in ops.kernels)


def test_openvino_per_op_sum_and_end_to_end_come_from_the_same_runs(tmp_path):
    """OpenVINO's counters are running averages since compile (warm-up and first runs included):
    taken as they were, the per-op sum was ~7x end-to-end ("overhead -0.746 ms"). The per-op
    means are now over exactly the profiled runs, like end-to-end."""
    from profilers.ops import mean_over_profiled_runs

    # The arithmetic, exactly: 5 warm-up inferences of 100 us, then 20 profiled ones of 10 us.
    before = 100.0
    after = (5 * 100.0 + 20 * 10.0) / 25
    assert mean_over_profiled_runs(after, before, 5, 20) == pytest.approx(10.0)
    assert mean_over_profiled_runs(after, 0.0, 0, 25) == pytest.approx(after)   # no warm-up: the average
    assert mean_over_profiled_runs(1.0, 100.0, 5, 20) == 0.0                     # counters reset: never negative
    # A real run: how close the sum comes to end-to-end depends on the machine's load (OpenVINO's
    # per-layer counters include time a preempted thread waits), so only what holds on any machine.
    path = SAMPLES / "mobilenet_like.onnx"
    model = onnx.load(str(path))
    ops = _run_ops(path, model, EngineSpec("openvino"), tmp_path, runs=20)
    assert ops.runs == 20 and ops.per_op_sum_ms > 0 and ops.end_to_end_ms > 0
    _assert_mapped(ops, 0.5)                          # layers attributed to ONNX nodes
    text = ops.overhead_text()
    assert ("exceeds end-to-end" in text) == ops.sum_exceeds_end_to_end
    assert "overhead -" not in text and "-0." not in text


def test_a_sum_above_end_to_end_is_said_not_printed_as_negative_overhead():
    from profilers.ops import OpProfile

    ops = OpProfile("t0-ov", "openvino", 5, (), (), {}, 0.9, 0.1, None, 1.0, None)
    assert ops.sum_exceeds_end_to_end and ops.to_dict()["sum_exceeds_end_to_end"]
    text = ops.overhead_text()
    assert "exceeds end-to-end by 0.800 ms" in text and "-0." not in text and "OpenVINO" in text


def test_overhead_is_end_to_end_minus_a_runs_time_in_kernels():
    """On a busy machine each run loses time in different kernels: per-kernel medians add to far less than
    any run spends in kernels. captcha_whisperer_crnn at load 6 on 2 CPUs read 'sum 15.1 ms vs end-to-end
    78.5 ms (overhead 63.4 ms)' while ORT's own trace put a median 62.3 ms per run in kernels. Worked by hand:
    4 kernels of 1 ms, each 10 ms in one of 4 runs: medians add to 4 ms, every run has 13 ms in kernels,
    end-to-end 14 ms: the overhead is 1 ms, not 10."""
    from profilers.ops import build_op_profile

    model = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1,8] x) => (float[1,8] y) '
                        '{ a = Relu(x) b = Sigmoid(a) c = Tanh(b) y = Neg(c) }')
    slow = 10_000.0
    raw = [RawKernel(name, op, "CPUExecutionProvider", tuple(slow if run == i else 1000.0 for run in range(4)), 4)
           for i, (name, op) in enumerate([("Relu_0", "Relu"), ("Sigmoid_1", "Sigmoid"), ("Tanh_2", "Tanh"),
                                           ("Neg_3", "Neg")])]
    ops = build_op_profile("t0-ort", "onnxruntime", raw, OpNodeIndex.from_model(model), 4, 14.0, 14.0, None)
    assert ops.per_op_sum_ms == pytest.approx(4.0) and ops.in_kernels_ms == pytest.approx(13.0)
    assert ops.overhead_ms == pytest.approx(1.0) and not ops.sum_exceeds_end_to_end
    assert ops.coverage == pytest.approx(13.0 / 14.0)
    text = ops.overhead_text()
    assert text.startswith("overhead 1.000 ms") and "13.000 ms in kernels" in text
    assert ops.to_dict()["in_kernels_ms"] == pytest.approx(13.0)
    # A quiet machine: every run alike, the two figures agree and nothing more is said.
    calm = [RawKernel(k.name, k.op_type, k.exec_type, (1000.0,) * 4, 4) for k in raw]
    quiet = build_op_profile("t0-ort", "onnxruntime", calm, OpNodeIndex.from_model(model), 4, 5.0, 5.0, None)
    assert quiet.overhead_text() == "overhead 1.000 ms"
