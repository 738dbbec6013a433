"""The memory plan: lifetimes and peak by hand, best-fit by hand, ORT's order against ORT's own
profile, and the reorder-for-memory pass on a two-branch model (lower peak, equal outputs)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from studio.inspect.memory_plan import TensorLife, best_fit, ort_order, plan, schedule_from_graph

TINY = """
<ir_version: 8, opset_import: ["" : 17]>
tiny (float[1,16] x) => (float[1,16] y) {
    a = Relu(x)
    b = Neg(a)
    c = Exp(a)
    d = Add(b, c)
    y = Sigmoid(d)
}
"""


def _sizes(model: onnx.ModelProto):
    m = onnx.shape_inference.infer_shapes(model)
    vi = {v.name: v for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}

    def size(name: str) -> int | None:
        v = vi.get(name)
        if v is None:
            return None
        item = onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).itemsize
        return int(np.prod([d.dim_value for d in v.type.tensor_type.shape.dim])) * item
    return m, size


def test_lifetimes_and_peak_by_hand():
    m, size = _sizes(onnx.parser.parse_model(TINY))
    s = schedule_from_graph(m.graph, size)
    p = plan(s, alignment=1)
    # ORT's reverse DFS: the only leaf is Sigmoid; Add's producers are popped highest index first (Exp).
    assert p.order == ("Relu_0", "Exp_2", "Neg_1", "Add_3", "Sigmoid_4")
    life = {t.name: (t.start, t.end, t.kind) for t in p.tensors}
    assert life == {"x": (-1, 0, "input"), "a": (0, 2, "activation"), "c": (1, 3, "activation"),
                    "b": (2, 3, "activation"), "d": (3, 4, "activation"), "y": (4, 5, "output")}
    # live per step (64 bytes each): Relu x+a; Exp a+c; Neg a+c+b; Add c+b+d; Sigmoid d+y
    assert p.live_bytes == (128, 128, 192, 192, 128)
    assert p.peak_bytes == 192 and p.peak_step == 2 and p.peak_node == "Neg_1"
    assert [n for n, _ in p.peak_tensors] == ["a", "b", "c"]
    assert p.activation_peak_bytes == 192
    # best fit: a@0, c@64, b@128 (a freed after step 2), d reuses a's block (freed after Neg)
    off = {t.name: t.offset for t in p.tensors}
    assert off["a"] == 0 and off["c"] == 64 and off["b"] == 128 and off["d"] == 0
    assert p.arena_bytes == 192


def test_best_fit_takes_the_smallest_gap():
    lives = [TensorLife("big", 300, 0, 1, "activation"), TensorLife("keep1", 100, 0, 9, "activation"),
             TensorLife("small", 100, 0, 1, "activation"), TensorLife("keep2", 100, 0, 9, "activation"),
             TensorLife("t", 100, 2, 3, "activation")]
    arena, off = best_fit(lives, alignment=1)
    # at step 2: big [0,300) and small [400,500) are free; t goes to the 100-byte gap, not the 300 one
    assert off == {"big": 0, "keep1": 300, "small": 400, "keep2": 500, "t": 400}
    assert arena == 600
    arena_first, off_first = best_fit(lives[:4] + [TensorLife("u", 350, 2, 3, "activation")], alignment=1)
    assert off_first["u"] == 600 and arena_first == 950     # fits no gap: the arena grows


def _two_branch() -> onnx.ModelProto:
    from tests.memory_models import two_branch

    return two_branch()


def _ort_profiled_order(path, tmp_path) -> list[str]:
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    sess.run(None, {"x": np.zeros((1, 3, 32, 32), np.float32)})
    events = json.load(open(sess.end_profiling()))
    return [e["name"][: -len("_kernel_time")] for e in events
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]


def test_ort_order_is_what_ort_runs(tmp_path):
    m, size = _sizes(_two_branch())
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    s = schedule_from_graph(m.graph, size)
    predicted = [s.nodes[k].label for k in ort_order(s)]
    assert predicted == _ort_profiled_order(path, tmp_path)
    assert predicted[1] == "p1"              # ORT runs the later-written branch first


def test_reorder_pass_lowers_peak_and_keeps_outputs(tmp_path):
    from passes.registry import make_pass

    m, size = _sizes(_two_branch())
    before = plan(schedule_from_graph(m.graph, size))
    model = ir.from_proto(m)
    res = make_pass("reorder-for-memory")(model)
    assert res.modified, res.notes
    out = ir.to_proto(res.model)
    path_a, path_b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(m, path_a)
    onnx.save(out, path_b)
    _, size_b = _sizes(out)
    after = plan(schedule_from_graph(out.graph, size_b))
    # hand figures: q-branch first keeps q3 (c channels) instead of p3 (8c) alive meanwhile
    big, stem = 4 * 8 * 32 * 32 * 4, 4 * 32 * 32 * 4
    assert before.peak_bytes == 3 * big                   # at q2: p3, q1, q2
    assert after.peak_bytes == 2 * big + 2 * stem         # at the Concat: p3, q3 and y
    assert after.peak_bytes < before.peak_bytes and after.arena_bytes < before.arena_bytes
    # ORT really executes the new order
    assert _ort_profiled_order(path_b, tmp_path)[:4] == ["s", "q1", "q2", "q3"]
    x = np.random.RandomState(1).randn(1, 3, 32, 32).astype(np.float32)
    ya = ort.InferenceSession(str(path_a), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    yb = ort.InferenceSession(str(path_b), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ya, yb)


# ---------------------------------------------------------------------------- against what ORT allocates

def _predicted_arena(path) -> int:
    from studio.core.tensor_safety import itemsize_of

    m = onnx.load(str(path))
    for v in m.graph.input:                 # symbolic dims at 1, as the measurement feeds them
        for d in v.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.dim_value = 1
    mi = onnx.shape_inference.infer_shapes(m, data_prop=True)
    vi = {v.name: v for v in list(mi.graph.value_info) + list(mi.graph.input) + list(mi.graph.output)}

    def size(name: str) -> int | None:
        v = vi.get(name)
        if v is None or not v.type.tensor_type.HasField("shape"):
            return None
        dims = v.type.tensor_type.shape.dim
        item = itemsize_of(v.type.tensor_type.elem_type)
        if item is None or not all(d.HasField("dim_value") for d in dims):
            return None
        return int(np.prod([d.dim_value for d in dims])) * item
    s = schedule_from_graph(mi.graph, size)
    assert not s.unknown
    return plan(s).arena_bytes


@pytest.mark.slow
@pytest.mark.parametrize("name", ["imagenet_classifier", "mobilenet_like", "cnn_unfused", "caffe_classifier",
                                  "constant_weights"])
def test_predicted_arena_matches_ort_pattern_block(name):
    from sample_models.catalog import path_of
    from studio.inspect.memory_measure import measure_ort_activations

    path = path_of(name)
    predicted = _predicted_arena(path)
    measured = measure_ort_activations(path).pattern_bytes
    assert predicted > 0 and abs(predicted - measured) <= 0.15 * measured, (predicted, measured)


@pytest.mark.slow
def test_reorder_lowers_ort_measured_peak(tmp_path):
    from passes.registry import make_pass
    from studio.inspect.memory_measure import measure_ort_activations

    m, _ = _sizes(_two_branch())
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(m, a)
    onnx.save(ir.to_proto(make_pass("reorder-for-memory")(ir.from_proto(m)).model), b)
    before, after = measure_ort_activations(a).pattern_bytes, measure_ort_activations(b).pattern_bytes
    assert (before, after) == (_predicted_arena(a), _predicted_arena(b))
    assert after < before


@pytest.mark.slow
def test_reorder_runs_as_a_verified_pass(tmp_path):
    from studio import api

    m, _ = _sizes(_two_branch())
    src = tmp_path / "m.onnx"
    onnx.save(m, src)
    r = api.optimize(api.load(src), passes=["reorder-for-memory"], out_path=tmp_path / "out" / "m.onnx")
    step = next(s for s in r.to_dict()["records"] if s["name"] == "reorder-for-memory")
    assert step["modified"] and step["verification"]["ok"] and step["verification"]["numeric_status"] == "passed"
    memory = step["details"]["memory"]
    assert memory["after"]["peak_bytes"] < memory["before"]["peak_bytes"]
    assert memory["after"]["order"][:4] == ["s", "q1", "q2", "q3"]


# ---------------------------------------------------------------------------- ORT's allocation planner, by hand

def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    from onnx import helper as oh

    m = oh.make_model(oh.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _measured(model: onnx.ModelProto, tmp_path) -> int:
    from studio.inspect.memory_measure import measure_ort_activations

    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return measure_ort_activations(path).pattern_bytes


def _arena(model: onnx.ModelProto, **kw) -> tuple[int, dict[str, int]]:
    m, size = _sizes(model)
    p = plan(schedule_from_graph(m.graph, size), **kw)
    return p.arena_bytes, {t.name: t.offset for t in p.tensors}


def test_pattern_sizes_are_aligned_to_256_bytes(tmp_path):
    """ORT sizes each planned tensor with kAllocAlignment (256): one 4-byte intermediate takes 256."""
    from onnx import TensorProto as T
    from onnx import helper as oh

    m = _model([oh.make_node("Neg", ["x"], ["a"]), oh.make_node("Neg", ["a"], ["y"])],
               [oh.make_tensor_value_info("x", T.FLOAT, [1])], [oh.make_tensor_value_info("y", T.FLOAT, [1])])
    assert _arena(m)[0] == 256 == _measured(m, tmp_path)
    assert _arena(m, alignment=64)[0] == 64             # the old 64-byte figure: 4x under


def _reuse_model(c_from_b: bool = True) -> onnx.ModelProto:
    """a=Neg(x) [1024], b=Neg(a), t=Slice(b)[512], c=Neg(b) [1024], y=Concat(c, t); ORT runs a, b, t, c, y."""
    from onnx import TensorProto as T
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    inits = [nh.from_array(np.array([0], np.int64), "s0"), nh.from_array(np.array([512], np.int64), "s1")]
    return _model([oh.make_node("Neg", ["x"], ["a"], name="na"), oh.make_node("Neg", ["a"], ["b"], name="nb"),
                   oh.make_node("Neg", ["b"], ["c"], name="nc"),
                   oh.make_node("Slice", ["b", "s0", "s1"], ["t"], name="st"),
                   oh.make_node("Concat", ["c", "t"], ["y"], axis=0, name="cat")],
                  [oh.make_tensor_value_info("x", T.FLOAT, [1024])], [oh.make_tensor_value_info("y", T.FLOAT, [1536])],
                  inits)


def test_a_freed_buffer_of_the_same_static_shape_is_reused(tmp_path):
    """ORT's planner gives c the buffer a freed (same static shape [1024]), which then stays held until
    c's last reader: t (2 KiB) cannot take a's place once a is dead and goes on top. By hand: a@0, b@4K,
    t@8K -> 10 KiB. Pure best fit without that reuse: t into a's gap @0, c @8K -> 12 KiB."""
    m, size = _sizes(_reuse_model())
    s = schedule_from_graph(m.graph, size)
    p = plan(s)
    assert p.order == ("na", "nb", "st", "nc", "cat")
    off = {t.name: t.offset for t in p.tensors}
    assert off["a"] == off["c"] == 0 and off["b"] == 4096 and off["t"] == 8192
    assert p.arena_bytes == 10240 == _measured(m, tmp_path)
    # the same graph where ORT could not know c's shape when it loads the file: no reuse, plain best fit
    blind = plan(replace(s, static={k: v for k, v in s.static.items() if k != "c"}))
    off = {t.name: t.offset for t in blind.tensors}
    assert off["t"] == 0 and off["c"] == 8192 and blind.arena_bytes == 12288


