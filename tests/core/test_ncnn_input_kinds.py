"""ncnn's converter pnnx has no inputshape for a bool input or a scalar (rank-0) one: the check says so in one
line naming the input, before pnnx runs, instead of pnnx's own garble.

Found on held-out corpus models: romanizer_fa_encoder (src_mask bool[batch, src_len]) gave "pnnx refused the
model (exit 255): input_shapes[1] expect [?,?unsupported tensor elem data type 9", and silero_vad_v4_legacy
(sr int64 scalar) "input_shape expect 4 tensors but got 3", which reads as if the studio passed a wrong shape.
Reproduced on code-built models; the oracle is pnnx itself, run by hand on them (it refuses both)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests.requirements import require_engine


@pytest.fixture(scope="module")
def ncnn_here():
    require_engine("ncnn")


def _model(second: onnx.ValueInfoProto, use: list[onnx.NodeProto]) -> onnx.ModelProto:
    nodes = [*use, h.make_node("Relu", ["x"], ["r"]), h.make_node("Mul", ["r", "k"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 8]), second],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 8])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def bool_input() -> onnx.ModelProto:
    return _model(h.make_tensor_value_info("mask", T.BOOL, [1, 8]), [h.make_node("Cast", ["mask"], ["k"], to=T.FLOAT)])


def scalar_input() -> onnx.ModelProto:
    return _model(h.make_tensor_value_info("rate", T.INT64, []), [h.make_node("Cast", ["rate"], ["k"], to=T.FLOAT)])


@pytest.mark.parametrize("build,name,kind", [(bool_input, "mask", "bool"), (scalar_input, "rate", "scalar")])
def test_ncnn_check_names_the_input_pnnx_cannot_take(ncnn_here, tmp_path, build, name, kind):
    from diagnostics.compatibility import check_model
    from studio.core.model import load as load_model

    path = tmp_path / "m.onnx"
    onnx.save(build(), str(path))
    report = check_model(load_model(path), ["ncnn"])
    verdict = next(v for v in report.verdicts if v.engine == "ncnn")
    assert verdict.verdict == "fails"
    text = verdict.summary
    assert f"'{name}'" in text and kind in text and "\n" not in text, text
