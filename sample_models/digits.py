"""A small classifier *trained* on real data, with a labelled golden set: INT8 judged by true top-1 accuracy.

Data: scikit-learn's ``load_digits`` (the UCI optical recognition of handwritten digits test set: 1,797
real 8x8 images, pixel values 0..16, 10 classes; shipped inside the scikit-learn wheel, no download).
A seeded permutation (:data:`SEED`) holds out :data:`GOLDEN` digits as the golden set; the other 1,297
train the model, and :data:`CALIBRATION` of those are the INT8 calibration samples (training data, as
deployment practice has it: the golden digits never calibrate).

Model: an MLP, ``input [batch, 1, 8, 8]`` raw pixels (0..16) -> Flatten -> MatMul+Add (64 -> 64) -> Relu
-> MatMul+Add (64 -> 10) -> ``logits [batch, 10]``, trained by full-batch Adam on the softmax
cross-entropy (numpy, float64, one BLAS thread, :data:`EPOCHS` steps, about a second). The weights
are rounded to 1e-4 so the bytes do not depend on the BLAS; the 1/16 pixel scale is folded into the
first weights (exact in binary).

Side file :data:`GOLDEN_FILE`: the studio's JSONL dataset format, one feed dict per line
(``{"input": [[[...8 rows of 8...]]], "label": "7", "part": "evaluation"}``): the golden digits with
their TRUE labels (part ``evaluation``) followed by the calibration digits (part ``calibration``).
``onnx-studio data add`` keeps those parts, so precision calibrates on training digits and reports top-1
accuracy against the true labels on all held-out ones.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper

from sample_models.protos import GraphParts, sample_model

__all__ = ["GOLDEN_FILE", "GOLDEN", "CALIBRATION", "SEED", "digits", "split", "train", "build_digits_classifier",
           "golden_jsonl"]

GOLDEN_FILE = "digits_classifier.golden.jsonl"
GOLDEN = 500               # held-out real digits with their true labels (the field's 500+ golden set)
CALIBRATION = 300          # training digits the INT8 variants calibrate on
SEED = 35
HIDDEN = 64
EPOCHS = 400
LEARNING_RATE = 0.01
WEIGHT_DECAY = 1e-4


def digits() -> tuple[np.ndarray, np.ndarray]:
    """(images [1797, 8, 8] float64 0..16, true labels [1797] int64) as scikit-learn ships them."""
    from sklearn.datasets import load_digits    # heavy import: only when the sample is built

    d = load_digits()
    return np.asarray(d.images, np.float64), np.asarray(d.target, np.int64)


def split(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(golden, train, calibration) indices into the ``n`` digits: a seeded permutation, each sorted;
    calibration is a part of train."""
    perm = np.random.default_rng(SEED).permutation(n)
    golden, train_idx = np.sort(perm[:GOLDEN]), np.sort(perm[GOLDEN:])
    calibration = np.sort(perm[GOLDEN:GOLDEN + CALIBRATION])
    return golden, train_idx, calibration


def train(images: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """The MLP's weights (float64, rounded to 1e-4), trained on ``images`` [N, 8, 8] / ``labels`` [N]."""
    from threadpoolctl import threadpool_limits   # scikit-learn's dependency: one BLAS thread, one order of sums

    rng = np.random.default_rng(SEED)
    x = images.reshape(len(images), 64) / 16.0
    y = np.eye(10)[labels]
    params = [rng.standard_normal((64, HIDDEN)) * np.sqrt(2.0 / 64), np.zeros(HIDDEN),
              rng.standard_normal((HIDDEN, 10)) * np.sqrt(1.0 / HIDDEN), np.zeros(10)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    with threadpool_limits(limits=1):
        for step in range(1, EPOCHS + 1):
            w1, b1, w2, b2 = params
            h = x @ w1 + b1
            a = np.maximum(h, 0.0)
            z = a @ w2 + b2
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            g = (p - y) / len(x)                          # d(mean cross-entropy)/dz
            ga = g @ w2.T
            ga[h <= 0] = 0.0
            grads = [x.T @ ga + WEIGHT_DECAY * w1, ga.sum(0), a.T @ g + WEIGHT_DECAY * w2, g.sum(0)]
            for i, (param, grad) in enumerate(zip(params, grads)):
                m[i] = 0.9 * m[i] + 0.1 * grad
                v[i] = 0.999 * v[i] + 0.001 * grad * grad
                param -= LEARNING_RATE * (m[i] / (1 - 0.9 ** step)) / (np.sqrt(v[i] / (1 - 0.999 ** step)) + 1e-8)
    w1, b1, w2, b2 = (np.round(p, 4) for p in params)
    return {"fc1.weight": w1 / 16.0, "fc1.bias": b1, "fc2.weight": w2, "fc2.bias": b2}


def build_digits_classifier() -> onnx.ModelProto:
    """The trained digits MLP (see module docs)."""
    images, labels = digits()
    _golden, train_idx, _cal = split(len(labels))
    w = train(images[train_idx], labels[train_idx])
    g = GraphParts(SEED)
    nodes = g.nodes
    nodes.append(helper.make_node("Flatten", ["input"], ["/Flatten_output_0"], name="/Flatten", axis=1))
    y = "/Flatten_output_0"
    for i, (layer, relu) in enumerate((("fc1", True), ("fc2", False))):
        wname = g.init(f"onnx::MatMul_{layer}", w[f"{layer}.weight"].astype(np.float32))
        bname = g.init(f"{layer}.bias", w[f"{layer}.bias"].astype(np.float32))
        nodes.append(helper.make_node("MatMul", [y, wname], [f"/{layer}/MatMul_output_0"], name=f"/{layer}/MatMul"))
        out = "logits" if not relu else f"/{layer}/Add_output_0"
        nodes.append(helper.make_node("Add", [bname, f"/{layer}/MatMul_output_0"], [out], name=f"/{layer}/Add"))
        y = out
        if relu:
            nodes.append(helper.make_node("Relu", [y], ["/relu/Relu_output_0"], name="/relu/Relu"))
            y = "/relu/Relu_output_0"
    graph = helper.make_graph(
        nodes, "main_graph",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=g.initializers)
    doc = (f"Handwritten-digit classifier TRAINED on scikit-learn's load_digits (real 8x8 digits, 10 classes): MLP "
           f"64 -> {HIDDEN} (ReLU) -> 10, full-batch Adam {EPOCHS} steps on {len(train_idx)} training digits (numpy, "
           f"seed {SEED}). Input [batch,1,8,8] raw pixel values 0..16 -> logits [batch,10]. Golden set: {GOLDEN} "
           f"held-out digits with their true labels in {GOLDEN_FILE} (plus {CALIBRATION} training digits for "
           f"calibration).")
    return sample_model(graph, 17, doc)


def golden_jsonl() -> str:
    """The golden digits (true labels, part evaluation), then the calibration digits (part calibration),
    one JSON feed dict per line in the studio's dataset format."""
    images, labels = digits()
    golden, _train, calibration = split(len(labels))
    lines = []
    for part, idx in (("evaluation", golden), ("calibration", calibration)):
        for i in idx:
            pixels = images[i].astype(np.int64).tolist()          # 0..16, exact
            lines.append(json.dumps({"input": [pixels], "label": str(int(labels[i])), "part": part,
                                     "digit": int(i)}, separators=(",", ":")))
    return "\n".join(lines) + "\n"