def test_an_output_nobody_reads_is_held_to_the_end(tmp_path):
    """TopK's indices (unused) get no release in ORT's deallocation plan: their block stays, and the
    last big tensor cannot use their place. By hand: a@0 (4K), v@4K (1K), i@5K (2K), r into a's gap @0,
    u (8K) fits no gap -> @7K: 15 KiB (9 KiB if the indices were freed)."""
    from onnx import TensorProto as T
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    m = _model([oh.make_node("Neg", ["x"], ["a"]), oh.make_node("TopK", ["a", "k"], ["v", "i"]),
                oh.make_node("Neg", ["v"], ["r"]), oh.make_node("Tile", ["r", "reps"], ["u"]),
                oh.make_node("Neg", ["u"], ["y"])],
               [oh.make_tensor_value_info("x", T.FLOAT, [1024])], [oh.make_tensor_value_info("y", T.FLOAT, [2048])],
               [nh.from_array(np.array([256], np.int64), "k"), nh.from_array(np.array([8], np.int64), "reps")])
    arena, off = _arena(m)
    assert off == {"x": -1, "a": 0, "v": 4096, "i": 5120, "r": 0, "u": 7168, "y": -1}
    assert arena == 15360 == _measured(m, tmp_path)


def test_in_place_and_alias_follow_the_buffer_not_the_tensor(tmp_path):
    """r = Reshape(a) shares a's buffer; Relu(r) is in place only when that buffer has no other reader
    left: here a is still read by the Add, so the Relu gets its own block. By hand: a@0, relu@4K (in
    place would be @0), d (Add) reuses nothing freed -> 3 blocks of 4 KiB."""
    from onnx import TensorProto as T
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    m = _model([oh.make_node("Neg", ["x"], ["a"], name="n0"),
                oh.make_node("Reshape", ["a", "shape"], ["r"], name="n1"),
                oh.make_node("Relu", ["r"], ["q"], name="n2"),
                oh.make_node("Reshape", ["q", "back"], ["q2"], name="n3"),
                oh.make_node("Add", ["a", "q2"], ["d"], name="n4"),
                oh.make_node("Neg", ["d"], ["y"], name="n5")],
               [oh.make_tensor_value_info("x", T.FLOAT, [1024])], [oh.make_tensor_value_info("y", T.FLOAT, [1024])],
               [nh.from_array(np.array([32, 32], np.int64), "shape"), nh.from_array(np.array([1024], np.int64), "back")])
    arena, off = _arena(m)
    assert off["r"] == off["a"] == 0 and off["q"] == off["q2"] == 4096 and off["d"] == 8192
    assert arena == 12288 == _measured(m, tmp_path)


