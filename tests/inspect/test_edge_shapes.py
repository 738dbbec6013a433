"""Every edge shape the studio reports, with the input dims pinned, equals the tensor ONNX Runtime
produces (R57). The oracle is ONNX Runtime called here: every intermediate value made a graph
output on a copy, graph optimizations off, the backend cases' own inputs (else seeded ones); for the
models ORT has no kernel for, onnx's ReferenceEvaluator (nothing is skipped).

Each model is inspected twice: as written, and with every input dim made symbolic and pinned
back to the fed size (the path dims set on the Overview page take)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from sample_models.catalog import CATALOG
from studio import api
from studio.core.feeds import input_specs, random_feeds
from tests.conftest import backend_models, save
from tests.inspect import nmsfree_head


def _ort_shapes(model: onnx.ModelProto, feeds: dict) -> dict[str, tuple[int, ...]]:
    """name -> shape of every tensor the main graph produces, by a runtime called here: ONNX Runtime;
    where ORT has no kernel (opset-1/6 legacy kernels, a locale-bound StringNormalizer) onnx's own
    ReferenceEvaluator; the training-only Gradient op (no runtime has it) by its definition."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                have.add(o)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - the next oracle
        return _reference_shapes(m, feeds)
    names = [o.name for o in sess.get_outputs()]
    return {n: tuple(v.shape) for n, v in zip(names, sess.run(names, feeds)) if isinstance(v, np.ndarray)}


def _reference_shapes(m: onnx.ModelProto, feeds: dict) -> dict[str, tuple[int, ...]]:
    """onnx.reference on ``m`` (every value an output); a Gradient node's outputs have, by the
    operator's definition, the shapes of its ``xs`` (the tensors differentiated against)."""
    from onnx.reference import ReferenceEvaluator

    grads = [n for n in m.graph.node if n.op_type == "Gradient"]
    shapes: dict[str, tuple[int, ...]] = {}
    if grads:
        rest = [n for n in m.graph.node if n.op_type != "Gradient"]
        copy = onnx.ModelProto()
        copy.CopyFrom(m)
        m = copy
        del m.graph.node[:]
        m.graph.node.extend(rest)
        produced = {o for n in rest for o in n.output}
        keep = [o for o in m.graph.output if o.name in produced]
        del m.graph.output[:]
        m.graph.output.extend(keep)
    ev = ReferenceEvaluator(m)
    names = [o.name for o in m.graph.output]
    shapes.update({n: tuple(v.shape) for n, v in zip(names, ev.run(None, feeds)) if isinstance(v, np.ndarray)})
    for g in grads:
        xs = next(a.strings for a in g.attribute if a.name == "xs")
        for out, x in zip(g.output, xs):
            shapes[out] = tuple(np.shape(feeds[x.decode()] if x.decode() in feeds else shapes[x.decode()]))
    return shapes


def _feeds(path: Path, model: onnx.ModelProto) -> dict:
    init = {t.name for t in model.graph.initializer}
    real = [i for i in model.graph.input if i.name not in init]
    data = sorted(path.parent.glob("test_data_set_0/input_*.pb")) if path.name == "model.onnx" else []
    if data and len(data) == len(real):
        out = {}
        for vi, pb in zip(real, data):
            t = TensorProto()
            t.ParseFromString(pb.read_bytes())
            out[vi.name] = numpy_helper.to_array(t)
        return out
    return random_feeds(input_specs(model))


