"""fuse-conv-bn: BatchNormalization folds into Conv, ConvTranspose, Gemm and
2-D MatMul; the records name the BatchNormalization as "fused"."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.passes.pass_helpers import check_applies, check_skips

RNG = np.random.default_rng(0)


def _bn_params(c: int, prefix: str = "bn") -> list:
    return [numpy_helper.from_array(RNG.uniform(0.5, 1.5, c).astype(np.float32), f"{prefix}.scale"),
            numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), f"{prefix}.bias"),
            numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), f"{prefix}.mean"),
            numpy_helper.from_array(RNG.uniform(0.5, 2.0, c).astype(np.float32), f"{prefix}.var")]


def _model(producer: helper.NodeProto, weights: list, x_shape, y_shape, extra_nodes=(), extra_outputs=()):
    bn = helper.make_node("BatchNormalization", ["p", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["y"],
                          name="my_bn", epsilon=1e-3)
    c = y_shape[1]
    graph = helper.make_graph([producer, bn, *extra_nodes], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape), *extra_outputs],
                              weights + _bn_params(c))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_conv_bn(tmp_path):
    conv = helper.make_node("Conv", ["x", "w"], ["p"], name="my_conv", pads=[1, 1, 1, 1])
    r = check_applies(tmp_path, _model(conv, [numpy_helper.from_array(_w(8, 3, 3, 3), "w")], [1, 3, 8, 8],
                                       [1, 8, 8, 8]), "fuse-conv-bn", ["Conv"])
    rec = r.records[0]
    fused = [c for c in rec.changes if c.kind == "fused"]
    assert fused and fused[0].nodes == ("my_bn",) and "Conv 'my_conv'" in fused[0].detail
    assert rec.counts["batchnorms_fused"] == 1
    assert rec.params_after == 8 * 3 * 3 * 3 + 8            # BN statistics gone, one bias added


def test_conv_transpose_gemm_and_matmul_bn(tmp_path):
    ct = helper.make_node("ConvTranspose", ["x", "w", "b"], ["p"], group=2)
    check_applies(tmp_path / "ct", _model(ct, [numpy_helper.from_array(_w(4, 3, 2, 2), "w"),
                                               numpy_helper.from_array(_w(6), "b")], [1, 4, 5, 5], [1, 6, 6, 6]),
                  "fuse-conv-bn", ["ConvTranspose"])
    gemm = helper.make_node("Gemm", ["x", "w", "b"], ["p"], transB=1, beta=0.5)
    check_applies(tmp_path / "gemm", _model(gemm, [numpy_helper.from_array(_w(6, 5), "w"),
                                                   numpy_helper.from_array(_w(6), "b")], [3, 5], [3, 6]),
                  "fuse-conv-bn", ["Gemm"])
    mm = helper.make_node("MatMul", ["x", "w"], ["p"])
    check_applies(tmp_path / "mm", _model(mm, [numpy_helper.from_array(_w(5, 6), "w")], [3, 5], [3, 6]),
                  "fuse-conv-bn", ["Gemm"])


def test_not_applied_when_conv_output_is_shared_or_matmul_is_3d(tmp_path):
    conv = helper.make_node("Conv", ["x", "w"], ["p"])
    relu = helper.make_node("Relu", ["p"], ["z"])          # Conv output also used elsewhere
    check_skips(tmp_path / "shared", _model(conv, [numpy_helper.from_array(_w(8, 3, 1, 1), "w")], [1, 3, 4, 4],
                                            [1, 8, 4, 4], [relu],
                                            [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 4, 4])]),
                "fuse-conv-bn")
    mm = helper.make_node("MatMul", ["x", "w"], ["p"])      # [2,3,5] x [5,6]: BN's channel axis is 3, not 6
    r = check_skips(tmp_path / "mm3d", _model(mm, [numpy_helper.from_array(_w(5, 6), "w")], [2, 3, 5], [2, 3, 6]),
                    "fuse-conv-bn")
    assert any("2-D" in n for n in r.records[0].notes)


def test_conv_output_that_is_a_graph_output_is_not_fused(tmp_path):
    """R30: intermediate = graph output."""
    conv = helper.make_node("Conv", ["x", "w"], ["p"])
    check_skips(tmp_path, _model(conv, [numpy_helper.from_array(_w(8, 3, 1, 1), "w")], [1, 3, 4, 4], [1, 8, 4, 4],
                                 (), [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 8, 4, 4])]),
                "fuse-conv-bn")
