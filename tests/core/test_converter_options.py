"""R56: a converter that refuses a model with its defaults, or converts it to other numbers than
ONNX Runtime's, gets the options its own messages recommend; which options worked is reported
(conversion info, check finding, export manifest) and the converter's advice reaches the finding.

The models are built here: an NHWC classifier (input [1, 32, 32, 3], a Transpose to NCHW and a
Conv, and a Flatten of the raw image, as Keras exports write it) that onnx2tf converts with its
defaults to wrong numbers (it takes the input for NCHW) and correctly with ``-kat``; the same with a
dynamic batch; a detection head ([1, boxes, 4 + classes] into NonMaxSuppression) that onnx2tf
refuses with its defaults; an NHWC Resize that no option rescues. The oracle is a plain
onnxruntime session and a plain ``ai_edge_litert`` interpreter on the written ``.tflite``.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.requirements import require_engine

S = 32   # image side: small, so each onnx2tf run stays short


def _init(a, name):
    return numpy_helper.from_array(np.asarray(a), name)


def _save(model: onnx.ModelProto, path) -> str:
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return str(path)


def nhwc_classifier(batch: int | str = 1) -> onnx.ModelProto:
    """Logits = a conv branch (Transpose NHWC->NCHW, Conv, GAP) + a linear map of the raw, flattened image."""
    rng = np.random.default_rng(0)
    inits = [_init(rng.normal(0, .2, (8, 3, 3, 3)).astype(np.float32), "W"), _init(np.zeros(8, np.float32), "B"),
             _init(rng.normal(0, .2, (8, 10)).astype(np.float32), "Wc"),
             _init(rng.normal(0, .02, (S * S * 3, 10)).astype(np.float32), "Wr")]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "W", "B"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["gf"]), helper.make_node("MatMul", ["gf", "Wc"], ["lc"]),
             helper.make_node("Flatten", ["x"], ["xf"]), helper.make_node("MatMul", ["xf", "Wr"], ["lr"]),
             helper.make_node("Add", ["lc", "lr"], ["l"]), helper.make_node("Softmax", ["l"], ["probs"], axis=-1)]
    graph = helper.make_graph(nodes, "nhwc_classifier",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, S, S, 3])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def nms_head(boxes: int = 100) -> onnx.ModelProto:
    """[1, boxes, 4 + 2 classes] -> boxes / sigmoid scores -> NonMaxSuppression -> selected indices."""
    inits = [_init(np.array([4, 2], np.int64), "split"), _init(np.array([50], np.int64), "max_boxes"),
             _init(np.array([0.5], np.float32), "iou"), _init(np.array([0.3], np.float32), "threshold")]
    nodes = [helper.make_node("Split", ["feat", "split"], ["boxes", "logits"], axis=2),
             helper.make_node("Sigmoid", ["logits"], ["sig"]),
             helper.make_node("Transpose", ["sig"], ["scores"], perm=[0, 2, 1]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_boxes", "iou", "threshold"], ["selected"],
                              name="/head/NonMaxSuppression")]
    graph = helper.make_graph(nodes, "nms_head",
                              [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, boxes, 6])],
                              [helper.make_tensor_value_info("selected", TensorProto.INT64, ["K", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def nhwc_resize() -> onnx.ModelProto:
    """An NHWC image resized on its H and W axes, then Transpose + Conv: onnx2tf refuses it whatever it is given."""
    rng = np.random.default_rng(0)
    inits = [_init(np.array([1, 2, 2, 1], np.float32), "scales"),
             _init(rng.normal(0, .2, (4, 3, 3, 3)).astype(np.float32), "W"), _init(np.zeros(4, np.float32), "B")]
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["up"], mode="linear"),
             helper.make_node("Transpose", ["up"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "W", "B"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "nhwc_resize",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def detections(boxes: int = 100) -> np.ndarray:
    """Boxes that overlap in places (so NMS keeps some and drops some) and class logits."""
    rng = np.random.default_rng(1)
    xy = rng.random((1, boxes, 2)) * 20
    wh = rng.random((1, boxes, 2)) * 20 + 10
    return np.concatenate([xy, xy + wh, rng.normal(0, 2, (1, boxes, 2))], -1).astype(np.float32)


def _ort(path, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _tflite(path, name, value):
    """The written .tflite in a plain LiteRT interpreter, fed as its signature declares."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path)).get_signature_runner()
    (inp,) = runner.get_input_details().values()
    assert tuple(inp["shape"]) == value.shape, inp      # -kat: the input keeps the ONNX layout
    (out,) = runner(**{name: value}).values()
    return np.asarray(out)


