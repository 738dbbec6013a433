"""OpenVINO's partial conversion is a finding, whatever happens to it: every node it leaves
unconverted is named (a converter that fails on a node as well as an op with no rule), and
when the partial conversion fails too the report says the list is missing (never a silent drop)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from studio import api

V = helper.make_tensor_value_info


def _save(path, nodes, inputs, outputs, opset=17, domains=()):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                            *(helper.make_opsetid(d, 1) for d in domains)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _ov_reality(path) -> tuple[bool, bool]:
    """(convert fails, convert_partially fails) as OpenVINO itself answers, called directly."""
    from openvino.frontend import FrontEndManager

    fe = FrontEndManager().load_by_framework("onnx")
    results = []
    for fn in (fe.convert, fe.convert_partially):
        try:
            fn(fe.load(str(path)))
            results.append(False)
        except Exception:  # noqa: BLE001 - the oracle records that it failed
            results.append(True)
    return results[0], results[1]


def test_a_failed_partial_conversion_is_reported(tmp_path):
    # A node reads a tensor nothing defines: OpenVINO's frontend refuses to load it at all.
    path = _save(tmp_path / "undefined.onnx", [helper.make_node("Add", ["x", "q"], ["y"], name="add")],
                 [V("x", TensorProto.FLOAT, [1, 4])], [V("y", TensorProto.FLOAT, [1, 4])])
    assert _ov_reality(path) == (True, True)
    report = api.check(api.load(path), engines=("openvino",))
    assert report.verdict("openvino").verdict == "fails"
    [note] = [f for f in report.findings if f.code == "OV-PARTIAL-CONVERT"]
    assert note.engine == "openvino" and note.severity == "info"
    assert "partial conversion failed" in note.message and "unconverted" in note.message
    assert '"q"' in note.message or "q" in note.message.split(":")[-1]


def test_every_node_whose_converter_fails_is_named(tmp_path):
    # Two 5-D GridSamples: OpenVINO has the op but its converter fails on both. Its error message
    # names only the first (one entry per op type); the partial conversion marks both
    # (NotSupportedONNXNode), and the report must name both.
    path = _save(tmp_path / "g5.onnx", [helper.make_node("GridSample", ["x", "g"], ["a"], name="s1"),
                                        helper.make_node("Relu", ["x"], ["b"], name="r"),
                                        helper.make_node("GridSample", ["b", "g"], ["c"], name="s2"),
                                        helper.make_node("Add", ["a", "c"], ["y"], name="add")],
                 [V("x", TensorProto.FLOAT, [1, 1, 2, 2, 2]), V("g", TensorProto.FLOAT, [1, 2, 2, 2, 3])],
                 [V("y", TensorProto.FLOAT, None)], opset=20)
    assert _ov_reality(path) == (True, False)
    report = api.check(api.load(path), engines=("openvino",))
    for node in ("s1", "s2"):
        assert any(f.code == "OV-CONVERT-ERROR" and f.node == node for f in report.findings), node
        verdict = next(n for n in report.nodes if n.engine == "openvino" and n.node == node)
        assert verdict.status == "unsupported"
    assert not any(f.node in ("r", "add") for f in report.findings if f.engine == "openvino")
    assert not any(f.code == "OV-PARTIAL-CONVERT" for f in report.findings)


def test_a_tensor_of_unknown_rank_from_a_dynamic_input_points_to_fixing_the_input_shapes(tmp_path):
    """Held-out silero_vad_16k_op15: OpenVINO 'cannot convert' its Conv ('the input data tensor's rank has to be
    known'), hint 'rewrite the op ... or use another engine'; pinned inputs convert. Here a Reshape to a shape of
    dynamic length feeds a Conv. Oracle: OpenVINO itself fails on the file and converts it with that dim pinned."""
    import numpy as np
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.ones((2, 1, 3), np.float32), "w")
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Conv", ["r", "w"], ["y"])],
                          "g", [V("x", TensorProto.FLOAT, [1, 8]), V("shape", TensorProto.INT64, ["n"])],
                          [V("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    m.graph.input[1].type.tensor_type.shape.dim[0].dim_value = 3
    pinned = tmp_path / "pinned.onnx"
    onnx.save(m, pinned)
    assert _ov_reality(path)[0] and not _ov_reality(pinned)[0]
    report = api.check(api.load(path), engines=("openvino",))
    [f] = [f for f in report.findings if f.code == "OV-CONVERT-ERROR"]
    assert f.node == "Conv@1" or f.op_type == "Conv"
    assert f.fix_pass == "fix-input-shapes" and "--shapes NAME=SHAPE" in f.fix_hint
    # check stays honest: the model as it is does not convert (the runs convert it at their input shapes)
    assert report.verdict("openvino").verdict == "fails"
    assert "compare, profile and precision convert it at their input shapes" in f.fix_hint
    # every door that runs it on OpenVINO (compare, profile, precision) converts it at the feeds' shapes and says so
    from studio.core.engines import get_engine

    feeds = {"x": np.arange(8, dtype=np.float32).reshape(1, 8), "shape": np.array([1, 1, 8], np.int64)}
    ran = get_engine("openvino").run(path, feeds)
    assert ran.details["conversion_note"] == ("converted at the input shapes shape=[3]: OpenVINO cannot convert a "
                                              "tensor of unknown rank")
    np.testing.assert_allclose(ran.outputs["y"], np.convolve(np.arange(8), np.ones(3), "valid")[None, None].repeat(2, 1))
