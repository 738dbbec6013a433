"""Inputs that declare ``dim_value -1`` for "any size" (paddle2onnx: corpus rapidocr_ppocrv3_det/_rec and
rapidocr_ppocr_mobile_v2_cls declare x [-1, 3, ?, ?]).

ONNX Runtime and OpenVINO read a negative dim as unknown, and so does the studio (``core.types``), but
onnx2tf took the -1 for a static size: ``check --engines litert`` on those models failed with TensorFlow's
"ValueError: Dimension -1 must be >= 0", naming neither the input nor a fix. And the ``-ois`` shapes the studio
gives are applied by onnx2tf only through onnxsim, which ``-nuo`` turns off: the converter's private copy now
has its -1/0 dims made unnamed (``core.types.clear_unknown_dims``) and the run's shapes written into its inputs.
A code-built Conv model with the same trap; the oracle is plain onnxruntime (and the check's own comparison
with it). A dim_value 0 stays 0 for the studio: ONNX Runtime refuses any other size there."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from studio import api
from studio.core.engines.litert_convert import _private_copy, onnx_output_shapes
from studio.core.types import clear_unknown_dims, value_info
from tests.requirements import require_engine


def _paddle_style(first: int = -1) -> onnx.ModelProto:
    """x f32[first, 3, -1, -1] -> Conv 3x3 (pad 1) -> Relu -> y f32[first, 4, -1, -1]."""
    w = nh.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.2, "w")
    b = nh.from_array(np.linspace(-0.1, 0.1, 4, dtype=np.float32), "b")
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             h.make_node("Relu", ["c"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [first, 3, -1, -1])],
                     [h.make_tensor_value_info("y", T.FLOAT, [first, 4, -1, -1])], [w, b])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_minus_one_is_read_as_unknown_by_ort_and_the_studio():
    m = _paddle_style()
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [-1, 3, -1, -1]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.ones((2, 3, 8, 12), np.float32)})[0].shape == (2, 4, 8, 12)
    assert value_info(m.graph.input[0]).shape == (None, 3, None, None)


def test_clear_unknown_dims_makes_them_unnamed():
    m = _paddle_style()
    assert clear_unknown_dims(m) == ["x[0]=-1", "x[2]=-1", "x[3]=-1"]
    for vi in (m.graph.input[0], m.graph.output[0]):
        dims = vi.type.tensor_type.shape.dim
        assert [d.HasField("dim_value") for d in dims] == [False, True, False, False]
        assert not any(d.dim_param for d in dims)
    assert clear_unknown_dims(m) == []


def test_converter_copy_is_static_at_the_run_shapes(tmp_path):
    src, dest = tmp_path / "m.onnx", tmp_path / "copy.onnx"
    onnx.save(_paddle_style(), str(src))
    assert _private_copy(src, dest, {"x": (1, 3, 8, 12)}) == ["x[0]=-1", "x[2]=-1", "x[3]=-1"]
    copy = onnx.load(str(dest))
    assert [d.dim_value for d in copy.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 8, 12]
    assert [d.HasField("dim_value") for d in copy.graph.output[0].type.tensor_type.shape.dim] == [False, True, False,
                                                                                                  False]


def test_zero_dim_is_what_ort_enforces():
    m = _paddle_style(first=0)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    try:
        sess.run(None, {"x": np.ones((1, 3, 8, 12), np.float32)})
    except Exception as exc:  # noqa: BLE001 - ORT's own refusal is the oracle
        assert "invalid dimensions" in str(exc)
    else:
        raise AssertionError("ONNX Runtime ran a size-1 feed on a dim_value 0 axis")
    assert value_info(m.graph.input[0]).shape == (0, 3, None, None)


def test_output_shapes_at_fixed_inputs_despite_declared_minus_one():
    """The LiteRT runner restores channels-first outputs from these shapes: a declared -1 output is no conflict."""
    assert onnx_output_shapes(_paddle_style(), {"x": (1, 3, 8, 12)}) == {"y": (1, 4, 8, 12)}


def test_litert_check_runs_a_model_with_minus_one_dims(tmp_path):
    require_engine("litert")
    path = tmp_path / "paddle_style.onnx"
    onnx.save(_paddle_style(), str(path))
    report = api.check(api.load(path), "litert")
    v = report.verdict("litert")
    assert v.verdict == "runs", (v, [f.message for f in report.findings])
    assert v.decided_by == "real session"
    # the check compares LiteRT's outputs with ONNX Runtime's on the same feeds: no mismatch
    assert not [f for f in report.findings if f.code in ("LITERT-MISMATCH", "LITERT-UNSUPPORTED")]


def test_only_inputs_declaring_minus_one_get_static_shapes_and_never_an_empty_one(tmp_path):
    """onnx2tf's copy gets the run's shapes only in the inputs that declared -1/0. A decoder's prefill (past
    length 0) written as a static 0 sent onnx2tf's transpose search on for 10 minutes and more (llama_optimum,
    the agreement sweep's LiteRT case), and seeded sizes written into a named dim that does not fit the model
    (frames of 7 fed 16) failed the conversion where only those inputs cannot run (R39's "compiles, not run")."""
    from onnx import TensorProto, helper

    from studio.core.engines.litert_convert import _private_copy

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3])
    past = helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, 2, "past_len", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x, past], [y]),
                          opset_imports=[helper.make_opsetid("", 13)])
    src = tmp_path / "m.onnx"
    onnx.save(m, src)

    def dims(path):
        return {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
                for i in onnx.load(path).graph.input}

    _private_copy(src, tmp_path / "empty.onnx", {"x": (1, 3), "past": (1, 2, 0, 8)})
    assert dims(tmp_path / "empty.onnx") == {"x": [0, 3], "past": [1, 2, "past_len", 8]}    # x's -1: unnamed (0)
    _private_copy(src, tmp_path / "full.onnx", {"x": (1, 3), "past": (1, 2, 5, 8)})
    # x declared -1: the run's shape; past's named dim (and a seeded size that may not fit the model) stays dynamic
    assert dims(tmp_path / "full.onnx") == {"x": [1, 3], "past": [1, 2, "past_len", 8]}
