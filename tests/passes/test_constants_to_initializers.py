"""constants-to-initializers: Constant nodes become main-graph initializers (a subgraph's too, read from
the outer scope); graph-output Constants keep theirs; an IR < 4 model is raised to IR 4."""

from __future__ import annotations

import onnx

from tests.conftest import parse_model
from tests.passes.pass_helpers import check_applies, check_skips, run_one

H = '<ir_version: 8, opset_import: ["" : 17]>'

SHAPE_OPERANDS = H + """
g (float[2,12] x) => (float[6,4] y) {
  shp = Constant<value = int64[2] {6, 4}>()
  one = Constant<value_float = 1.5>()
  r = Reshape(x, shp)
  y = Mul(r, one)
}"""


def test_constants_become_initializers(tmp_path):
    r = check_applies(tmp_path, SHAPE_OPERANDS, "constants-to-initializers", ["Reshape", "Mul"])
    m = onnx.load(str(r.output))
    inits = {t.name: onnx.numpy_helper.to_array(t).tolist() for t in m.graph.initializer}
    assert inits == {"shp": [6, 4], "one": 1.5}      # same names, same values (value_float included)
    assert r.records[0].counts["constants_lifted"] == 2


def test_output_constant_stays_and_subgraph_constants_go_to_the_main_graph(tmp_path):
    """A branch's Constant (spox/TorchScript write every shape operand so) becomes a main-graph initializer the
    branch reads from its outer scope, never a subgraph initializer; sibling branches' same name gets a fresh
    one; the graph-output Constant stays. Plain ORT (default optimizer) equals the original on both branches."""
    import numpy as np
    import onnxruntime as ort

    m = H + """
    g (float[4] x, bool c) => (float[4] y, int64[2] k) {
      k = Constant<value = int64[2] {1, 2}>()
      y = If(c) <then_branch = g1 () => (float[4] t) { two = Constant<value_float = 2.0>()
                                                        t = Mul(x, two) },
                 else_branch = g2 () => (float[4] e) { two = Constant<value_float = -3.0>()
                                                        e = Mul(x, two) }>
    }"""
    r = check_applies(tmp_path, m, "constants-to-initializers", ["Constant", "If"])
    out = onnx.load(str(r.output))
    branches = [a.g for a in out.graph.node[1].attribute]
    assert all(not b.initializer and [n.op_type for n in b.node] == ["Mul"] for b in branches)
    inits = {t.name: float(onnx.numpy_helper.to_array(t)) for t in out.graph.initializer}
    assert sorted(inits.values()) == [-3.0, 2.0] and len(set(inits)) == 2
    x = np.arange(4, dtype=np.float32)
    old = ort.InferenceSession(parse_model(m).SerializeToString(), providers=["CPUExecutionProvider"])
    new = ort.InferenceSession(str(r.output), providers=["CPUExecutionProvider"])
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        for a, b in zip(old.run(None, feeds), new.run(None, feeds)):
            np.testing.assert_array_equal(a, b)
    kept = run_one(tmp_path / "kept", m, "constants-to-initializers", options={"subgraphs": False})
    assert all(n.op_type == "Constant" for a in onnx.load(str(kept.output)).graph.node[1].attribute
               for n in a.g.node[:1])


OLD_IR = SHAPE_OPERANDS.replace("ir_version: 8", "ir_version: 3").replace('"" : 17', '"" : 9').replace(
    "value_float = 1.5", "value = float {1.5}")


def test_old_ir_is_raised_to_4_and_lifted(tmp_path):
    """IR 3 (the opset-9 backend models): the Constants go (2 of 4 nodes) and the file says IR 4."""
    r = check_applies(tmp_path, OLD_IR, "constants-to-initializers", ["Reshape", "Mul"])
    m = onnx.load(str(r.output))
    assert m.ir_version == 4 and [i.name for i in m.graph.input] == ["x"]
    assert any("raised to 4" in n for n in r.records[0].notes)


def test_old_ir_keeps_constants_when_asked(tmp_path):
    check_skips(tmp_path, OLD_IR, "constants-to-initializers", options={"upgrade_ir": False})