def _symbolized(model: onnx.ModelProto, feeds: dict) -> tuple[onnx.ModelProto, dict[str, int]]:
    """Every input dim a dim_param, and the dims that pin them back to the fed sizes."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    dims: dict[str, int] = {}
    init = {t.name for t in m.graph.initializer}
    for k, vi in enumerate(m.graph.input):
        if vi.name in init or vi.type.WhichOneof("value") != "tensor_type":
            continue
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            d.dim_param = f"in{k}_{axis}"
            dims[d.dim_param] = int(np.shape(feeds[vi.name])[axis])
    return m, dims


def _written_dims(model: onnx.ModelProto, feeds: dict) -> dict[str, int]:
    dims = {}
    for vi in model.graph.input:
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.dim_param and vi.name in feeds:
                dims[d.dim_param] = int(np.shape(feeds[vi.name])[axis])
    return dims


CORPUS = [s.path for s in CATALOG if s.runs_on_ort] + backend_models()


def _id(p: Path) -> str:
    return p.stem if p.name != "model.onnx" else p.parent.name


def _wrong_edges(path: Path, tmp_path: Path, mode: str) -> tuple[list, int]:
    model = onnx.load(str(path))
    feeds = _feeds(path, model)
    real = _ort_shapes(model, feeds)
    if mode == "pinned":
        sym, dims = _symbolized(model, feeds)
        handle = api.load(save(sym, tmp_path / "pinned.onnx"))
    else:
        handle, dims = api.load(path), _written_dims(model, feeds)
    edges = {e.name: e.shape for e in api.inspect(handle, dims).edges}
    varying = _value_dependent(model)
    wrong = [(n, edges.get(n, "missing"), shape) for n, shape in real.items()
             if edges.get(n, "missing") != shape and not (n in varying and _open(edges.get(n)))]
    return wrong, len(real)


def _open(shape) -> bool:
    return shape is None or not all(isinstance(d, int) for d in shape)


def _value_dependent(model: onnx.ModelProto) -> set[str]:
    from studio.inspect.value_dependence import value_dependent_shapes

    return value_dependent_shapes(model)


# Every model with its inputs pinned; the samples (their own dynamic dims) and the "simple" graphs
# (sequences, Expand to a fed shape, string ops) as written too. The light networks and the
# single-op pytorch cases are static as written: pinning them is the path with more to get wrong.
CASES = [(p, "pinned") for p in CORPUS] + [(p, "written") for p in CORPUS
                                           if p.parent.parent.name == "simple" or p.parent.name == "sample_models"]


@pytest.mark.slow
@pytest.mark.parametrize("path, mode", CASES, ids=[f"{_id(p)}-{m}" for p, m in CASES])
def test_every_edge_equals_what_onnx_runtime_produces(path, mode, tmp_path):
    wrong, compared = _wrong_edges(path, tmp_path, mode)
    assert compared > 0
    assert wrong == []


def test_the_corpus_covers_samples_and_every_backend_family():
    families = {p.parent.parent.name if p.name == "model.onnx" else p.parent.name for p in CORPUS}
    assert {"light", "simple", "pytorch-converted", "pytorch-operator"} <= families
    assert sum(1 for p in CORPUS if p.parent.name == "light") == 9
    assert len(CORPUS) > 150


# ---------------------------------------------------------------------------- formulas are a hint

DIMS = {"batch": 1, "height": nmsfree_head.HEIGHT, "width": nmsfree_head.WIDTH}


def test_a_wrong_exporter_formula_loses_to_the_real_run(tmp_path):
    """The Ultralytics-style head: value_info says 58 anchors kept, the model keeps 60."""
    model = nmsfree_head.build()
    path = save(model, tmp_path / "head.onnx")
    s = api.inspect(api.load(path), DIMS)
    edges = {e.name: e.shape for e in s.edges}
    feeds = {"images": np.random.default_rng(0).standard_normal((1, 3, 12, 16)).astype(np.float32)}
    real = _ort_shapes(model, feeds)
    assert real["dets"] == (nmsfree_head.REAL_K, 80) and real["scores_sorted"] == (1, nmsfree_head.REAL_K)
    assert {n: edges[n] for n in real} == real
    # the wrong formula is named: tensor, formula, its value, the real value, who said so
    by_tensor = {(m.tensor, m.axis): m for m in s.formula_mismatches}
    dets = by_tensor[("dets", 0)]
    assert (dets.formula, dets.formula_value, dets.real_value, dets.source) == (
        nmsfree_head.WRONG_K, nmsfree_head.FORMULA_K, nmsfree_head.REAL_K, "ONNX Runtime run")
    assert {t for t, _ in by_tensor} == {"top_scores", "top_index", "index0", "dets", "scores_sorted"}
    assert s.formula_mismatch_count == 5 and "5 wrong" in s.shape_note
    # the right formulas before the TopK agree with inference: none of them is named
    assert not any(m.tensor in ("cat", "anchors", "scores", "p1") for m in s.formula_mismatches)


def test_a_stale_declared_shape_loses_to_pinned_inference(tmp_path):
    """A static value_info left behind by an edit ([1, 58] for a [1, 60] tensor): inference wins."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 60])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 60])],
                          value_info=[helper.make_tensor_value_info("r", TensorProto.FLOAT, ["n", 58])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    s = api.inspect(api.load(save(m, tmp_path / "m.onnx")), {"n": 2})
    assert {e.name: e.shape for e in s.edges}["r"] == (2, 60)
    (mm,) = s.formula_mismatches
    assert (mm.tensor, mm.axis, mm.formula, mm.real_value, mm.source) == ("r", 1, "58", 60, "ONNX shape inference")


def test_a_declared_output_of_another_rank_is_named(tmp_path):
    """The file declares an output [1, n] that the model computes as [3, 1, 2] (held-out ddddocr_common declares
    '387' [1, seqlen] for a real [W/8, 1, 8210]): each axis matched only at equal ranks, so inspect named nothing.
    Oracle: plain ONNX Runtime's output shape."""
    g = helper.make_graph([helper.make_node("Reshape", ["x", "c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n"])],
                          [numpy_helper.from_array(np.array([3, 1, 2], np.int64), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = save(m, tmp_path / "m.onnx")
    real = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros((2, 3), np.float32)})[0].shape
    s = api.inspect(api.load(path))
    (mm,) = s.formula_mismatches
    assert (mm.tensor, mm.axis, mm.formula_value, mm.real_value) == ("y", -1, 2, len(real))
    assert mm.formula == "[1, n]" and mm.text() == \
        f"'y': the file declares rank 2 ([1, n]); {mm.source} gives rank {len(real)}"
    assert {e.name: e.shape for e in s.edges}["y"] == real


def test_a_size_that_depends_on_the_input_values_is_not_made_up(tmp_path):
    """NonZero's count changes with the data: no number measured on seeded inputs is shown for it;
    a Range whose length comes from a Shape is measured (it depends on the input shape only)."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ReduceSum", ["s"], ["len"], keepdims=0),
             helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", TensorProto.INT64, [], [0])),
             helper.make_node("Constant", [], ["one"], value=helper.make_tensor("o", TensorProto.INT64, [], [1])),
             helper.make_node("Range", ["zero", "len", "one"], ["r"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a"])],
                          [helper.make_tensor_value_info("nz", TensorProto.INT64, None),
                           helper.make_tensor_value_info("r", TensorProto.INT64, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    s = api.inspect(api.load(save(m, tmp_path / "m.onnx")), {"a": 5})
    edges = {e.name: e.shape for e in s.edges}
    assert edges["r"] == (5,)
    assert edges["nz"] is None or not all(isinstance(d, int) for d in edges["nz"])
    assert "depend on the input values" in s.shape_note
    # the oracle: two inputs of the same shape, two NonZero sizes
    a = _ort_shapes(m, {"x": np.array([0, 1, 0, 2, 3], np.float32)})["nz"]
    b = _ort_shapes(m, {"x": np.array([1, 1, 1, 2, 3], np.float32)})["nz"]
    assert a != b


# ---------------------------------------------------------------------------- fix-input-shapes

def test_fix_input_shapes_on_an_ultralytics_style_head_writes_the_real_sizes(tmp_path):
    """Today's sizes came from the wrong formula (58): the static model then failed to load in ONNX
    Runtime ("TopK ... Axis has less than the requested k elements"). The real sizes are written,
    the pipeline's verification passes, and ORT with its optimizer on runs the result."""
    from tests.conftest import sha256_file

    src = save(nmsfree_head.build(), tmp_path / "head.onnx")
    before = sha256_file(src)
    out = tmp_path / "out" / "static.onnx"
    result = api.optimize(api.load(src), passes=["fix-input-shapes"], out_path=out, dims=DIMS)
    assert result.ok, result.summary()
    (rec,) = result.records
    assert rec.counts["formulas_wrong"] == 5 and rec.counts["shapes_measured"] >= 5
    assert any("are wrong and were replaced by the real sizes" in n and "'dets' axis 0" in n and "= 58, real 60" in n
               for n in rec.notes)
    m = onnx.load(out)
    declared = {v.name: [d.dim_value if d.HasField("dim_value") else d.dim_param
                         for d in v.type.tensor_type.shape.dim] for v in [*m.graph.value_info, *m.graph.output]}
    assert declared["dets"] == [60, 80] and declared["top_scores"] == [1, 60] and declared["scores_sorted"] == [1, 60]
    assert all(all(isinstance(d, int) for d in dims) for dims in declared.values())
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 16)).astype(np.float32)
    dets, scores = sess.run(["dets", "scores_sorted"], {"images": x})
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(["dets", "scores_sorted"],
                                                                                {"images": x})
    assert dets.shape == (60, 80) and np.allclose(scores, ref[1]) and np.allclose(dets, ref[0])
    assert sha256_file(src) == before


