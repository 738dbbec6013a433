"""Lint findings on small models built in the test."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from diagnostics.base import OutputInfo
from diagnostics.lint import lint_model, output_shape_findings
from studio import api
from tests.conftest import SAMPLES


def _codes(findings):
    return {f.code for f in findings}


def test_old_ir_inputs_unused_initializers_dynamic_dims_and_domains():
    w = numpy_helper.from_array(np.ones((4,), np.float32), "w")
    unused = numpy_helper.from_array(np.ones((2,), np.float32), "unused")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", 1, ["batch", 4]),
                               helper.make_tensor_value_info("w", 1, [4])],
                              [helper.make_tensor_value_info("y", 1, ["batch", 4])], initializer=[w, unused])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme", 1)])
    found = lint_model(model)
    assert {"INITIALIZER-AS-INPUT", "UNUSED-INITIALIZER", "DYNAMIC-SHAPE", "UNUSED-OPSET"} <= _codes(found)
    fixes = {f.code: f.fix_pass for f in found}
    assert fixes["INITIALIZER-AS-INPUT"] == "remove-initializers-from-inputs"
    assert fixes["DYNAMIC-SHAPE"] == "fix-input-shapes" and fixes["UNUSED-INITIALIZER"] == "eliminate-dead-code"
    assert fixes["UNUSED-OPSET"] == "remove-unused-opsets"


def test_duplicate_names_and_old_opset():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="a"),
                               helper.make_node("Relu", ["x"], ["y"], name="a")], "g",
                              [helper.make_tensor_value_info("x", 1, [2])], [helper.make_tensor_value_info("y", 1, [2])])
    found = lint_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)]))
    assert {"DUPLICATE-NAME", "DUPLICATE-NODE-NAME", "OPSET-TOO-OLD"} <= _codes(found)


def test_duplicate_node_names_are_an_onnxruntime_error_like_the_real_session(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="n"),
                               helper.make_node("Neg", ["a"], ["y"], name="n")], "g",
                              [helper.make_tensor_value_info("x", 1, [2])], [helper.make_tensor_value_info("y", 1, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "dup.onnx"
    onnx.save(model, str(path))
    report = api.check(api.load(path), ("onnxruntime", "openvino"))
    dup = next(f for f in report.findings if f.code == "DUPLICATE-NODE-NAME")
    assert (dup.severity, dup.engine, dup.fix_pass) == ("error", "onnxruntime", "rename-duplicate-nodes")
    # The real session agrees: ONNX Runtime fails, OpenVINO runs it.
    assert any("two nodes with same node name" in f.message for f in report.findings if f.code.startswith("ORT-"))
    assert report.verdict("onnxruntime").verdict == "fails" and report.verdict("openvino").verdict != "fails"
    assert report.fixes()[0] == "rename-duplicate-nodes"
    # Without ONNX Runtime among the engines it is only worth knowing.
    only_ov = api.check(api.load(path), ("openvino",))
    assert next(f for f in only_ov.findings if f.code == "DUPLICATE-NODE-NAME").severity == "info"


def test_duplicate_constant_names_are_no_onnxruntime_error(tmp_path):
    """ONNX Runtime folds Constant nodes into initializers before it checks names: repeats among Constants
    alone load (silero_vad_openvino_16k's fifteen 'F0::anon' read 'error ... ONNX Runtime refuses the model'
    beside ONNX Runtime's own 'runs' on the old code)."""
    import onnxruntime as ort

    def const(out, value):
        return helper.make_node("Constant", [], [out], name="anon",
                                value=numpy_helper.from_array(np.full((2,), value, np.float32)))

    graph = helper.make_graph([const("a", 1.0), const("b", 2.0), helper.make_node("Sum", ["x", "a", "b"], ["y"],
                                                                                  name="sum")], "g",
                              [helper.make_tensor_value_info("x", 1, [2])], [helper.make_tensor_value_info("y", 1, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # The oracle: plain ONNX Runtime loads and runs it.
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros(2, np.float32)})
    assert y.tolist() == [3.0, 3.0]
    dup = next(f for f in lint_model(model) if f.code == "DUPLICATE-NODE-NAME")
    assert dup.severity == "info" and dup.engine is None and "Constant nodes only" in dup.message
    path = tmp_path / "consts.onnx"
    onnx.save(model, str(path))
    report = api.check(api.load(path), ("onnxruntime",))
    assert report.verdict("onnxruntime").verdict == "runs" and not any(f.is_error for f in report.findings)


def test_declared_output_shape_differs_from_real_run(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 1, [2, 3])],
                              [helper.make_tensor_value_info("y", 1, [3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    found = output_shape_findings(model, [OutputInfo("y", "float32", (2, 3))], "onnxruntime")
    assert [f.code for f in found] == ["OUTPUT-SHAPE-MISMATCH"] and "dim 0 declared 3, produced 2" in found[0].message
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    report = api.check(api.load(path), ("onnxruntime",))
    assert "OUTPUT-SHAPE-MISMATCH" in _codes(report.findings)


def test_clean_sample_has_no_lint_errors():
    report = api.check(api.load(SAMPLES / "cnn_unfused.onnx"), ("onnxruntime",))
    assert report.ok and report.verdict("onnxruntime").verdict == "runs"


def test_a_contrib_op_the_engines_run_is_not_told_to_be_reimplemented():
    """ONNX Runtime's contrib ops (com.microsoft: DynamicQuantizeLSTM in corpus ddddocr_common_old_int8, FusedMatMul
    here) have kernels in ONNX Runtime: the CUSTOM-OP hint said 'provide a custom op implementation for each
    engine'. It now names what runs it and defers to each engine's verdict; an unknown domain keeps the old hint."""
    import onnxruntime as ort

    from diagnostics.custom_ops import detect_custom_ops

    def model(domain, op):
        graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"], domain=domain)], "g",
                                  [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 2]) for n in "ab"],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 2])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])

    contrib = model("com.microsoft", "FusedMatMul")
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    y = ort.InferenceSession(contrib.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": a})
    assert np.allclose(y[0], a @ a)                  # the oracle: plain ONNX Runtime runs it
    finding = next(f for f in lint_model(contrib, custom_ops=detect_custom_ops(contrib)) if f.code == "CUSTOM-OP")
    assert "provide a custom op implementation" not in finding.fix_hint, finding.fix_hint
    assert "ONNX Runtime has kernels" in finding.fix_hint and "each engine's verdict" in finding.fix_hint
    unknown = model("acme", "Blend")
    other = next(f for f in lint_model(unknown, custom_ops=detect_custom_ops(unknown)) if f.code == "CUSTOM-OP")
    assert "provide a custom op implementation for each engine" in other.fix_hint


def test_a_cycle_is_named_as_one(tmp_path):
    """Add reads Relu's output and Relu reads Add's: the checker said 'not topologically sorted' and OpenVINO
    'missing feed for model input [b]' (with advice about input sizes); neither named the cycle."""
    import onnxruntime as ort
    import pytest

    graph = helper.make_graph([helper.make_node("Add", ["x", "b"], ["a"], name="add"),
                               helper.make_node("Relu", ["a"], ["b"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", 1, [4])], [helper.make_tensor_value_info("b", 1, [4])])
    path = tmp_path / "cycle.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(Exception, match="not acyclic"):         # the oracle: plain ONNX Runtime
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    report = api.check(api.load(path), ("onnxruntime",))
    cycle = next(f for f in report.findings if f.code == "GRAPH-CYCLE")
    assert cycle.severity == "error" and "('add', 'relu')" in cycle.message
    assert report.verdict("onnxruntime").verdict == "fails"
    # a sound graph has no such finding
    sound = api.check(api.load(SAMPLES / "gpt2_decoder_merged.onnx"), ("onnxruntime",), run=False)
    assert not any(f.code == "GRAPH-CYCLE" for f in sound.findings)


def test_an_if_whose_branches_name_values_as_its_outputs_is_single_assignment():
    """Optimum's merged decoders: each If branch makes 'logits', 'present.N.key'... as the If does. Valid ONNX
    (the owning node's outputs are not visible inside its bodies): the full checker and ONNX Runtime accept the
    sample, and lint said 'DUPLICATE-NAME error: 127 value name(s) are produced more than once'."""
    import onnxruntime as ort

    path = SAMPLES / "gpt2_decoder_merged.onnx"
    onnx.checker.check_model(str(path), full_check=True)                  # the oracles
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert "DUPLICATE-NAME" not in _codes(lint_model(onnx.load(str(path))))
    # a body that re-makes a name visible from outside ('a', made before the If) still breaks single assignment
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["a"])], "then", [],
                             [helper.make_tensor_value_info("a", 1, [2])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["o2"])], "else", [],
                              [helper.make_tensor_value_info("o2", 1, [2])])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]),
                               helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
                              [helper.make_tensor_value_info("x", 1, [2]), helper.make_tensor_value_info("c", 9, [])],
                              [helper.make_tensor_value_info("y", 1, [2]), helper.make_tensor_value_info("a", 1, [2])])
    found = lint_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    dup = next(f for f in found if f.code == "DUPLICATE-NAME")
    assert "'a'" in dup.message