LIGHT = ["light_resnet50", "light_densenet121", "light_inception_v1", "light_inception_v2", "light_squeezenet",
         "light_shufflenet"]


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT + ["if_loop", "gpt2_decoder_with_past", "llama_genai", "mobilenet_like",
                                          "yolo_detector", "llama_optimum"])
def test_plan_of_the_measured_run_is_within_15_percent_of_ort(name):
    """The facade's plan of the run ORT makes (weights computed at run time included) against ORT's
    block on the same feeds: the CNNs' reuse chains, the decoders' contrib ops, the If/Loop sample."""
    from pathlib import Path

    from sample_models.catalog import path_of
    from studio import api
    from studio.inspect.memory_report import unoptimized_plan, measure_ort, plan_feeds
    from studio.inspect.summary import summarize

    path = (Path(onnx.__file__).parent / "backend/test/data/light" / f"{name}.onnx") if name in LIGHT \
        else path_of(name)
    h = api.load(path)
    feeds, chosen, _ = plan_feeds(h)
    summary = summarize(h, chosen)
    assert summary.memory.unknown_tensors == 0
    m = measure_ort(h, feeds, unoptimized_plan(h, summary, summary.memory_plan))
    assert m.error is None and m.measured_bytes > 0
    assert abs(m.relative_error) <= 0.15, (m.predicted_bytes, m.measured_bytes)


