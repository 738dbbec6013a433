"""Golden outputs once, then every version x engine judged by task metrics on real images."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio.data.datasets import import_dataset
from studio.data.evaluate import evaluate, golden_outputs
from studio.data.metrics import METRICS, parse_target
from tests.photos import photo_folder
from tests.requirements import require_module

require_module("skimage.data")


def _classifier(path):
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.normal(0, 0.5, (8, 5)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1], name="/conv/Conv"),
             helper.make_node("Relu", ["c"], ["r"], name="/relu/Relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="/pool/GlobalAveragePool"),
             helper.make_node("Flatten", ["p"], ["f"], name="/Flatten"),
             helper.make_node("MatMul", ["f", "fc"], ["logits"], name="/fc/MatMul")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 5])], [w, fc])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _topk_detector(path):
    """Scores with exact ties inside the top 20 (none at its boundary), TopK sorted=0:
    engines return the same 20 rows in different orders."""
    n, k = 200, 20
    rng = np.random.default_rng(0)
    boxes = rng.uniform(0, 100, (n, 4)).astype(np.float32)
    boxes[:, 2:] += boxes[:, :2] + 5
    bias = rng.uniform(0, 0.5, n).astype(np.float32)
    bias[rng.choice(n, k, replace=False)] = np.repeat([1.0, 0.9], k // 2)
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[1, 2, 3], keepdims=0, name="/mean"),
             helper.make_node("Mul", ["m", "w"], ["s0"], name="/mul"),
             helper.make_node("Add", ["s0", "bias"], ["scores"], name="/add"),
             helper.make_node("TopK", ["scores", "k"], ["vals", "idx"], axis=0, sorted=0, name="/topk"),
             helper.make_node("Gather", ["boxes", "idx"], ["b"], axis=0, name="/gather"),
             helper.make_node("Unsqueeze", ["vals", "one"], ["v1"], name="/unsq"),
             helper.make_node("Concat", ["b", "v1"], ["dets"], axis=1, name="/concat")]
    inits = [numpy_helper.from_array(np.zeros(n, np.float32), "w"), numpy_helper.from_array(bias, "bias"),
             numpy_helper.from_array(np.array([k], np.int64), "k"), numpy_helper.from_array(boxes, "boxes"),
             numpy_helper.from_array(np.array([1], np.int64), "one")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                          [helper.make_tensor_value_info("dets", TensorProto.FLOAT, [k, 5])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return photo_folder(tmp_path_factory.mktemp("photos") / "p", n_per_class=2)


def test_golden_once_then_openvino_judged_by_top1(photos, tmp_path):
    model = _classifier(tmp_path / "cls.onnx")
    ds = import_dataset(photos, tmp_path / "data", model=onnx.load(model), calibration_fraction=0.0)
    golden = golden_outputs(ds, model)
    assert len(golden.outputs) == 6 and "graph optimizations off" in golden.reference
    stored = sorted(p.suffix for p in (ds.folder / "golden").iterdir())
    assert stored == [".json", ".npz"]
    again = golden_outputs(ds, model)            # read back, not re-run
    assert all(np.array_equal(a["logits"], b["logits"]) for a, b in zip(golden.outputs, again.outputs))
    report = evaluate(ds, golden, model, engine="openvino", target=parse_target("top1-agreement>=0.99"))
    assert report.target_met is True and report.metric("top1-agreement").value == 1.0
    assert report.outputs[0].task == "classification"
    assert report.to_dict()["target"] == "top1-agreement>=0.99"


def test_topk_detector_equal_by_box_matching_unequal_elementwise(photos, tmp_path):
    model = _topk_detector(tmp_path / "det.onnx")
    ds = import_dataset(photos, tmp_path / "data", model=onnx.load(model), calibration_fraction=0.0)
    golden = golden_outputs(ds, model, limit=2)
    report = evaluate(ds, golden, model, engine="openvino", metrics={"dets": ["map50", "max-abs"]})
    assert report.metric("map50").value == pytest.approx(1.0)
    assert report.metric("max-abs").value > 1.0       # the same rows, in another order
    assert parse_target("map-drop<=0.01").met(report.metric("map50"))
    assert METRICS["map50"].applies_to(golden.specs[0])