# ---------------------------------------------------------------- what is proposed, from onnx2tf's advice

def test_option_sets_follow_the_converters_advice():
    from studio.core.engines.litert_convert import litert_option_sets

    nchw = litert_option_sets({"x": (1, 3, 224, 224)}, {"x": 4}, False, refused=True)
    assert [o.flags for o in nchw] == [("-onnxsim",)]        # no input looks channels-last: no layout option
    assert litert_option_sets({"x": (1, 3, 224, 224)}, {"x": 4}, False, refused=False) == []
    nhwc = litert_option_sets({"x": (1, 224, 224, 3), "k": (1, 5)}, {"x": 4, "k": 2}, False, refused=False)
    assert [o.flags for o in nhwc] == [("-kat", "x"), ("-kt", "x")]
    assert nhwc[0].kwargs == {"keep_shape_absolutely_input_names": ["x"]}
    assert nhwc[1].kwargs == {"keep_nwc_or_nhwc_or_ndhwc_input_names": ["x"]}
    nms = litert_option_sets({"feat": (1, 100, 6)}, {"feat": 3}, True, refused=True, onnxsim=False)
    assert [o.flags for o in nms] == [("-onwdt",), ("-onwdt", "-kat", "feat"), ("-kat", "feat"), ("-kt", "feat")]
    assert nms[1].kwargs == {"output_nms_with_dynamic_tensor": True, "keep_shape_absolutely_input_names": ["feat"]}


def test_advice_lines_and_command_line():
    from studio.core.engines.conversion import converter_advice
    from studio.core.engines.litert_convert import litert_command
    from studio.core.engines.mnn import mnn_option_sets

    # onnx2tf's own closing lines of a failed conversion (colored as it prints them)
    log = ("\x1b[31mERROR:\x1b[0m onnx_op_name: /Conv\n"
           "\x1b[31mERROR:\x1b[0m If the input OP of ONNX before conversion is NHWC or an irregular channel "
           "arrangement other than NCHW, use the -kt or -kat option.\n"
           "\x1b[31mERROR:\x1b[0m Also, for models that include NonMaxSuppression in the post-processing, "
           "try the -onwdt option.\n")
    assert converter_advice(log) == [
        "If the input OP of ONNX before conversion is NHWC or an irregular channel arrangement other than NCHW, "
        "use the -kt or -kat option.",
        "Also, for models that include NonMaxSuppression in the post-processing, try the -onwdt option."]
    assert litert_command("m.onnx", "out", {"x": (1, 8, 8, 3)}, ("-kat", "x")) == \
        ["onnx2tf", "-i", "m.onnx", "-o", "out", "-coion", "-nuo", "-ois", "x:1,8,8,3", "-kat", "x"]
    assert "-nuo" not in litert_command("m.onnx", "out", {}, ("-onnxsim",))
    mnn = mnn_option_sets("you can try set --weightQuantAsymmetric to improve accuracy\n"
                          "MNNModel File Not Set, use --MNNModel XXX.mnn to set it!")
    assert [o.flags for o in mnn] == [("--weightQuantAsymmetric",)]


def test_default_engines_hold_mnn_and_litert_where_installed():
    from studio import api

    require_engine("mnn")
    require_engine("litert")
    assert api.default_engines() == ("onnxruntime", "openvino", "tensorrt", "mnn", "litert")


# ---------------------------------------------------------------- real conversions

