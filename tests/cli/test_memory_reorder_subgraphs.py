"""`memory --reorder` on graphs with subgraphs (issue 31: reorder was owed a test there). A body's reads of
outer-scope values (ORT's implicit inputs) are dependencies of the If/Loop node that owns it: an order that
ran the If before the producer of a value its branch reads is not topological (the checker refused the
reordered model, so nothing was kept). Oracle: plain onnxruntime on the original model."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from studio.cli import main
from tests.corpus import corpus_feeds, corpus_model
from tests.memory_models import BIG, STEM, two_branch


def _q3_inside_an_if() -> onnx.ModelProto:
    """two_branch() with its q3 Conv moved into both branches of an If that reads q2 and w_q3 from the
    outer scope: the If has no explicit input from the q branch at all."""
    m = two_branch()
    g = m.graph
    at = next(i for i, n in enumerate(g.node) if n.name == "q3")

    def branch(name: str) -> onnx.GraphProto:
        return h.make_graph([h.make_node("Conv", ["q2", "w_q3"], [f"{name}_out"], name=f"{name}_conv")], name, [],
                            [h.make_tensor_value_info(f"{name}_out", T.FLOAT, None)])
    g.initializer.append(onnx.numpy_helper.from_array(np.array(True), "cond"))
    del g.node[at]
    g.node.insert(at, h.make_node("If", ["cond"], ["q3"], name="q3_if", then_branch=branch("then"),
                                  else_branch=branch("else")))
    del g.value_info[:]
    m = onnx.shape_inference.infer_shapes(m)
    onnx.checker.check_model(m, full_check=True)
    return m


def _run(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_reorder_keeps_outer_scope_producers_before_the_if(capsys, tmp_path):
    src, out = tmp_path / "if_branch.onnx", tmp_path / "out" / "reordered.onnx"
    onnx.save(_q3_inside_an_if(), str(src))
    assert main(["memory", str(src), "--reorder", "-o", str(out), "--json", "--no-measure"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["verified"] and d["modified"] and d["lowers_peak"], d
    order = d["after"]["order"]
    assert order.index("q2") < order.index("q3_if")           # the branch's outer read q2 comes first
    assert d["before"]["peak_bytes"] == 3 * BIG and d["after"]["peak_bytes"] == 2 * BIG + 2 * STEM
    written = [n.name for n in onnx.load(str(out)).graph.node]
    assert written.index("q2") < written.index("q3_if")
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    x = {"x": np.random.RandomState(3).randn(1, 3, 32, 32).astype(np.float32)}
    np.testing.assert_array_equal(_run(src, x)[0], _run(out, x)[0])


@pytest.mark.parametrize("name", ["silero_vad", "silero_vad_op18_ifless"])
def test_reorder_of_a_real_model_with_nested_ifs_is_clean(capsys, tmp_path, name):
    """Silero VAD: the whole net inside nested Ifs (25 of them, 4 deep) / one top-level If. Whatever the
    reorder decides, it exits 0, and a written model computes what the original does."""
    src, out = corpus_model(name), tmp_path / "reordered.onnx"
    assert main(["memory", str(src), "--reorder", "-o", str(out), "--json", "--no-measure"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert not d["modified"] or d["verified"], d
    if out.exists():
        feeds = corpus_feeds(name)
        for a, b in zip(_run(src, feeds), _run(out, feeds)):
            np.testing.assert_allclose(a, b, rtol=0, atol=0)
