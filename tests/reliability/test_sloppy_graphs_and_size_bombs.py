"""R41 (sloppy but runnable graphs: handled like ORT, reported as lint) and R46 (expansion and
size bombs: bounded, and the message says what was too large)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

from studio import api
from studio.core.errors import ModelLoadError
from tests.conftest import assert_user_message, save, sha256_file

# ---------------------------------------------------------------------------------------- R41


def _model(nodes=None, *, inputs=None, outputs=None, opsets=(("", 17),), ir_version=8) -> onnx.ModelProto:
    nodes = nodes or _chain()
    inputs = inputs or [helper.make_tensor_value_info("x", T.FLOAT, [1, 4])]
    outputs = outputs or [helper.make_tensor_value_info("y", T.FLOAT, [1, 4])]
    g = helper.make_graph(nodes, "g", inputs, outputs, [nh.from_array(np.ones((1, 4), np.float32), "one")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = ir_version
    return m


def _chain() -> list[onnx.NodeProto]:
    return [helper.make_node("Add", ["x", "one"], ["a"], name="n1"),
            helper.make_node("Identity", ["a"], ["b"], name="n2"),
            helper.make_node("Relu", ["b"], ["y"], name="n3")]


R41_CASES = {
    "unsorted": (_model(list(reversed(_chain()))), "not in topological order"),
    "conflicting_opsets": (_model(opsets=(("", 13), ("", 17))), "ONNX Runtime uses the last (17)"),
    "old_ir": (_model(ir_version=3), "IR version 3 is older than its opsets need"),
    "wrong_output_shape": (_model(outputs=[helper.make_tensor_value_info("y", T.FLOAT, [1, 5])]),
                           "declared [1, 5] but the graph produces [1, 4]"),
}


@pytest.mark.parametrize("case", sorted(R41_CASES))
def test_r41_sloppy_graphs_load_inspect_check_and_optimize_like_ort(tmp_path, case):
    model, lint = R41_CASES[case]
    src = save(model, tmp_path / "in" / "m.onnx")
    before = sha256_file(src)
    handle = api.load(src)
    assert api.inspect(handle) is not None
    report = api.check(handle, engines=("onnxruntime",), run=False)
    assert report is not None
    r = api.optimize(handle, preset="safe", out_path=tmp_path / "out" / "m.onnx")
    assert r.ok, r.summary()
    assert any(lint in line for line in r.lint), r.lint
    assert "input repaired as ONNX Runtime reads it" in r.summary()
    result = onnx.load(str(r.output))
    onnx.checker.check_model(result, full_check=True)
    assert [i.name for i in result.graph.input] == ["x"] and [o.name for o in result.graph.output] == ["y"]
    assert sha256_file(src) == before


@pytest.mark.parametrize("case", sorted(R41_CASES))
def test_r41_sloppy_graphs_export_from_a_repaired_copy(tmp_path, case):
    """ONNX Runtime runs these models, so the bundle is built (from a repaired copy, said in its
    notes and the manifest) and verified, instead of refused; the input stays as it was."""
    model, lint = R41_CASES[case]
    src = save(model, tmp_path / "in" / "m.onnx")
    before = sha256_file(src)
    handle = api.load(src)
    result = api.export(handle, "onnxruntime", tmp_path / "bundle", zip=False)
    assert result.ok, result.failures
    notes = result.manifest["deploy"]["notes"]
    assert result.manifest["source"]["name"] == "m.onnx"
    if not handle.check.ok:       # the loader's check refuses it (unsorted, old IR): exported from a repaired copy
        assert any(lint in n and n.startswith("input repaired as ONNX Runtime reads it") for n in notes), notes
        assert any("built from the repaired copy" in n and before[:12] in n for n in notes)
    assert result.bundle.name.startswith("m-") and before[:8] in result.bundle.name
    assert sha256_file(src) == before
    assert not list((tmp_path / "in").glob("*.onnx.*")) and sorted(p.name for p in (tmp_path / "in").iterdir()) == \
        ["m.onnx"]


def test_r41_a_model_onnx_runtime_cannot_read_is_still_refused_by_export(tmp_path):
    from studio.core.errors import StudioError

    bad = _model([helper.make_node("Relu", ["missing"], ["y"], name="n")])
    src = save(bad, tmp_path / "in" / "m.onnx")
    with pytest.raises(StudioError, match="cannot export: the model fails onnx.checker"):
        api.export(api.load(src), "onnxruntime", tmp_path / "bundle", zip=False)
    assert not (tmp_path / "bundle").exists()


def test_r41_identical_duplicated_opsets_and_dead_inputs_stay_as_they_are(tmp_path):
    dead = [helper.make_tensor_value_info("x", T.FLOAT, [1, 4]), helper.make_tensor_value_info("unused", T.FLOAT, [2])]
    src = save(_model(inputs=dead, opsets=(("", 17), ("", 17))), tmp_path / "in" / "m.onnx")
    r = api.optimize(api.load(src), preset="safe", out_path=tmp_path / "out" / "m.onnx")
    assert r.ok and r.lint == ()
    assert [i.name for i in onnx.load(str(r.output)).graph.input] == ["x", "unused"]


def test_r41_a_model_that_passes_the_check_is_not_rewritten(tmp_path):
    from passes.normalize import normalize_proto

    model = _model()
    before = model.SerializeToString()
    assert normalize_proto(model) == ([], True)
    assert model.SerializeToString() == before


def test_r41_topological_sort_sees_outer_scope_uses_of_subgraphs():
    from passes.normalize import sort_graph

    then = helper.make_graph([helper.make_node("Identity", ["a"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", T.FLOAT, [1, 4])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", T.FLOAT, [1, 4])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
                           helper.make_node("Relu", ["x"], ["a"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("c", T.BOOL, [])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 4])])
    assert sort_graph(g)
    assert [n.op_type for n in g.node] == ["Relu", "If"]


# ---------------------------------------------------------------------------------------- R46

def function_bomb(levels: int, fan: int = 10) -> onnx.ModelProto:
    """A few KB: f0 = Relu, f(k) calls f(k-1) ``fan`` times; the graph calls f(levels-1) once."""
    fns = [helper.make_function("bomb", "f0", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])],
                                [helper.make_opsetid("", 17)])]
    for k in range(1, levels):
        nodes, prev = [], "x"
        for i in range(fan):
            out = "y" if i == fan - 1 else f"t{i}"
            nodes.append(helper.make_node(f"f{k - 1}", [prev], [out], domain="bomb"))
            prev = out
        fns.append(helper.make_function("bomb", f"f{k}", ["x"], ["y"], nodes,
                                        [helper.make_opsetid("", 17), helper.make_opsetid("bomb", 1)]))
    g = helper.make_graph([helper.make_node(f"f{levels - 1}", ["x"], ["y"], domain="bomb")], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [4])])
    return helper.make_model(g, functions=fns, ir_version=8,
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("bomb", 1)])


def test_r46_function_expansion_is_counted_without_inlining():
    from studio.core.expansion import inlined_node_count

    assert inlined_node_count(function_bomb(3)) == 100
    assert inlined_node_count(function_bomb(7)) == 10**6
    assert inlined_node_count(function_bomb(40), cap=10**9) == 10**9     # 10^39 nodes, counted instantly


def test_r46_function_bomb_refused_at_load_with_what_is_too_large(tmp_path):
    src = save(function_bomb(12), tmp_path / "bomb.onnx")
    assert src.stat().st_size < 5000
    with pytest.raises(ModelLoadError) as info:
        api.load(src)
    assert_user_message(str(info.value), "inlining local functions would create", "nodes (limit 500,000")
    small = save(function_bomb(3), tmp_path / "small.onnx")
    assert api.load(small) is not None


def test_r46_limit_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_STUDIO_MAX_INLINED_NODES", "50")
    with pytest.raises(ModelLoadError) as info:
        api.load(save(function_bomb(3), tmp_path / "m.onnx"))
    assert "would create 100 nodes (limit 50" in str(info.value)


def _wide_concat(n: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], [f"r{i}"]) for i in range(n)]
    nodes.append(helper.make_node("Concat", [f"r{i}" for i in range(n)], ["y"], axis=0))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_r46_cse_rewires_a_wide_consumer_once(monkeypatch):
    """2,000 identical nodes into one Concat: the Concat's inputs are rebuilt once, not once per
    duplicate (onnx-ir rebuilds the whole input tuple per replaced input: quadratic)."""
    from passes.registry import make_pass

    calls = {"n": 0}
    original = ir.Node.replace_input_with

    def counting(self, index, value):
        calls["n"] += self.op_type == "Concat"
        return original(self, index, value)

    monkeypatch.setattr(ir.Node, "replace_input_with", counting)
    model = ir.serde.deserialize_model(_wide_concat(2000))
    res = make_pass("cse").call(model)
    assert res.counts["nodes_removed"] == 1999
    assert calls["n"] <= 16
    concat = next(n for n in model.graph if n.op_type == "Concat")
    relu = next(n for n in model.graph if n.op_type == "Relu")
    assert all(v is relu.outputs[0] for v in concat.inputs) and len(relu.outputs[0].uses()) == 2000


def test_r46_every_pass_runs_in_a_worker_on_large_models(tmp_path, monkeypatch):
    import passes.pipeline as pipeline
    import passes.worker_pass as worker_pass
    from passes.registry import make_pass

    seen: list[str] = []
    real = worker_pass.run_pass_in_worker

    def spy(p, *args, **kwargs):
        seen.append(p.name)
        return real(p, *args, **kwargs)

    monkeypatch.setattr(worker_pass, "run_pass_in_worker", spy)
    monkeypatch.setattr(pipeline, "IN_PROCESS_NODE_LIMIT", 100)
    src = save(_wide_concat(200), tmp_path / "in" / "m.onnx")
    r = pipeline.run_passes(src, [make_pass("eliminate-dead-code"), make_pass("cse")], tmp_path / "o" / "m.onnx")
    assert seen == ["eliminate-dead-code", "cse"]
    assert r.ok and r.records[1].counts["nodes_removed"] == 199


def test_r46_a_stage_that_times_out_says_how_large_the_model_is(tmp_path):
    from studio.core.engines import get_engine
    from studio.core.errors import WorkerError
    from studio.core.sandbox import Limits
    from tests.hostile_models import endless_loop

    src = save(endless_loop(), tmp_path / "loop.onnx")
    with pytest.raises(WorkerError) as info:
        get_engine("ort").run(src, {"x": np.zeros(1, "float32")}, limits=Limits(timeout_s=2), pool_key="r46")
    assert info.value.kind == "timeout"
    assert_user_message(str(info.value), "timed out after 2 s on a model of 1 node")


def test_r46_function_bodies_are_their_own_name_scope_in_lint():
    """Every function body of the bomb produces 'y' (as does the graph): that is not a duplicate."""
    from diagnostics.lint import lint_model

    codes = [f.code for f in lint_model(function_bomb(3))]
    assert "DUPLICATE-NAME" not in codes
