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


def test_merge_after_keeps_the_functions_apart_too(tmp_path):
    """position 'after': the edited model runs first, the other model's function must stay its own."""
    a = _fn_model("A", "x", "y", "Add", 1.0)
    b = _fn_model("B", "u", "v", "Mul", 3.0)
    onnx.save(b, tmp_path / "second.onnx")
    onnx.save(a, tmp_path / "first.onnx")
    (tmp_path / "m.json").write_text(json.dumps([{"op": "merge", "model": "second.onnx", "io_map": [["y", "u"]],
                                                  "position": "after"}]))
    out = tmp_path / "o" / "merged.onnx"
    res = api.edit(api.load(tmp_path / "first.onnx"), api.edit_script(tmp_path / "m.json"), out)
    np.testing.assert_allclose(ort_reference(out, {"x": X})["v"], (X + 1) * 3, rtol=1e-6)
    assert res.verification.method == "sequence" and "renamed apart" in res.notes[0]


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


DETECTOR = """<ir_version: 8, opset_import: ["" : 17]>
det (float[1,3,8,8] image) => (float[1,4,8,8] boxes, float[1,4,8,8] scores)
<float[4,3,3,3] w1 = {%s}, float[4,4,1,1] w2 = {%s}> {
  c1 = Conv <pads = [1,1,1,1]> (image, w1)
  feat = Relu(c1)
  head = Conv(feat, w2)
  boxes = Mul(head, head)
  scores = Sigmoid(head)
}"""


@pytest.fixture()
def detector(tmp_path):
    rng = np.random.default_rng(1)
    text = DETECTOR % tuple(", ".join(f"{x:.4f}" for x in rng.normal(size=n)) for n in (108, 16))
    m = onnx.parser.parse_model(text)
    for i, n in enumerate(m.graph.node):
        n.name = f"{n.op_type.lower()}{i}"
    path = tmp_path / "det.onnx"
    onnx.save(m, path)
    return path


FEEDS = {"image": np.random.default_rng(7).normal(size=(1, 3, 8, 8)).astype(np.float32)}


def test_swapping_two_output_names_is_a_rename_verified_by_name(detector, tmp_path):
    out = tmp_path / "o" / "swapped.onnx"
    res = api.edit(api.load(detector), [{"op": "rename", "tensors": {"boxes": "scores", "scores": "boxes"}}], out)
    want, got = ort_reference(detector, FEEDS), ort_reference(out, FEEDS)
    np.testing.assert_array_equal(got["scores"], want["boxes"])          # by name: the values moved with it
    np.testing.assert_array_equal(got["boxes"], want["scores"])
    assert res.verification.status == "passed" and res.verification.method == "numeric", res.verification
    assert res.interface_changed and "interface" in res.notes[0] and "boxes -> scores" in res.notes[0]


def _diamond(path) -> None:
    """x -> a = Relu(x) -> t = Exp(a); y = Add(a, t): t is computed from a, which y also reads."""
    m = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
