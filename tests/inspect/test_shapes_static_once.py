"""Four cuts in inspect's shape work for the graph viewer's page (issue 35 item 2), each asserted by what it
does, against an independent oracle:

- a static model's pinned inference is both of the worker's tables: it is shipped once, and the two tables the
  caller gets are equal and not one shared dict (oracle: ONNX's own shape inference on the file, here);
- ``dtype_name`` names each ONNX type once (numpy's naming, the oracle, computed here by hand);
- ``summarize`` sends the worker its job before it sorts the graph for cycles, so the viewer's hierarchy
  (built meanwhile) overlaps the job, and a cycle is still reported;
- with every produced shape known and none from a dim formula, which values vary with the input values is not
  worked out (nothing is measured, nothing can be called value-dependent); with one left open it still is."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import studio.inspect.edge_shapes as edge_shapes
import studio.inspect.summary as summary_mod
from studio import api
from studio.core.types import dtype_name
from studio.inspect.shapes import sandboxed_shapes, shapes_job
from tests.conftest import SAMPLES
from tests.spies import count_calls


class _Ctx:
    def set_stage(self, stage: str) -> None:
        pass


def _static_model(path):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]),
             helper.make_node("Cast", ["b"], ["y"], to=TensorProto.INT64)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_static_models_table_is_shipped_once_and_given_back_as_two(tmp_path):
    path = _static_model(tmp_path / "static.onnx")
    out = shapes_job({"model_path": str(path), "input_shapes": {}, "static": True}, {}, _Ctx()).data
    assert out["concrete"] is None and out["concrete_is_symbolic"] is True
    oracle = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in onnx.shape_inference.infer_shapes(onnx.load(str(path))).graph.value_info}
    symbolic, concrete = sandboxed_shapes(path, onnx.load(str(path)), {}, static=True)
    assert symbolic.values == concrete.values and symbolic.error == concrete.error
    assert symbolic.values is not concrete.values            # the caller may change one without the other
    assert {k: list(symbolic.values[k].shape) for k in oracle} == oracle == {"a": [2, 3], "b": [3, 2]}
    assert symbolic.values["y"].shape == (3, 2) and symbolic.values["y"].dtype == "int64"


def test_a_dynamic_models_two_tables_still_come_apart(tmp_path):
    """Not static: the worker infers twice and both tables travel (the pinned one concrete, the other not)."""
    path = tmp_path / "dyn.onnx"
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    symbolic, concrete = sandboxed_shapes(path, onnx.load(str(path)), {"x": [5, 3]})
    assert symbolic.values["y"].shape == ("n", 3) and concrete.values["y"].shape == (5, 3)


def test_dtype_names_are_numpys_and_computed_once_per_type():
    oracle = {TensorProto.FLOAT: str(np.dtype(np.float32)), TensorProto.INT64: str(np.dtype(np.int64)),
              TensorProto.FLOAT16: str(np.dtype(np.float16)), TensorProto.BOOL: str(np.dtype(np.bool_)),
              TensorProto.STRING: "string", TensorProto.UNDEFINED: "undefined"}
    dtype_name.cache_clear()
    for _ in range(3):
        assert {t: dtype_name(t) for t in oracle} == oracle
    info = dtype_name.cache_info()
    assert info.misses == len(oracle) and info.hits == 2 * len(oracle)


def test_the_worker_job_goes_out_before_the_cycle_sort(monkeypatch, tmp_path):
    calls: list[str] = []
    real_shapes, real_cycles = summary_mod.sandboxed_shapes, summary_mod.cycle_nodes

    def shapes(*a, **k):
        calls.append("worker job")
        return real_shapes(*a, **k)

    def cycles(*a, **k):
        calls.append("cycle sort")
        return real_cycles(*a, **k)

    monkeypatch.setattr(summary_mod, "sandboxed_shapes", shapes)
    monkeypatch.setattr(summary_mod, "cycle_nodes", cycles)
    s = api.inspect(api.load(SAMPLES / "cnn_unfused.onnx"), memory=False)
    assert calls == ["worker job", "cycle sort"] and s.check_ok
    # a node reading its own output: still reported (the sort still runs, after the job)
    g = helper.make_graph([helper.make_node("Add", ["x", "z"], ["z"], name="loop")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    path = tmp_path / "cyclic.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    calls.clear()
    s = api.inspect(api.load(path), memory=False)
    assert calls == ["worker job", "cycle sort"]
    assert not s.check_ok and "loop" in s.check_message


def _record_walks(monkeypatch) -> list[tuple]:
    return count_calls(monkeypatch, edge_shapes, "value_dependent_shapes")


def test_a_fully_inferred_model_skips_the_value_dependence_walk(monkeypatch, tmp_path):
    walks = _record_walks(monkeypatch)
    s = api.inspect(api.load(_static_model(tmp_path / "static.onnx")), memory=False)
    assert walks == []
    assert s.shape_note is None and s.formula_mismatch_count == 0
    oracle = onnx.shape_inference.infer_shapes(onnx.load(str(tmp_path / "static.onnx"))).graph
    declared = {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim) for vi in oracle.value_info}
    assert {e.name: e.shape for e in s.edges if e.name in declared} == declared


def test_an_open_shape_still_gets_the_walk_and_its_note(monkeypatch, tmp_path):
    """NonZero's count depends on the data: the walk runs and the note says the shape was not measured."""
    walks = _record_walks(monkeypatch)
    g = helper.make_graph([helper.make_node("NonZero", ["x"], ["nz"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                          [helper.make_tensor_value_info("nz", TensorProto.INT64, None)])
    path = tmp_path / "nz.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    s = api.inspect(api.load(path), memory=False)
    assert walks
    assert "depend on the input values" in s.shape_note


def test_a_model_without_if_skips_the_branch_walk_and_one_with_if_still_chooses(monkeypatch):
    """The If-branch FLOPs walk (every node of every graph) runs only where there is an If to decide."""
    walked = count_calls(monkeypatch, summary_mod, "subgraphs_of")
    s = api.inspect(api.load(SAMPLES / "cnn_unfused.onnx"), memory=False)
    assert walked == [] and s.flops.branches == () and s.flops.flops > 0
    s = api.inspect(api.load(SAMPLES / "if_loop.onnx"), memory=False)

    def ifs(graph) -> int:                   # the oracle: the file's If nodes, in bodies too
        return sum((n.op_type == "If") + sum(ifs(a.g) for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
                   for n in graph.node)

    n_ifs = ifs(onnx.load(str(SAMPLES / "if_loop.onnx")).graph)
    assert walked and n_ifs == 2 and len(s.flops.branches) == n_ifs
