"""RELIABILITY R39 models: seeded inputs they cannot take. The studio's own inputs (16 samples,
random small integers) are too short for a reflect Pad, not a multiple a Reshape hard-codes, or the
wrong sample rate for an If (tests/reliability/test_seeded_input_verdicts.py, the Compatibility page)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def _model(nodes, inputs, outputs, inits=()):
    m = h.make_model(h.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _const(name, array):
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(array), name + "_v"))


def _stft_nodes(x, out, p=""):
    """Silero-style front end: [N, L] -> Unsqueeze -> reflect Pad 64 -> Conv k=256 s=128 -> mean."""
    w = np.random.default_rng(0).standard_normal((8, 1, 256)).astype(np.float32)
    return [_const(p + "ax", np.array([1], np.int64)), _const(p + "pads", np.array([0, 0, 64, 0, 0, 64], np.int64)),
            _const(p + "w", w),
            h.make_node("Unsqueeze", [x, p + "ax"], [p + "u"], name=p + "unsqueeze"),
            h.make_node("Pad", [p + "u", p + "pads"], [p + "padded"], name=p + "pad", mode="reflect"),
            h.make_node("Conv", [p + "padded", p + "w"], [p + "frames"], name=p + "stft", strides=[128],
                        kernel_shape=[256]),
            h.make_node("ReduceMean", [p + "frames"], [out], name=p + "mean", axes=[2], keepdims=0)]


def _reshape_nodes(x, out, width, p=""):
    return [_const(p + "shape", np.array([-1, width], np.int64)),
            h.make_node("Reshape", [x, p + "shape"], [out], name=p + "frames")]


def silero_like():
    return _model(_stft_nodes("input", "y"), [h.make_tensor_value_info("input", T.FLOAT, [None, None])],
                  [h.make_tensor_value_info("y", T.FLOAT, [None, 8])])


def framed_by_80():
    return _model(_reshape_nodes("x", "y", 80), [h.make_tensor_value_info("x", T.FLOAT, [None, None])],
                  [h.make_tensor_value_info("y", T.FLOAT, [None, 80])])


def _if_model(cond_op, then_nodes, else_nodes, x_shape, picked=False):
    """If(cond_op(sr, 16000)); ``picked``: sr reaches the comparison as torch's dynamo exporter writes it,
    Reshape([-1]) -> Gather(0)."""
    then = h.make_graph(then_nodes, "then", [], [h.make_tensor_value_info("t_out", T.FLOAT, None)])
    other = h.make_graph(else_nodes, "else", [], [h.make_tensor_value_info("e_out", T.FLOAT, None)])
    pick = [_const("flat", np.array([-1], np.int64)), _const("first", np.array(0, np.int64)),
            h.make_node("Reshape", ["sr", "flat"], ["sr_1d"], name="sr_flat"),
            h.make_node("Gather", ["sr_1d", "first"], ["sr_0"], name="sr_item")] if picked else []
    nodes = pick + [_const("rate", np.array(16000, np.int64)),
                    h.make_node(cond_op, ["sr_0" if picked else "sr", "rate"], ["cond"], name="cmp"),
                    h.make_node("If", ["cond"], ["y"], name="branch", then_branch=then, else_branch=other)]
    return _model(nodes, [h.make_tensor_value_info("input", T.FLOAT, x_shape),
                          h.make_tensor_value_info("sr", T.INT64, [])],
                  [h.make_tensor_value_info("y", T.FLOAT, [None, None])])


def vad_with_sample_rate():
    """If(Equal(sr, 16000)): the 16 kHz front end; any other rate: a Reshape that never fits."""
    return _if_model("Equal", _stft_nodes("input", "t_out", "t_"), _reshape_nodes("input", "e_out", 7, "e_"),
                     [None, None])


def vad_with_picked_rate():
    """vad_with_sample_rate with ``sr == 16000`` as the dynamo exporter writes it (corpus
    silero_vad_op18_ifless): Reshape([-1]) -> Gather(0) -> Equal."""
    return _if_model("Equal", _stft_nodes("input", "t_out", "t_"), _reshape_nodes("input", "e_out", 7, "e_"),
                     [None, None], picked=True)


def rate_below_16k_fails():
    """If(Less(sr, 16000)) takes a branch that fails on any length the studio tries."""
    return _if_model("Less", _reshape_nodes("input", "t_out", 7, "t_"),
                     [h.make_node("Identity", ["input"], ["e_out"])], [1, "samples"])


def framed_by_7():
    """Reshape to [-1, 7]: no searched length (16, 512, 1024, 4096, 16000, batch 1 or 2) is a multiple of 7."""
    return _model(_reshape_nodes("x", "y", 7), [h.make_tensor_value_info("x", T.FLOAT, [None, None])],
                  [h.make_tensor_value_info("y", T.FLOAT, [None, 7])])


def hidden_gather():
    """Gather rows of a 3-row input by ids that must be < 3 (no initializer tells the studio)."""
    return _model([h.make_node("Gather", ["table", "ids"], ["y"], name="lookup", axis=0)],
                  [h.make_tensor_value_info("table", T.FLOAT, [3, 4]), h.make_tensor_value_info("ids", T.INT64, ["n"])],
                  [h.make_tensor_value_info("y", T.FLOAT, ["n", 4])])


def fixed_size_reshape():
    """Fixed-shape float input: nothing about the inputs was the studio's choice, so this fails."""
    return _model(_reshape_nodes("x", "y", 7), [h.make_tensor_value_info("x", T.FLOAT, [1, 16])],
                  [h.make_tensor_value_info("y", T.FLOAT, [None, 7])])


def wide_conv_over_samples() -> onnx.ModelProto:
    """An STFT as a 64-wide Conv over a free 'samples' dim (corpus oww_melspectrogram's front end is 512 wide):
    the studio's guessed 32 samples are too short, 256 run (issue 34's sweep: profile, precision --inputs, fp16)."""
    w = nh.from_array(np.ones((4, 1, 64), np.float32) / 64, "w")
    return _model([h.make_node("Conv", ["x", "w"], ["y"], name="stft")],
                  [h.make_tensor_value_info("x", T.FLOAT, [1, 1, "samples"])],
                  [h.make_tensor_value_info("y", T.FLOAT, [1, 4, "frames"])], [w])


def reflect_pad_over_free_length() -> onnx.ModelProto:
    """Silero VAD's STFT front: audio [?, ?] reflect-padded by 64 each side, then a strided Conv. The seeded
    16 samples are too few for the original (ONNX Runtime refuses them); 512 run (converted check, precision)."""
    w = nh.from_array(np.random.default_rng(0).normal(size=(4, 1, 8)).astype(np.float32), "w")
    pads = nh.from_array(np.array([0, 0, 64, 0, 0, 64], np.int64), "pads")
    shape = nh.from_array(np.array([0, 1, -1], np.int64), "shp")
    return _model([h.make_node("Reshape", ["input", "shp"], ["x3"]),
                   h.make_node("Pad", ["x3", "pads"], ["p"], mode="reflect"),
                   h.make_node("Conv", ["p", "w"], ["y"], strides=[4])],
                  [h.make_tensor_value_info("input", T.FLOAT, [None, None])],
                  [h.make_tensor_value_info("y", T.FLOAT, [1, 4, None])], [w, pads, shape])
