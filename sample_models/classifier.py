"""Image classifiers for datasets, preprocessing and accuracy-aware INT8.

``image_classifier``: its INT8 version loses top-1 unless one layer stays in float.
One channel after the first conv is scaled by 3000 (an activation outlier, as
in real CNNs after a bad BN fold), while the logits depend on the other small
channels: a per-tensor INT8 scale fit to the outlier leaves them a few levels,
so plain INT8 flips top-1; keeping that tensor in float (accuracy-aware INT8)
restores it. Input ``x[1, 3, 64, 64]`` (ImageNet-normalized RGB), ``logits[1, 5]``.

``caffe_classifier``: a Caffe-style 2-class classifier (NHWC, BGR pixels 0..255 minus
the mean, softmax ``prob[N, 2]``) whose decisions follow the colour statistics of the
bundled photos, so a wrong recipe changes them; its recipe file is
``caffe_classifier.recipe.json``. ``imagenet_classifier``: a 1000-class NCHW classifier
taking ImageNet-normalized RGB, no normalization in its graph.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from sample_models.protos import sample_model


def build_image_classifier() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    w1 = rng.normal(0, 0.5, (8, 3, 3, 3)).astype(np.float32)
    scale = np.ones((1, 8, 1, 1), np.float32)
    scale[0, 0] = 3000.0
    w2 = rng.normal(0, 1, (5, 8, 1, 1)).astype(np.float32)
    w2[:, 0] = 1e-6
    nodes = [helper.make_node("Conv", ["x", "features.0.weight"], ["/features.0/Conv_output_0"], strides=[2, 2],
                              pads=[1, 1, 1, 1], kernel_shape=[3, 3], name="/features.0/Conv"),
             helper.make_node("Relu", ["/features.0/Conv_output_0"], ["/features.1/Relu_output_0"],
                              name="/features.1/Relu"),
             helper.make_node("Mul", ["/features.1/Relu_output_0", "features.2.scale"], ["/features.2/Mul_output_0"],
                              name="/features.2/Mul"),
             helper.make_node("Conv", ["/features.2/Mul_output_0", "head.weight"], ["/head/Conv_output_0"],
                              kernel_shape=[1, 1], name="/head/Conv"),
             helper.make_node("GlobalAveragePool", ["/head/Conv_output_0"], ["/pool/GlobalAveragePool_output_0"],
                              name="/pool/GlobalAveragePool"),
             helper.make_node("Flatten", ["/pool/GlobalAveragePool_output_0"], ["logits"], name="/Flatten")]
    g = helper.make_graph(nodes, "main_graph", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 5])],
                          [numpy_helper.from_array(w1, "features.0.weight"),
                           numpy_helper.from_array(scale, "features.2.scale"),
                           numpy_helper.from_array(w2, "head.weight")])
    model = sample_model(g, 17, "Image classifier with an activation-outlier channel: plain INT8 loses "
                                "top-1, accuracy-aware INT8 keeps it. x[1,3,64,64] -> logits[1,5].")
    return model


# Caffe-style 2-class classifier --------------------------------------------------------------
# Features of the preprocessed input (B, G, R minus the Caffe mean, NHWC): the mean of R - B
# ("warmth"), the mean brightness, and the mean absolute deviation of both ("contrast"). The
# head scores warmth - 0.5 * brightness contrast against a threshold of 18, a line drawn
# between the bundled photos under the right recipe (center-crop to 64x64, BGR 0..255 minus
# 103.939/116.779/123.68): chelsea 35..42 and coffee 62..72 (class 1, "warm and calm") against
# astronaut 0..3 and rocket -69..-64 (class 0). Under ImageNet normalization every score
# collapses to about -18 (all class 0); with RGB instead of BGR, warmth changes sign (chelsea
# and coffee fall to class 0): a wrong recipe changes the predictions, as on a real Caffe model.
CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)
CAFFE_SIDE = 64
CAFFE_THRESHOLD = 18.0
CAFFE_LOGIT_SCALE = 0.1
CAFFE_RECIPE = {"resize": "center-crop", "size": None, "scale": 1.0, "mean": list(CAFFE_MEAN_BGR),
                "std": [1.0, 1.0, 1.0], "color": "BGR", "layout": "NHWC", "dtype": "auto",
                "interpolation": "bilinear", "pad_value": 114.0, "crop_ratio": 0.875, "preset": "custom"}


def build_caffe_classifier() -> onnx.ModelProto:
    k = CAFFE_LOGIT_SCALE
    colour = np.array([[-1.0, 0.0, 1.0], [1 / 3, 1 / 3, 1 / 3]], np.float32).reshape(2, 3, 1, 1)   # B, G, R
    fc_w = np.array([[-1.0, 0.0, 0.0, 0.5], [1.0, 0.0, 0.0, -0.5]], np.float32) * np.float32(k)
    fc_b = np.array([CAFFE_THRESHOLD, -CAFFE_THRESHOLD], np.float32) * np.float32(k)
    nodes = [helper.make_node("Transpose", ["data"], ["/Transpose_output_0"], perm=[0, 3, 1, 2], name="/Transpose"),
             helper.make_node("Conv", ["/Transpose_output_0", "colour.weight"], ["/colour/Conv_output_0"],
                              kernel_shape=[1, 1], name="/colour/Conv"),
             helper.make_node("GlobalAveragePool", ["/colour/Conv_output_0"], ["/mean/GlobalAveragePool_output_0"],
                              name="/mean/GlobalAveragePool"),
             helper.make_node("Sub", ["/colour/Conv_output_0", "/mean/GlobalAveragePool_output_0"],
                              ["/contrast/Sub_output_0"], name="/contrast/Sub"),
             helper.make_node("Abs", ["/contrast/Sub_output_0"], ["/contrast/Abs_output_0"], name="/contrast/Abs"),
             helper.make_node("GlobalAveragePool", ["/contrast/Abs_output_0"],
                              ["/contrast/GlobalAveragePool_output_0"], name="/contrast/GlobalAveragePool"),
             helper.make_node("Concat", ["/mean/GlobalAveragePool_output_0", "/contrast/GlobalAveragePool_output_0"],
                              ["/Concat_output_0"], axis=1, name="/Concat"),
             helper.make_node("Flatten", ["/Concat_output_0"], ["/Flatten_output_0"], name="/Flatten"),
             helper.make_node("Gemm", ["/Flatten_output_0", "fc.weight", "fc.bias"], ["/fc/Gemm_output_0"],
                              transB=1, name="/fc/Gemm"),
             helper.make_node("Softmax", ["/fc/Gemm_output_0"], ["prob"], axis=1, name="/Softmax")]
    g = helper.make_graph(nodes, "main_graph",
                          [helper.make_tensor_value_info("data", TensorProto.FLOAT,
                                                         ["batch", CAFFE_SIDE, CAFFE_SIDE, 3])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["batch", 2])],
                          [numpy_helper.from_array(colour, "colour.weight"), numpy_helper.from_array(fc_w, "fc.weight"),
                           numpy_helper.from_array(fc_b, "fc.bias")])
    model = sample_model(g, 17, "Caffe-style 2-class classifier: data[N,64,64,3] NHWC, BGR pixels 0..255 "
                                "minus the mean 103.939,116.779,123.68 (outside the graph) -> prob[N,2] "
                                "softmax (1 = warm and calm, 0 = cool or busy).")
    for key, value in (("mean_values", "103.939,116.779,123.68"), ("color_order", "BGR"),
                       ("names", "{0: 'cool or busy', 1: 'warm and calm'}")):
        model.metadata_props.add(key=key, value=value)
    return model


# 1000-class ImageNet-style classifier -------------------------------------------------------
# The pooled features are standardized with their mean and spread over the bundled photos
# (ImageNet recipe; rounded literals below, as a folded BatchNorm), and the head's seed was
# picked so that the four subjects get four different classes with a top-1 margin of at
# least 0.23 logits (about a quarter of the logits' spread): fp16 keeps every decision, plain
# per-tensor INT8 flips a few (2 of the 6 evaluation photos here) and int8-mixed keeps them.
IMAGENET_FEATURE_MEAN = (0.187, 0.664, 0.522, 0.149, 0.905, 0.255, 0.532, 0.08, 0.613, 0.636, 0.185, 0.234, 0.358,
                         1.037, 0.618, 0.98, 0.023, 0.01, 0.563, 0.499, 0.813, 0.053, 0.323, 0.162, 1.236, 0.183,
                         0.066, 0.364, 0.383, 0.038, 1.295, 0.216)
IMAGENET_FEATURE_STD = (0.176, 0.148, 0.372, 0.135, 0.551, 0.139, 0.247, 0.059, 0.371, 0.251, 0.264, 0.182, 0.218,
                        0.467, 0.39, 0.606, 0.04, 0.011, 0.456, 0.556, 0.34, 0.029, 0.144, 0.089, 0.912, 0.192, 0.094,
                        0.323, 0.15, 0.026, 0.505, 0.201)
IMAGENET_HEAD_SEED = 155


def build_imagenet_classifier() -> onnx.ModelProto:
    """input[1,3,224,224] (ImageNet-normalized RGB, NCHW, no normalization in the graph) ->
    logits[1,1000]: two strided convs, global pooling, standardization and a 1000-way head."""
    rng = np.random.default_rng(1000)
    w1 = (rng.standard_normal((16, 3, 3, 3)) * np.sqrt(2 / 27)).astype(np.float32)
    b1 = (rng.standard_normal(16) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((32, 16, 3, 3)) * np.sqrt(2 / 144)).astype(np.float32)
    b2 = (rng.standard_normal(32) * 0.1).astype(np.float32)
    fc_w = (np.random.default_rng(IMAGENET_HEAD_SEED).standard_normal((1000, 32)) * np.sqrt(1 / 32)).astype(np.float32)
    fc_b = np.zeros(1000, np.float32)
    mean = np.asarray(IMAGENET_FEATURE_MEAN, np.float32).reshape(1, 32)
    std = np.asarray(IMAGENET_FEATURE_STD, np.float32).reshape(1, 32)
    nodes = [helper.make_node("Conv", ["input", "features.0.weight", "features.0.bias"], ["/features.0/Conv_output_0"],
                              kernel_shape=[3, 3], strides=[4, 4], pads=[1, 1, 1, 1], name="/features.0/Conv"),
             helper.make_node("Relu", ["/features.0/Conv_output_0"], ["/features.1/Relu_output_0"],
                              name="/features.1/Relu"),
             helper.make_node("Conv", ["/features.1/Relu_output_0", "features.2.weight", "features.2.bias"],
                              ["/features.2/Conv_output_0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              name="/features.2/Conv"),
             helper.make_node("Relu", ["/features.2/Conv_output_0"], ["/features.3/Relu_output_0"],
                              name="/features.3/Relu"),
             helper.make_node("GlobalAveragePool", ["/features.3/Relu_output_0"],
                              ["/avgpool/GlobalAveragePool_output_0"], name="/avgpool/GlobalAveragePool"),
             helper.make_node("Flatten", ["/avgpool/GlobalAveragePool_output_0"], ["/Flatten_output_0"],
                              name="/Flatten"),
             helper.make_node("Sub", ["/Flatten_output_0", "norm.mean"], ["/norm/Sub_output_0"], name="/norm/Sub"),
             helper.make_node("Div", ["/norm/Sub_output_0", "norm.std"], ["/norm/Div_output_0"], name="/norm/Div"),
             helper.make_node("Gemm", ["/norm/Div_output_0", "fc.weight", "fc.bias"], ["logits"], transB=1,
                              name="/fc/Gemm")]
    g = helper.make_graph(nodes, "main_graph",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])],
                          [numpy_helper.from_array(w1, "features.0.weight"),
                           numpy_helper.from_array(b1, "features.0.bias"),
                           numpy_helper.from_array(w2, "features.2.weight"),
                           numpy_helper.from_array(b2, "features.2.bias"),
                           numpy_helper.from_array(mean, "norm.mean"), numpy_helper.from_array(std, "norm.std"),
                           numpy_helper.from_array(fc_w, "fc.weight"), numpy_helper.from_array(fc_b, "fc.bias")])
    model = sample_model(g, 17, "1000-class ImageNet-style classifier: input[1,3,224,224] ImageNet-normalized "
                                "RGB (NCHW) -> logits[1,1000]; the bundled photos get four classes.")
    return model
