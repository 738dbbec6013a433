"""Every output's task is inferred from the graph and explained, can be set by the user, and
decides which metrics and targets apply (studio.data.tasks, R49, R52)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper, numpy_helper as nh

from studio.core.compare import compare_arrays, compare_outputs
from studio.core.errors import StudioError
from studio.data.evaluate import output_specs
from studio.data.metrics import applicable_targets, check_target, metrics_for, parse_target, task_of
from studio.data.tasks import order_free_for, output_tasks, parse_task_options

rng = np.random.default_rng(0)
X = helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, 32, 32])


def _model(nodes, outputs, inits=(), inputs=(X,), opset=17):
    g = helper.make_graph(nodes, "g", list(inputs), outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _trunk(classes: int, name: str = "z"):
    """Conv -> pool -> flatten -> Gemm with ``classes`` outputs."""
    w = nh.from_array(rng.normal(size=(8, 3, 3, 3)).astype(np.float32), "w")
    fc = nh.from_array(rng.normal(size=(classes, 8)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], [name], transB=1)]
    return nodes, [w, fc]


def _out(name, dtype=T.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def _tasks(model):
    return output_tasks(model)


def test_two_class_softmax_is_classification_whatever_its_name():
    nodes, inits = _trunk(2)
    m = _model(nodes + [helper.make_node("Softmax", ["z"], ["Identity:0"], axis=-1)], [_out("Identity:0",
                                                                                             shape=["N", 2])], inits)
    t = _tasks(m)["Identity:0"]
    assert t.kind == "classification" and t.classes == 2
    assert "[N, 2] softmax over the last axis" in t.reason and t.reason.endswith("classification")
    spec = output_specs(m)[0]
    assert task_of(spec) == "classification"
    assert [x.name for x in metrics_for(spec)] == ["top1-agreement", "top1-accuracy", "accuracy-drop",
                                                  "cosine"]   # no top-5 of 2
    assert "top1-agreement" in applicable_targets([spec]) and "top5-agreement" not in applicable_targets([spec])


def test_caffe_softmax_over_axis_1_with_unit_dims_and_no_declared_shape():
    w = nh.from_array(rng.normal(size=(2, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("GlobalAveragePool", ["c"], ["p"]),
             helper.make_node("Softmax", ["p"], ["loss"], axis=1)]
    m = _model(nodes, [_out("loss")], [w], opset=11)           # opset 11: Softmax's default axis is 1
    t = _tasks(m)["loss"]
    assert t.kind == "classification" and "axis 1 (trailing dims 1)" in t.reason and "[N, 2, 1, 1]" in t.reason


def test_sigmoid_single_score_is_binary_and_agreement_is_the_side_of_one_half():
    nodes, inits = _trunk(1)
    m = _model(nodes + [helper.make_node("Sigmoid", ["z"], ["out"])], [_out("out", shape=["N", 1])], inits)
    t = _tasks(m)["out"]
    assert t.kind == "classification" and t.threshold == 0.5 and "binary" in t.reason
    spec = output_specs(m)[0]
    metric = metrics_for(spec)[0]
    assert metric.name == "top1-agreement"
    golden = [np.array([[0.40]]), np.array([[0.70]]), np.array([[0.90]])]
    cand = [np.array([[0.45]]), np.array([[0.40]]), np.array([[0.51]])]       # sample 1 crosses 0.5
    r = metric.score("out", golden, cand)
    assert r.value == pytest.approx(2 / 3) and r.worst[0] == 1 and "0.5" in r.detail
    diff = compare_arrays("out", golden[1], cand[1], task=t)
    assert diff.top1_agreement == 0.0


def test_thousand_logits_from_gemm_without_softmax_or_telling_name():
    nodes, inits = _trunk(1000, "output")
    m = _model(nodes, [_out("output", shape=["N", 1000])], inits)
    t = _tasks(m)["output"]
    assert t.kind == "classification" and t.classes == 1000 and "from Gemm (no softmax)" in t.reason
    assert [x.name for x in metrics_for(output_specs(m)[0])][:2] == ["top1-agreement", "top5-agreement"]


def test_single_regression_value_is_not_a_classifier_and_its_targets_are_refused_with_the_reason():
    nodes, inits = _trunk(1, "y")
    m = _model(nodes, [_out("y", shape=["N", 1])], inits)
    t = _tasks(m)["y"]
    assert t.kind == "regression" and "from Gemm" in t.reason
    specs = output_specs(m)
    with pytest.raises(StudioError) as err:
        check_target(parse_target("top1-agreement>=0.99"), specs)
    msg = str(err.value)
    assert "\n" not in msg and "applies to no output" in msg and "'y' is regression" in msg
    assert "cosine, max-abs, max-rel" in msg and "--task y=KIND" in msg
    assert check_target(parse_target("cosine>=0.99"), specs) == "y"
    # the user says it is a one-logit classifier: the target applies, decided at 0 (a logit)
    chosen = output_specs(m, {"y": "classification"})
    assert chosen[0].task.threshold == 0.0 and chosen[0].task.source == "given"
    assert check_target(parse_target("top1-agreement>=0.99"), chosen) == "y"


def test_top1_accuracy_needs_labels():
    nodes, inits = _trunk(3, "logits")
    specs = output_specs(_model(nodes, [_out("logits", shape=["N", 3])], inits))
    with pytest.raises(StudioError, match="no labels"):
        check_target(parse_target("top1-accuracy>=0.9"), specs, has_labels=False)
    assert check_target(parse_target("top1-accuracy>=0.9"), specs, has_labels=True) == "logits"


def test_argmax_ids_and_label_maps():
    w = nh.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ArgMax", ["c"], ["labels"], axis=1, keepdims=0),
             helper.make_node("GlobalAveragePool", ["c"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("ArgMax", ["f"], ["cls"], axis=1, keepdims=0)]
    m = _model(nodes, [_out("labels", T.INT64), _out("cls", T.INT64)], [w])
    tasks = _tasks(m)
    assert tasks["labels"].kind == "segmentation" and "per-pixel labels" in tasks["labels"].reason
    assert tasks["cls"].kind == "classification" and "class ids" in tasks["cls"].reason
    spec = output_specs(m)[1]
    metric = metrics_for(spec)[0]
    r = metric.score("cls", [np.array([1, 2, 3, 0])], [np.array([1, 2, 0, 0])])
    assert r.metric == "top1-agreement" and r.value == 0.75
    assert all(x.name != "cosine" for s in output_specs(m) for x in metrics_for(s))      # never a cosine of ids


def test_l2_normalized_features_are_an_embedding_and_a_same_size_map_is_segmentation():
    nodes, inits = _trunk(128, "f128")
    nodes += [helper.make_node("ReduceL2", ["f128"], ["n"], axes=[1], keepdims=1),
              helper.make_node("Div", ["f128", "n"], ["vec"])]
    w2 = nh.from_array(rng.normal(size=(5, 8, 1, 1)).astype(np.float32), "w2")
    nodes += [helper.make_node("Conv", ["c", "w2"], ["per_pixel"])]
    w3 = nh.from_array(rng.normal(size=(16, 8, 2, 2)).astype(np.float32), "w3")
    nodes += [helper.make_node("Conv", ["c", "w3"], ["fmap"], strides=[2, 2])]
    x = helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 32, 32])
    m = _model(nodes, [_out("vec"), _out("per_pixel"), _out("fmap")], [*inits, w2, w3], inputs=(x,))
    tasks = _tasks(m)
    assert tasks["vec"].kind == "embedding" and "L2-normalized" in tasks["vec"].reason
    assert tasks["per_pixel"].kind == "segmentation" and "the input's height x width" in tasks["per_pixel"].reason
    assert tasks["fmap"].kind == "regression" and "feature map" in tasks["fmap"].reason


def test_per_step_log_softmax_is_a_sequence():
    x = helper.make_tensor_value_info("x", T.FLOAT, [1, 20, 32])
    w = nh.from_array(rng.normal(size=(32, 11)).astype(np.float32), "w")
    m = _model([helper.make_node("MatMul", ["x", "w"], ["s"]),
                helper.make_node("LogSoftmax", ["s"], ["out"], axis=2)], [_out("out")], [w], inputs=(x,))
    t = _tasks(m)["out"]
    assert t.kind == "sequence" and "[N, T, C]" in t.reason
    assert [x.name for x in metrics_for(output_specs(m)[0])] == ["cer", "cosine"]


def test_topk_box_rows_are_detection_and_compared_in_any_order():
    boxes = rng.uniform(0, 50, (30, 6)).astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[1, 2, 3], keepdims=0),
             helper.make_node("Add", ["m", "bias"], ["scores"]),
             helper.make_node("TopK", ["scores", "k"], ["v", "idx"], axis=0),
             helper.make_node("Gather", ["rows", "idx"], ["dets"], axis=0)]
    inits = [nh.from_array(rng.uniform(size=30).astype(np.float32), "bias"),
             nh.from_array(np.array([10], np.int64), "k"), nh.from_array(boxes, "rows")]
    x = helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])
    m = _model(nodes, [_out("dets", shape=[10, 6]), _out("idx", T.INT64, [10])], inits, inputs=(x,))
    tasks = _tasks(m)
    assert tasks["dets"].kind == "detection" and "rows picked by TopK" in tasks["dets"].reason
    assert tasks["idx"].kind == "integer" and "rows in any order" in tasks["idx"].reason
    assert set(order_free_for(m, tasks)) == {"dets", "idx"}


def test_user_detection_rows_are_compared_in_any_order_by_every_comparison():
    x = helper.make_tensor_value_info("x", T.FLOAT, [8, 6])
    m = _model([helper.make_node("Identity", ["x"], ["rows"])], [_out("rows", shape=[8, 6])], inputs=(x,))
    assert _tasks(m)["rows"].kind == "regression"
    chosen = output_tasks(m, {"rows": "detection"})
    assert chosen["rows"].kind == "detection" and "inferred: regression" in chosen["rows"].reason
    free = order_free_for(m, chosen)
    ref = rng.uniform(0, 100, (8, 6)).astype(np.float32)
    got = ref[::-1].copy()
    assert not compare_outputs({"rows": ref}, {"rows": got})                       # element-wise: differs
    assert compare_outputs({"rows": ref}, {"rows": got}, order_free=free, tasks=chosen)


def test_task_options_are_checked():
    assert parse_task_options(["prob=classification", "a=b=detection"]) == {"prob": "classification",
                                                                            "a=b": "detection"}
    with pytest.raises(StudioError, match="OUTPUT=KIND"):
        parse_task_options(["classification"])
    with pytest.raises(StudioError, match="one of classification"):
        parse_task_options(["prob=classifier"])
    nodes, inits = _trunk(2)
    m = _model(nodes, [_out("z", shape=["N", 2])], inits)
    with pytest.raises(StudioError, match="no output 'nope'; its outputs: z"):
        output_tasks(m, {"nope": "classification"})


def test_integer_outputs_never_get_a_cosine_and_empty_outputs_say_why():
    ids = compare_arrays("ids", np.array([1, 2, 3]), np.array([1, 2, 4]))
    assert ids.cosine is None and ids.mode == "exact" and ids.mismatches == 1
    empty = compare_arrays("boxes", np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32))
    assert empty.match and empty.cosine is None and "no values" in empty.note
    nan = compare_arrays("y", np.array([np.nan, np.nan]), np.array([np.nan, np.nan]))
    assert nan.match and nan.cosine is None
    import json

    json.loads(json.dumps(empty.to_dict(), default=str, allow_nan=False))


def test_sample_models_tasks():
    from sample_models.catalog import path_of

    def task(name):
        return next(iter(output_tasks(onnx.load(str(path_of(name)), load_external_data=False)).values()))

    caffe = task("caffe_classifier")
    assert caffe.kind == "classification" and caffe.classes == 2 and "softmax" in caffe.reason
    assert task("imagenet_classifier").classes == 1000
    assert task("yolo_detector").kind == "detection"


def test_jobs_that_get_the_metric_by_name_judge_like_the_task():
    """The INT8 fallback search and NNCF get the metric by name: its options (a one-score classifier's
    threshold, a detection output's layout) travel with it."""
    from passes.quant_tools import task_judge
    from studio.data.metrics import metric_options

    nodes, inits = _trunk(1)
    m = _model(nodes + [helper.make_node("Sigmoid", ["z"], ["out"])], [_out("out", shape=["N", 1])], inits)
    options = metric_options(output_specs(m)[0])
    assert options == {"threshold": 0.5}
    gold, flipped = [{"out": np.array([[0.4]])}], [{"out": np.array([[0.6]])}]
    judge = task_judge({"metric": "top1-agreement", "output": "out", "metric_options": options})
    assert judge(gold, flipped)[0] == 0.0 and judge(gold, gold)[0] == 1.0
    rows = _topk_rows_spec()
    assert metric_options(rows) == {"head": "rows"}


def _topk_rows_spec():
    """[1, 100, 6] TopK rows: shaped like a raw head, judged as rows."""
    x = helper.make_tensor_value_info("x", T.FLOAT, [1, 200, 6])
    nodes = [helper.make_node("ReduceMax", ["x"], ["s"], axes=[2], keepdims=0),
             helper.make_node("TopK", ["s", "k"], ["v", "i"], axis=1),
             helper.make_node("Unsqueeze", ["i", "ax"], ["i3"]), helper.make_node("Tile", ["i3", "rep"], ["i6"]),
             helper.make_node("GatherElements", ["x", "i6"], ["dets"], axis=1)]
    inits = [nh.from_array(np.array([100], np.int64), "k"), nh.from_array(np.array([2], np.int64), "ax"),
             nh.from_array(np.array([1, 1, 6], np.int64), "rep")]
    return output_specs(_model(nodes, [_out("dets", shape=[1, 100, 6])], inits, inputs=(x,)))[0]


def test_topk_rows_shaped_like_a_raw_head_are_matched_as_rows():
    spec = _topk_rows_spec()
    assert task_of(spec) == "detection"
    (metric, *_rest) = metrics_for(spec)
    xy = rng.uniform(0, 200, (100, 2))
    rows = np.concatenate([xy, xy + rng.uniform(10, 40, (100, 2)), rng.uniform(0.3, 0.9, (100, 1)),
                           rng.integers(0, 3, (100, 1))], axis=1)[None].astype(np.float32)
    shuffled = rows[:, rng.permutation(100)]
    assert metric.score("dets", [rows], [shuffled]).value == pytest.approx(1.0)


def _signal_heads(*, det_name: str = "detection", mask_name: str = "segmentation", sigmoid: bool = False):
    """A code-built 1-D signal head (the brainmaze spindle detector's layout): features [N, L, 8] -> a
    per-position one-channel mask [N, L, 1] and 30 slots x (score, centre, width) [N, 30, 3]."""
    s = helper.make_tensor_value_info("s", T.FLOAT, ["N", "L", 8])
    wm = nh.from_array(rng.normal(size=(8, 1)).astype(np.float32), "wm")
    wd = nh.from_array(rng.normal(size=(8, 3)).astype(np.float32), "wd")
    nodes = [helper.make_node("MatMul", ["s", "wm"], ["m0"]),
             helper.make_node("Sigmoid" if sigmoid else "Identity", ["m0"], [mask_name]),
             helper.make_node("ReduceMean", ["s"], ["pool"], axes=[1], keepdims=1),          # [N, 1, 8]
             helper.make_node("Expand", ["pool", "slots"], ["pe"]),                            # [N, 30, 8]
             helper.make_node("MatMul", ["pe", "wd"], [det_name])]
    slots = nh.from_array(np.array([1, 30, 8], np.int64), "slots")
    return _model(nodes, [_out(det_name, shape=["N", 30, 3]), _out(mask_name, shape=["N", "L", 1])],
                  [wm, wd, slots], inputs=(s,), opset=13)


def test_one_dimensional_mask_and_detection_slots_of_a_signal_head():
    """Before: both regression. A one-channel per-position map named as a mask is a mask at the logit's 0 (at
    0.5 after a Sigmoid); [N, slots, 3] named a detection is 1-D detection (score, centre, width)."""
    tasks = output_tasks(_signal_heads())
    assert tasks["segmentation"].kind == "segmentation" and tasks["segmentation"].threshold == 0.0
    assert tasks["detection"].kind == "detection" and "30 slots" in tasks["detection"].reason
    assert output_tasks(_signal_heads(sigmoid=True))["segmentation"].threshold == 0.5
    # the same shapes without the names: no evidence, still regression (xyz points, keypoints [N, 17, 3])
    plain = output_tasks(_signal_heads(det_name="points", mask_name="y"))
    assert plain["points"].kind == "regression" and plain["y"].kind == "regression"


def test_logits_beside_their_softmax_output_take_its_task():
    """Before: [T, N, 4] logits next to probs = softmax(logits) were regression while probs was per-step
    classes; the scores a sibling output's Softmax reads decide the same classes."""
    s = helper.make_tensor_value_info("s", T.FLOAT, ["T", "N", 16])
    w = nh.from_array(rng.normal(size=(16, 4)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["s", "w"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=2)]
    model = _model(nodes, [_out("logits", shape=["T", "N", 4]), _out("probs", shape=["T", "N", 4])], [w],
                   inputs=(s,), opset=13)
    tasks = output_tasks(model)
    assert tasks["probs"].kind == "sequence"
    assert tasks["logits"].kind == "sequence" and tasks["logits"].classes == 4 and "'probs'" in tasks["logits"].reason
    # alone, the same logits stay regression (nothing says they are scores)
    alone = _model(nodes[:1], [_out("logits", shape=["T", "N", 4])], [w], inputs=(s,), opset=13)
    assert output_tasks(alone)["logits"].kind == "regression"
    # a user's choice is kept
    assert output_tasks(model, {"logits": "regression"})["logits"].kind == "regression"