def test_contrib_op_shapes_come_from_ort_shape_rules():
    """MatMulNBits (com.microsoft): ONNX inference leaves its output open (the plan counted it as 0);
    ORT's symbolic shape inference fills it, equal to what ORT really produces."""
    from onnx import TensorProto as T
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    from studio.inspect.shapes import with_contrib_shapes

    rng = np.random.RandomState(0)
    inits = [nh.from_array(rng.randint(0, 255, (8, 1, 8)).astype(np.uint8), "B"),
             nh.from_array(rng.rand(8).astype(np.float32), "scales")]
    g = oh.make_graph([oh.make_node("MatMulNBits", ["x", "B", "scales"], ["mm"], domain="com.microsoft",
                                    K=16, N=8, bits=4, block_size=16),
                       oh.make_node("Neg", ["mm"], ["y"])], "g",
                      [oh.make_tensor_value_info("x", T.FLOAT, [1, 3, 16])],
                      [oh.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx_only = onnx.shape_inference.infer_shapes(m)
    assert "mm" not in {v.name for v in onnx_only.graph.value_info if v.type.tensor_type.HasField("shape")}
    filled = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in with_contrib_shapes(onnx_only).graph.value_info}
    ran = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros((1, 3, 16), np.float32)})[0]
    assert filled["mm"] == list(ran.shape) == [1, 3, 8]


def test_an_op_without_an_ort_kernel_is_planned_as_its_function_body(tmp_path):
    """ORT has no CPU kernel for HardSwish: it inlines HardSigmoid + Mul, and the HardSigmoid's output
    (not in place: Mul still reads a) is a planned tensor. By hand: a, hs, h of 4 KiB each -> 12 KiB
    (8 KiB for the node as written)."""
    from onnx import TensorProto as T
    from onnx import helper as oh

    from studio.inspect.memory_plan import graph_plan

    m = _model([oh.make_node("Neg", ["x"], ["a"], name="n"), oh.make_node("HardSwish", ["a"], ["h"], name="hs"),
                oh.make_node("Neg", ["h"], ["y"], name="out")],
               [oh.make_tensor_value_info("x", T.FLOAT, [1024])], [oh.make_tensor_value_info("y", T.FLOAT, [1024])])
    mi = onnx.shape_inference.infer_shapes(m)
    vi = {v.name: v for v in list(mi.graph.value_info) + list(mi.graph.input) + list(mi.graph.output)}

    def shape(name):
        return tuple(d.dim_value for d in vi[name].type.tensor_type.shape.dim) if name in vi else None

    def elem(name):
        return vi[name].type.tensor_type.elem_type if name in vi else None

    as_written, _ = graph_plan(mi.graph, shape, elem)
    inlined, unknown = graph_plan(mi.graph, shape, elem, opset=17)
    assert as_written.arena_bytes == 8192 and unknown == 0
    assert inlined.order == ("n", "hs/HardSigmoid_0", "hs/Mul_1", "out")
    assert inlined.steps == (0, 1, 1, 2)                      # the body's nodes keep their node's index
    assert inlined.arena_bytes == 12288 == _measured(m, tmp_path)