dia (float[2,3] x) => (float[2,3] y) {
  a = Relu(x)
  t = Exp(a)
  y = Add(a, t)
}""")
    for i, n in enumerate(m.graph.node):
        n.name = f"{n.op_type.lower()}{i}"
    onnx.save(m, path)


@pytest.mark.parametrize("inputs, words", [
    (["x", "t"], ("'t'", "does not separate", "'a'", "exp1")),     # t made from the kept part's own a
    (["a", "t"], ("'t'", "does not separate", "'a'")),              # t made from the other chosen input
])
def test_an_extract_whose_cut_does_not_separate_the_graph_is_refused(tmp_path, inputs, words):
    _diamond(tmp_path / "dia.onnx")
    out = tmp_path / "o" / "part.onnx"
    with pytest.raises(StudioError) as err:
        api.edit(api.load(tmp_path / "dia.onnx"), [{"op": "extract", "inputs": inputs, "outputs": ["y"]}], out)
    assert_user_message(str(err.value), *words)
    assert not out.parent.exists()


def test_an_extract_whose_cut_separates_is_written(tmp_path):
    _diamond(tmp_path / "dia.onnx")
    out = tmp_path / "o" / "part.onnx"
    api.edit(api.load(tmp_path / "dia.onnx"), [{"op": "extract", "inputs": ["a"], "outputs": ["y"]}], out)
    a = np.abs(X)
    np.testing.assert_allclose(ort_reference(out, {"a": a})["y"], a + np.exp(a), rtol=1e-6)


def _chain(path, n: int) -> None:
    """x -> n Neg nodes -> long; x -> Relu -> short: removing 'long' leaves a dead chain of n nodes."""
    nodes = [helper.make_node("Neg", ["x" if i == 0 else f"c{i - 1}"], [f"c{i}" if i < n - 1 else "long"],
                              name=f"neg{i}") for i in range(n)]
    nodes.append(helper.make_node("Relu", ["x"], ["short"], name="relu"))
    vi = [helper.make_tensor_value_info(k, TensorProto.FLOAT, [2, 3]) for k in ("x", "long", "short")]
    onnx.save(helper.make_model(helper.make_graph(nodes, "chain", vi[:1], vi[1:]), ir_version=8,
                                opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("script, removed, outputs", [
    ([{"op": "remove_outputs", "outputs": ["long"]}], 300, ["short: float[2,3]"]),
    ([{"op": "delete", "node": "neg299"}], 300, ["short: float[2,3]"]),
    ([{"op": "bypass", "node": "neg150"}], 1, ["long: float[2,3]", "short: float[2,3]"]),
])
def test_removing_a_chain_is_one_sweep_with_one_scan_of_the_graph(tmp_path, monkeypatch, script, removed, outputs):
    """The mechanism behind linear-time removal: one dead-code sweep per operation, and that sweep iterates
    the graph once (it rescanned the graph once per removed layer: 300 scans here)."""
    import onnx_ir as ir

    from studio.edit import graph as g

    _chain(tmp_path / "chain.onnx", 300)
    scans, sweeps = [0], []
    real_iter, real_sweep = ir.Graph.__iter__, g.remove_dead

    def counting_iter(self):
        scans[0] += 1
        return real_iter(self)

    def spy(graph):
        before = scans[0]
        removed = real_sweep(graph)
        sweeps.append(scans[0] - before)
        return removed

    monkeypatch.setattr(ir.Graph, "__iter__", counting_iter)
    monkeypatch.setattr(g, "remove_dead", spy)
    res = api.validate_edit_script(api.load(tmp_path / "chain.onnx"), script)
    assert sweeps == [1], sweeps
    assert len(res.nodes_removed) == removed and res.after[0]["outputs"] == outputs


def _script_error(tmp_path, model, text: str, name: str = "s.json") -> str:
    (tmp_path / name).write_text(text, encoding="utf-8")
    out = tmp_path / "o" / "x.onnx"
    with pytest.raises(StudioError) as err:
        api.edit(api.load(model), api.edit_script(tmp_path / name), out)
    assert not out.parent.exists()
    return str(err.value)


@pytest.mark.parametrize("name", ["s.json", "s.yaml"])
def test_a_script_nested_thousands_deep_is_one_line(detector, tmp_path, name):
    deep = '[{"op": "set_attr", "node": "conv0", "name": "x", "value": ' + "[" * 5000 + "]" * 5000 + "}]"
    assert_user_message(_script_error(tmp_path, detector, deep, name), "nested 5002 levels deep", "at most 32")


def test_a_yaml_script_nested_deep_by_indentation_is_one_line(detector, tmp_path):
    lines = ["- op: set_attr", "  node: conv0", "  name: x", "  value:"]
    lines += [" " * (4 + 2 * i) + "a:" for i in range(1200)] + [" " * 2406 + "1"]
    message = _script_error(tmp_path, detector, "\n".join(lines), "s.yaml")
    assert_user_message(message, "nested")


@pytest.mark.parametrize("op, words", [
    ({"op": "add_opset", "domain": "custom", "version": 2**70}, ("edit #1 (add_opset)", "'version'", "beyond int64")),
    ({"op": "set_attr", "node": "conv0", "name": "group", "value": [1, -(2**64)]},
     ("edit #1 (set_attr)", "'value'", "beyond int64")),
    ({"op": "set_input", "input": "image", "shape": [1, 3, 10**30, 8]}, ("'shape'", "31-digit number", "int64")),
    ({"op": "rename", "tensors": {"feat": "f\ud800"}}, ("edit #1 (rename)", "'tensors'", "not valid UTF-8",
                                                        "surrogate")),
    ({"op": "rename", "nodes": {"conv0\udcff": "c"}}, ("edit #1 (rename)", "not valid UTF-8")),
])
def test_integers_beyond_int64_and_lone_surrogates_are_one_line_naming_the_field(detector, tmp_path, op, words):
    text = json.dumps([op])               # json escapes the surrogate as \\ud800: valid UTF-8 text on disk
    message = _script_error(tmp_path, detector, text)
    assert_user_message(message, *words)
    message.encode("utf-8")               # the message itself can be printed


def test_a_script_that_is_not_utf8_is_one_line(detector, tmp_path):
    (tmp_path / "s.json").write_bytes(b'[{"op": "rename", "tensors": {"feat": "f\xff"}}]')
    with pytest.raises(StudioError) as err:
        api.edit_script(tmp_path / "s.json")
    assert_user_message(str(err.value), "not UTF-8")


def _npy_header_only(path, shape, descr="<f4", extra: bytes = b"\0" * 64):
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    path.write_bytes(buf.getvalue() + extra)


@pytest.mark.parametrize("make, words", [
    (lambda p: _npy_header_only(p, (2**31,)), ("8.0 GiB", "over the limit of 64 bytes", "'w2'")),      # 8 GiB
    (lambda p: _npy_header_only(p, (2**40,)), ("4.0 TiB", "over the limit of 64 bytes")),               # 4 TiB lie
    (lambda p: _npy_header_only(p, (4, 4, 1, 1), extra=b"\0" * 10), ("truncated", "64 bytes")),
    (lambda p: np.save(p, np.array([{"a": 1}] * 16, dtype=object), allow_pickle=True), ("pickled",)),
    (lambda p: np.save(p, np.array(["abcd"] * 16)), ("text or records",)),
    (lambda p: np.save(p, np.zeros((4, 4, 1, 1), np.complex64)), ("complex",)),
    (lambda p: p.write_bytes(b"\x93NUMPY\x01\x00\xff\xffjunk"), ("not a readable .npy",)),
])
def test_hostile_weight_npy_is_refused_from_its_header_before_any_allocation(detector, tmp_path, monkeypatch, make,
                                                                            words):
    """The mechanism: np.load is never reached, so nothing sized by the header is allocated."""
    make(tmp_path / "w.npy")
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("np.load reached"))
    message = _script_error(tmp_path, detector, json.dumps([{"op": "replace_initializer", "name": "w2",
                                                               "npy": "w.npy"}]))
    assert_user_message(message, "edit #1 (replace_initializer)", *words)


def test_a_good_weight_npy_still_replaces_the_initializer(detector, tmp_path):
    w = np.random.default_rng(0).normal(size=(4, 4, 1, 1)).astype(np.float32)
    np.save(tmp_path / "w.npy", np.asfortranarray(w))
    (tmp_path / "s.json").write_text(json.dumps([{"op": "replace_initializer", "name": "w2", "npy": "w.npy"}]))
    out = tmp_path / "o" / "new.onnx"
    api.edit(api.load(detector), api.edit_script(tmp_path / "s.json"), out)
    got = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    np.testing.assert_array_equal(got["w2"], w)


def test_a_merge_with_a_random_part_is_not_refused_but_says_it_was_not_compared(tmp_path):
    a = _weighted("A", "x", "y", 2.0)
    b = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
rnd (float[2,3] u) => (float[2,3] v) {
  n = RandomNormalLike(u)
  v = Add(u, n)
}""")
    res, out = _merge(tmp_path, a, b, [["y", "u"]])
    assert res.verification.status.startswith("skipped") and "nondeterministic" in res.notes[0], res.notes
    assert out.exists()
