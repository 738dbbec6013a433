"""R51: accuracy-aware INT8 reverts exactly the layer that is sensitive, on NNCF and on ONNX Runtime.

The model is built here: four 3x3 Convs and a MatMul head (a nearest-centroid classifier of
the three photo scenes, fitted on the fp32 features, so top-1 differs across the photos and
has wide margins). One layer, ``conv2``, is made sensitive on purpose: its input has one
channel scaled by 3000 (an activation outlier) that its weights ignore, so a per-tensor INT8
scale on that input leaves the other channels a level or two and every photo collapses onto
one class; every other layer quantizes harmlessly. The assertions read the produced models
(which Convs/MatMuls still have quantizers around them), not only the metric: a model with
every quantizer reverted meets the metric too.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio.data.datasets import dataset_feeds, import_dataset
from studio.data.evaluate import golden_outputs
from studio.data.metrics import parse_target
from tests.conftest import sha256_file
from tests.photos import photo_folder
from tests.precision.quantized_layers import onnx_quantized_layers, ov_quantized_layers

pytest.importorskip("skimage.data")

LAYERS = ("conv0", "conv1", "conv2", "conv3", "fc")      # the Convs and the MatMul head
SENSITIVE = "conv2"


def _model(head: tuple[np.ndarray, np.ndarray] | None = None) -> onnx.ModelProto:
    """x[1,3,64,64] -> four Conv+Relu (conv2 reads the outlier channel) -> GAP -> features[1,16]
    (trunk) or -> MatMul+Add -> logits[1,C] (with ``head`` = (weight, bias))."""
    rng = np.random.default_rng(3)
    inits, nodes = [], []

    def conv(name: str, x: str, stride: int, w: np.ndarray | None = None) -> str:
        cin = 3 if x == "x" else 16
        w = rng.normal(0, (2.0 / (cin * 9)) ** 0.5, (16, cin, 3, 3)).astype(np.float32) if w is None else w
        b = rng.normal(0, 0.1, 16).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.weight"), numpy_helper.from_array(b, f"{name}.bias")])
        nodes.append(helper.make_node("Conv", [x, f"{name}.weight", f"{name}.bias"], [f"{name}_out"], name=name,
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride]))
        nodes.append(helper.make_node("Relu", [f"{name}_out"], [f"{name}_relu"], name=f"{name}_relu"))
        return f"{name}_relu"

    h = conv("conv1", conv("conv0", "x", 2), 2)
    scale = np.ones((1, 16, 1, 1), np.float32)
    scale[0, 0] = 3000.0                                     # the outlier channel
    inits.append(numpy_helper.from_array(scale, "outlier.scale"))
    nodes.append(helper.make_node("Mul", [h, "outlier.scale"], ["outlier_out"], name="outlier"))
    w2 = rng.normal(0, (2.0 / (16 * 9)) ** 0.5, (16, 16, 3, 3)).astype(np.float32)
    w2[:, 0] = 1e-7                                          # ... which conv2 ignores in fp32
    h = conv("conv3", conv("conv2", "outlier_out", 1, w2), 2)
    nodes += [helper.make_node("GlobalAveragePool", [h], ["pool"], name="pool"),
              helper.make_node("Flatten", ["pool"], ["features"], name="flatten")]
    out = helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 16])
    if head is not None:
        w, b = head
        inits += [numpy_helper.from_array(w.astype(np.float32), "fc.weight"),
                  numpy_helper.from_array(b.astype(np.float32), "fc.bias")]
        nodes += [helper.make_node("MatMul", ["features", "fc.weight"], ["fc_out"], name="fc"),
                  helper.make_node("Add", ["fc_out", "fc.bias"], ["logits"], name="fc_bias")]
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, w.shape[1]])
    graph = helper.make_graph(nodes, "sensitive", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [1, 3, 64, 64])], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import onnxruntime as ort

    tmp = tmp_path_factory.mktemp("sensitive")
    trunk = _model()
    ds = import_dataset(photo_folder(tmp / "photos", n_per_class=4), tmp / "data", model=trunk,
                        calibration_fraction=0.5)
    order = (*ds.calibration, *ds.evaluation)
    feeds = dataset_feeds(ds, trunk, part="calibration") + dataset_feeds(ds, trunk, part="evaluation")
    session = ort.InferenceSession(trunk.SerializeToString(), providers=["CPUExecutionProvider"])
    feats = np.concatenate([session.run(None, f)[0] for f in feeds]).astype(np.float64)
    mu, sd = feats.mean(0), feats.std(0) + 1e-6
    z = (feats - mu) / sd
    labels = [ds.samples[i].label for i in order]
    classes = sorted(set(labels))
    centroids = np.stack([z[[lab == c for lab in labels]].mean(0) for c in classes], 1)     # [16, C]
    weight = centroids / sd[:, None]
    model = _model((weight, -mu @ weight - (centroids ** 2).sum(0) / 2))
    path = tmp / "sensitive.onnx"
    onnx.save(model, path)
    golden = golden_outputs(ds, path)
    logits = np.concatenate([g["logits"] for g in golden.outputs])
    top = np.sort(logits, axis=1)
    # The fp32 model is a real classifier of these photos: top-1 varies, with wide margins.
    assert len(set(np.argmax(logits, axis=1).tolist())) >= 2
    assert float(np.min(top[:, -1] - top[:, -2])) > 0.5 * float(np.std(logits))
    return tmp, path, ds, golden


# ---------------------------------------------------------------------------- the tests


def test_plain_int8_is_broken_by_the_sensitive_layer(setup):
    """The premise: plain NNCF INT8 quantizes every layer and loses top-1 on these photos."""
    pytest.importorskip("nncf")
    from studio.data.evaluate import evaluate
    from studio.precision.nncf_int8 import quantize_openvino

    tmp, path, ds, golden = setup
    model = onnx.load(path)
    plain = quantize_openvino(path, dataset_feeds(ds, model, part="calibration"), tmp / "plain")
    assert ov_quantized_layers(plain.ir_path) == dict.fromkeys(LAYERS, True)
    report = evaluate(ds, golden, plain.ir_path, engine="openvino", inputs_model=path,
                      target=parse_target("top1-agreement>=0.99"))
    assert report.target_value is not None and report.target_value <= 0.75


@pytest.mark.slow
def test_nncf_accuracy_control_reverts_exactly_the_sensitive_layer(setup):
    """Ranked on a subset of 2 items (the ones that broke): their golden outputs must be theirs.
    Scoring them against golden[0], golden[1] ranks a harmless layer first and ends with every
    layer reverted (which still meets the metric)."""
    pytest.importorskip("nncf")
    from studio.precision.nncf_int8 import quantize_openvino

    tmp, path, ds, golden = setup
    before = sha256_file(path)
    model = onnx.load(path)
    r = quantize_openvino(path, dataset_feeds(ds, model, part="calibration"), tmp / "aa", mode="accuracy-control",
                          evaluation=dataset_feeds(ds, model, part="evaluation"), golden=list(golden.outputs),
                          metric="top1-agreement", output="logits", max_drop=0.0, ranking_subset=2)
    layers = ov_quantized_layers(r.ir_path)
    assert sorted(n for n, q in layers.items() if not q) == [SENSITIVE]
    assert sum(layers.values()) == len(LAYERS) - 1
    assert r.fp32_metric == 1.0 and r.int8_metric == 1.0
    assert sha256_file(path) == before


@pytest.mark.slow
def test_ort_int8_mixed_reverts_exactly_the_sensitive_layer(setup):
    """ONNX Runtime's INT8 with float fallback, judged by top-1 agreement on the dataset."""
    from studio.precision.variants import evaluate_variants

    tmp, path, ds, _golden = setup
    before = sha256_file(path)
    report = evaluate_variants(path, variants=["int8-mixed"], dataset=ds, target=parse_target("top1-agreement>=0.99"),
                               out_dir=tmp / "ort", latency_budget_s=0.5)
    v = report.variant("int8-mixed")
    assert v.status == "ok" and v.path is not None, (v.error, v.notes)
    layers = onnx_quantized_layers(v.path)
    assert set(layers) == set(LAYERS)
    assert sorted(n for n, q in layers.items() if not q) == [SENSITIVE]
    assert sum(layers.values()) == len(LAYERS) - 1
    assert v.meets_target and v.task is not None
    assert sha256_file(path) == before