def test_fix_input_shapes_leaves_data_dependent_sizes_dynamic(tmp_path):
    """An Expand to a shape the user feeds cannot be made static by any run: it stays dynamic, noted."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Expand", ["r", "shape"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1]),
                                helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    out = tmp_path / "static.onnx"
    result = api.optimize(api.load(save(m, tmp_path / "m.onnx")), passes=["fix-input-shapes"], out_path=out,
                          dims={"n": 3})
    assert result.ok, result.summary()
    fixed = onnx.load(out)
    y = fixed.graph.output[0].type.tensor_type
    assert not y.HasField("shape") or not all(d.HasField("dim_value") for d in y.shape.dim)
    assert any("keep a dynamic shape" in n for n in result.records[0].notes)


def test_fix_input_shapes_keeps_an_output_size_only_the_formula_knows(tmp_path):
    """A custom op stops inference and no run can measure it: the output keeps the exporter's formula
    value (the interface needs a size), and the note says it is unchecked."""
    from tests.inspect.test_dims_flow import _custom_then_formula

    out = tmp_path / "static.onnx"
    result = api.optimize(api.load(save(_custom_then_formula(), tmp_path / "m.onnx")), passes=["fix-input-shapes"],
                          out_path=out, dims={"n": 5})
    assert result.ok, result.summary()
    y = onnx.load(out).graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in y] == [10, 3]
    assert any("taken from the exporter's dim formulas, unchecked" in n for n in result.records[0].notes)


def _loop(trip_from_input: bool) -> onnx.ModelProto:
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Add", ["h_in", "h_in"], ["h_out"]),
                              helper.make_node("Identity", ["h_out"], ["scan"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [2])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [2]),
                              helper.make_tensor_value_info("scan", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Loop", ["m" if trip_from_input else "three", "yes", "x"], ["h", "trace"], body=body)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])]
    inits = [numpy_helper.from_array(np.array(True), "yes"), numpy_helper.from_array(np.array(3, np.int64), "three")]
    if trip_from_input:
        inputs.append(helper.make_tensor_value_info("m", TensorProto.INT64, []))
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2]),
                                               helper.make_tensor_value_info("trace", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_loops_length_depends_on_values_only_when_its_trip_count_does():
    from studio.inspect.value_dependence import value_dependent_shapes

    assert value_dependent_shapes(_loop(trip_from_input=False)) == set()
    assert value_dependent_shapes(_loop(trip_from_input=True)) == {"trace"}    # the state keeps its shape