@pytest.mark.slow
def test_nhwc_classifier_check_finds_the_option_that_gives_onnx_runtimes_numbers(tmp_path):
    """onnx2tf's defaults give other numbers (the NHWC input taken for NCHW); the check tries -kat,
    which gives ONNX Runtime's, and says so with the command line."""
    from studio import api

    require_engine("litert")
    path = _save(nhwc_classifier(), tmp_path / "nhwc.onnx")
    report = api.check(api.load(path), "litert")
    assert report.verdict("litert").verdict == "runs", report.verdict("litert")
    (found,) = [f for f in report.findings if f.code == "LITERT-CONVERTER-OPTIONS"]
    assert "gave different numbers from ONNX Runtime with its defaults" in found.message, found.message
    assert "converted with -kat x (tried 1 option set(s): -kat x)" in found.message
    assert found.fix_hint == ("convert with these options: "
                              "onnx2tf -i nhwc.onnx -o out -coion -nuo -ois x:1,32,32,3 -kat x")
    assert not [f for f in report.findings if f.code == "LITERT-MISMATCH"]


@pytest.mark.slow
def test_dynamic_batch_nhwc_classifier_exports_with_the_options_in_the_manifest(tmp_path):
    """Export: -ois fixes the batch, -kat the layout; the command that worked is in manifest.json."""
    from studio import api

    require_engine("litert")
    path = _save(nhwc_classifier(batch="N"), tmp_path / "nhwc_dyn.onnx")
    result = api.export(api.load(path), "litert", tmp_path / "bundle")
    target = next(t for t in result.targets if t.target == "litert")
    assert target.status == "passed", target.message
    written = json.loads(next((tmp_path / "bundle").rglob("manifest.json")).read_text())
    text = json.dumps(written)
    assert "-ois x:1,32,32,3 -kat x" in text and "converted with -kat x" in text, text[:2000]
    tflite = next((tmp_path / "bundle").rglob("model.tflite"))
    x = np.random.default_rng(3).random((1, S, S, 3), dtype=np.float32)
    np.testing.assert_allclose(_tflite(tflite, "x", x), _ort(path, {"x": x}), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_nms_head_refused_by_default_converts_with_onwdt(tmp_path):
    """onnx2tf refuses the head with its defaults and with -onwdt alone; -onwdt -kat converts it, and
    the .tflite selects exactly the boxes ONNX Runtime selects."""
    from studio.core.engines import get_engine

    require_engine("litert")
    path = _save(nms_head(), tmp_path / "nms.onnx")
    feat = detections()
    want = _ort(path, {"feat": feat})
    assert 0 < len(want) < 100       # NMS dropped some boxes: a padded output would not match
    conv = get_engine("litert").convert(path, tmp_path / "out" / "nms.tflite", shapes={"feat": (1, 100, 6)},
                                        reference={"feat": feat})
    assert conv.ok, conv.error
    assert conv.options == ("-onwdt", "-kat", "feat")
    assert [a["options"] for a in conv.attempts] == [[], ["-onwdt"], ["-onwdt", "-kat", "feat"]]
    assert not conv.attempts[0]["converted"]
    assert conv.attempts[0]["error"].startswith("onnx2tf fails at node /head/NonMaxSuppression"), conv.attempts
    assert any("try the -onwdt option" in a for a in conv.advice), conv.advice
    assert conv.command[-3:] == ("-onwdt", "-kat", "feat")
    assert "refused its defaults" in conv.search_note
    np.testing.assert_array_equal(_tflite(tmp_path / "out" / "nms.tflite", "feat", feat), want)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["nms.tflite"]   # no attempt left behind


@pytest.mark.slow
def test_refusal_no_option_rescues_carries_the_advice(tmp_path):
    from studio import api

    require_engine("litert")
    path = _save(nhwc_resize(), tmp_path / "resize.onnx")
    report = api.check(api.load(path), "litert")
    assert report.verdict("litert").verdict == "fails"
    errors = [f for f in report.findings if f.engine == "litert" and f.is_error]
    # onnx2tf's advice ("use the -kt or -kat option") is said as what the studio did with it: flags its user
    # cannot pass are not quoted (00f52eb)
    assert errors and all("onnx2tf's advice was followed" in (f.fix_hint or "") for f in errors), errors
    assert all("tried -kat x, -kt x" in f.fix_hint for f in errors)
    assert not any("rewrite the op" in (f.fix_hint or "") for f in errors)
    assert any("none of the options it recommends helped" in n for n in report.notes), report.notes

