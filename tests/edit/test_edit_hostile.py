"""Edits and merges against hostile inputs (issue 31 items 5-8): merges that are right or refused (local
functions, initializers and opsets of both sides kept apart, every merge checked against the parts run in
sequence by plain onnxruntime), edits judged by what they do (an output rename is a rename; a cut must
separate the graph), linear-time dead-code upkeep, and bounded edit scripts and weight files."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.core.errors import StudioError
from tests.conftest import assert_user_message, ort_reference

OPSET = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]


def _fn_model(graph_name: str, x: str, y: str, body_op: str, const: float, fn_name: str = "f") -> onnx.ModelProto:
    """y = local.f(x) where f's body is ``t = body_op(x, const)``: two models with the same function name and
    domain but different bodies (x + 1 in one, x * 3 in the other)."""
    c = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("cv", TensorProto.FLOAT, [], [const]))
    body = helper.make_node(body_op, ["a", "c"], ["b"])
    fn = helper.make_function("local", fn_name, ["a"], ["b"], [c, body], [helper.make_opsetid("", 17)])
    node = helper.make_node(fn_name, [x], [y], domain="local", name=f"{graph_name}_call")
    g = helper.make_graph([node], graph_name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=OPSET, functions=[fn], ir_version=8)


def _merge(tmp_path, first: onnx.ModelProto, second: onnx.ModelProto, io_map, **kw):
    onnx.save(first, tmp_path / "first.onnx")
    onnx.save(second, tmp_path / "second.onnx")
    script = tmp_path / "merge.json"
    script.write_text(json.dumps([{"op": "merge", "model": "first.onnx", "io_map": io_map, **kw}]))
    out = tmp_path / "o" / "merged.onnx"
    return api.edit(api.load(tmp_path / "second.onnx"), api.edit_script(script), out), out


X = np.random.default_rng(3).normal(size=(2, 3)).astype(np.float32)


def test_merge_of_two_models_with_same_named_local_functions_computes_a_then_b(tmp_path):
    a = _fn_model("A", "x", "y", "Add", 1.0)
    b = _fn_model("B", "u", "v", "Mul", 3.0)
    res, out = _merge(tmp_path, a, b, [["y", "u"]])
    # the oracle: A then B, each by plain onnxruntime
    want = ort_reference(b, {"u": ort_reference(a, {"x": X})["y"]})["v"]
    got = ort_reference(out, {"x": X})["v"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, (X + 1) * 3, rtol=1e-6)
    merged = onnx.load(out)
    assert len(merged.functions) == 2 and len({(f.domain, f.name) for f in merged.functions}) == 2
    assert res.verification.status == "passed" and res.verification.method == "sequence", res.verification


def test_merge_shares_an_identical_function_once(tmp_path):
    a = _fn_model("A", "x", "y", "Add", 1.0)
    b = _fn_model("B", "u", "v", "Add", 1.0)
    _, out = _merge(tmp_path, a, b, [["y", "u"]])
    merged = onnx.load(out)
    assert len(merged.functions) == 1
    np.testing.assert_allclose(ort_reference(out, {"x": X})["v"], X + 2, rtol=1e-6)


def test_a_merge_that_does_not_match_its_parts_is_refused_and_nothing_written(tmp_path, monkeypatch):
    """The mechanism: with the functions left clashing (the old behaviour), the check against the parts run
    in sequence must refuse the merge in one line."""
    import studio.edit.ops_compose as oc

    monkeypatch.setattr(oc, "_functions_apart", lambda other, model, prefix: ([], []))
    with pytest.raises(StudioError) as err:
        _merge(tmp_path, _fn_model("A", "x", "y", "Add", 1.0), _fn_model("B", "u", "v", "Mul", 3.0), [["y", "u"]])
    assert_user_message(str(err.value), "does not compute the two models run in sequence", "refused")
    assert not (tmp_path / "o").exists()


def _weighted(name: str, x: str, y: str, w: float) -> onnx.ModelProto:
    """y = x * w with an initializer called 'w' and a value_info 't' (names both models use)."""
    nodes = [helper.make_node("Mul", [x, "w"], ["t"], name="mul"), helper.make_node("Relu", ["t"], [y], name="relu")]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor("w", TensorProto.FLOAT, [1], [w])],
                          value_info=[helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_merge_keeps_same_named_initializers_and_value_infos_apart(tmp_path):
    a, b = _weighted("A", "x", "y", 2.0), _weighted("B", "u", "v", -0.5)
    res, out = _merge(tmp_path, a, b, [["y", "u"]])
    want = ort_reference(b, {"u": ort_reference(a, {"x": X})["y"]})["v"]
    np.testing.assert_allclose(ort_reference(out, {"x": X})["v"], want, rtol=1e-6)
    merged = onnx.load(out)
    names = sorted(t.name for t in merged.graph.initializer)
    assert names == ["merged/w", "w"] and res.verification.method == "sequence"


def test_merge_of_models_at_different_opsets_is_refused(tmp_path):
    a = _weighted("A", "x", "y", 2.0)
    a.opset_import[0].version = 13
    with pytest.raises(StudioError) as err:
        _merge(tmp_path, a, _weighted("B", "u", "v", -0.5), [["y", "u"]])
    assert_user_message(str(err.value), "ai.onnx at versions 13 and 17", "convert")
