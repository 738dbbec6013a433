"""convert-fp16 keeps in float32 the nodes whose float32 values, measured on its feeds, leave float16's range
(|x| > 65504): a hand-written LayerNorm (jax2tf's, as corpus magika's: variance = E[h^2] - E[h]^2) of a large
activation (h ~ 500 +- 600), whose squares reach ~1e6. Each term passes through a Slice + Reshape view: ONNX
Runtime's CPU provider has float16 kernels for those two, so in a plain conversion both terms are stored in
float16 there, become inf, and inf - inf is NaN in every output value (ORT computes the other ops in float32
behind its own Casts, at any graph optimization level). Oracle: plain ONNX Runtime on the float32 model."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from passes.fp16_ranges import name_nodes
from passes.pipeline import run_passes
from passes.registry import make_pass
from tests.conftest import ort_reference, save

_X = np.random.default_rng(7).standard_normal((1, 16)).astype(np.float32)


def _layernorm_nodes(h: str, y: str, p: str = "") -> list[onnx.NodeProto]:
    """y = (h - E[h]) / sqrt(E[h^2] - E[h]^2 + eps), each term through a Slice + Reshape view."""
    return [helper.make_node("ReduceMean", [h], [p + "mean"], axes=[-1], name=p + "mean"),
            helper.make_node("Sub", [h, p + "mean"], [p + "d"], name=p + "center"),
            helper.make_node("Pow", [h, "two"], [p + "sq"], name=p + "square"),
            helper.make_node("Slice", [p + "sq", "s0", "s1", "ax"], [p + "sqs"], name=p + "sq_slice"),
            helper.make_node("Reshape", [p + "sqs", "grid"], [p + "sqv"], name=p + "sq_grid"),
            helper.make_node("ReduceMean", [p + "sqv"], [p + "ex2"], axes=[1, 2], name=p + "mean_sq"),
            helper.make_node("Pow", [p + "mean", "two"], [p + "m2"], name=p + "sq_mean"),
            helper.make_node("Slice", [p + "m2", "s0", "s1", "ax"], [p + "m2s"], name=p + "m2_slice"),
            helper.make_node("Reshape", [p + "m2s", "one3"], [p + "m2v"], name=p + "m2_view"),
            helper.make_node("Sub", [p + "ex2", p + "m2v"], [p + "var"], name=p + "variance"),
            helper.make_node("Add", [p + "var", "eps"], [p + "ve"], name=p + "add_eps"),
            helper.make_node("Sqrt", [p + "ve"], [p + "std"], name=p + "std"),
            helper.make_node("Div", [p + "d", p + "std"], [y], name=p + "normalize")]


def _weights() -> list[onnx.TensorProto]:
    w = (np.random.default_rng(0).standard_normal((16, 64)) * 150).astype(np.float32)
    arrays = {"W": w, "bias": np.full((64,), 500, np.float32), "two": np.array(2, np.float32),
              "eps": np.array(1e-5, np.float32), "grid": np.array([1, 8, 8], np.int64),
              "one3": np.array([1, 1, 1], np.int64), "s0": np.array([0], np.int64), "s1": np.array([64], np.int64),
              "ax": np.array([1], np.int64)}
    return [numpy_helper.from_array(v, k) for k, v in arrays.items()]


_PROJ = [helper.make_node("MatMul", ["x", "W"], ["h0"], name="proj"),
         helper.make_node("Add", ["h0", "bias"], ["h"], name="proj_bias")]


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def handwritten_layernorm() -> onnx.ModelProto:
    nodes = [*_PROJ, *_layernorm_nodes("h", "y")]
    return _model(helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 64])], _weights()))


def layernorm_in_if_branch() -> onnx.ModelProto:
    """The same LayerNorm inside an If's then-branch (the else-branch scales h down): the nodes kept float32 sit
    in a body, where the converter's own Casts around them would land in the top graph."""
    then = helper.make_graph(_layernorm_nodes("h", "ty", "t_"), "then", [],
                             [helper.make_tensor_value_info("ty", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Mul", ["h", "small"], ["e0"], name="e_scale"),
                               helper.make_node("Reshape", ["e0", "flat3"], ["ey"], name="e_shape")], "else", [],
                              [helper.make_tensor_value_info("ey", TensorProto.FLOAT, None)])
    nodes = [*_PROJ,
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum_x"),
             helper.make_node("Greater", ["s", "minus_big"], ["cond"], name="always"),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other, name="branch")]
    inits = [*_weights(), numpy_helper.from_array(np.array(1e-3, np.float32), "small"),
             numpy_helper.from_array(np.array([1, 1, 64], np.int64), "flat3"),
             numpy_helper.from_array(np.array(-1e9, np.float32), "minus_big")]
    return _model(helper.make_graph(nodes, "ln_if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 64])], inits))


def _converted(model: onnx.ModelProto, tmp_path, **options):
    src = save(model, tmp_path / "in" / "m.onnx")
    np.savez(tmp_path / "x.npz", x=_X)
    r = run_passes(src, [make_pass("convert-fp16", measure=False, inputs=str(tmp_path / "x.npz"), **options)],
                   tmp_path / "out" / "m.onnx")
    return src, r


def _plain_fp16_overflows(model: onnx.ModelProto) -> bool:
    """The premise, by plain ORT: its own converter's result (nothing kept float32) is NaN here."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    raw = convert_float_to_float16(model, keep_io_types=True)
    got = ort_reference(raw, {"x": _X})
    return not all(np.isfinite(v).all() for v in got.values())


def _converted_where_plain_overflows(model: onnx.ModelProto, tmp_path):
    """The premise (plain ORT conversion is NaN here), then the pass's run, which must change the model."""
    assert _plain_fp16_overflows(model)
    src, r = _converted(model, tmp_path)
    rec = r.records[0]
    assert r.ok and rec.status == "changed", rec.message
    return src, r, rec


def test_layernorm_variance_beyond_fp16_is_kept_float32(tmp_path):
    src, r, rec = _converted_where_plain_overflows(handwritten_layernorm(), tmp_path)
    kept = {line.split(" (")[0] for line in rec.details["kept_fp32"]}
    # every node that reads or writes |x| > 16376 (squares ~1e6, their means, the variance ~1e5); the
    # projection, the centring and the division (|x| < 3000) stay float16
    assert kept == {"square", "sq_slice", "sq_grid", "mean_sq", "sq_mean", "m2_slice", "m2_view", "variance",
                    "add_eps", "std"}, kept
    assert any(w.startswith("10 node(s) kept float32") and "square (Pow): writes 'sq'" in w for w in rec.warnings)
    out = onnx.load(str(r.output))
    onnx.checker.check_model(out, full_check=True)
    by_name = {n.name: n for n in out.graph.node}
    assert by_name["proj"].output[0] in {vi.name for vi in out.graph.value_info
                                         if vi.type.tensor_type.elem_type == TensorProto.FLOAT16}
    want, got = ort_reference(src, {"x": _X})["y"], ort_reference(out, {"x": _X})["y"]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=2e-2)    # normalized values (|y| < 3) in float16


def test_layernorm_in_an_if_branch_is_kept_float32_in_the_branch(tmp_path):
    src, r, rec = _converted_where_plain_overflows(layernorm_in_if_branch(), tmp_path)
    assert "t_variance (" in " ".join(rec.details["kept_fp32"])
    out = onnx.load(str(r.output))
    onnx.checker.check_model(out, full_check=True)
    then = next(a.g for n in out.graph.node if n.op_type == "If" for a in n.attribute if a.name == "then_branch")
    assert any(n.op_type == "Cast" for n in then.node)       # the float32 island's Casts live in the branch
    want, got = ort_reference(src, {"x": _X})["y"], ort_reference(out, {"x": _X})["y"]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=2e-2)


def test_an_overflow_left_in_float16_is_refused_not_written(tmp_path):
    """With the measurement off the squares overflow: the pass says so (inf/NaN where float32 is finite)
    rather than hand verification a NaN model."""
    _, r = _converted(handwritten_layernorm(), tmp_path, keep_out_of_range=False)
    rec = r.records[0]
    assert not r.ok and rec.status == "error"
    assert "inf/NaN where float32 is finite" in rec.message and "'y'" in rec.message, rec.message


def test_optimize_inputs_reach_the_fp16_measurement_and_the_cli_prints_what_was_kept(tmp_path, capfd):
    """``optimize --inputs X.npz --passes convert-fp16``: the pass measures its ranges on X (the request's inputs
    are the pass's own unless ``--set convert-fp16.inputs=`` says otherwise) and the text report says which nodes
    stayed float32. Oracle: the kept set is the one measured on X above; on other inputs (x = 0: h = 500, squares
    2.5e5) it would differ."""
    from passes.pipeline import request_passes
    from studio.core.requests import OptimizeRequest
    from tests.clirun import run_cli

    src = save(handwritten_layernorm(), tmp_path / "in" / "m.onnx")
    np.savez(tmp_path / "x.npz", x=_X)
    chosen = request_passes(OptimizeRequest(passes=["convert-fp16"], inputs=str(tmp_path / "x.npz")))
    assert chosen[0].options["inputs"] == str((tmp_path / "x.npz").resolve())
    r = run_cli(capfd, ["optimize", src, "--passes", "convert-fp16", "--inputs", tmp_path / "x.npz",
                        "-o", tmp_path / "out" / "m.onnx"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning: 10 node(s) kept float32" in r.stdout and "square (Pow)" in r.stdout, r.stdout


def test_name_nodes_names_the_unnamed_nodes_of_the_graph_and_its_bodies_not_of_functions():
    """The converter blocks nodes by name: every unnamed node of the main graph and of its If branches gets
    ``fp16_node_N``, N counting from 0 past names already taken, the main graph's nodes first (by hand: 0, 2
    past the else branch's 'fp16_node_1', 3, then 4 in the then branch, walked after the else branch); a model
    function's node is left alone (the converter does not convert functions)."""

    def branch(name: str, node_name: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("Relu", ["x"], [name + "_o"], name=node_name)], name, [],
                                 [helper.make_tensor_value_info(name + "_o", TensorProto.FLOAT, [1])])

    graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["a"]),
         helper.make_node("If", ["c"], ["y"], then_branch=branch("then", ""),
                          else_branch=branch("else", "fp16_node_1")),
         helper.make_node("Neg", ["a"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
              helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in ("y", "z")])
    fn = helper.make_function("local", "f", ["p"], ["q"], [helper.make_node("Relu", ["p"], ["q"])],
                              [helper.make_opsetid("", 17)])
    model = helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 17)])
    assert name_nodes(model) == 4
    assert [n.name for n in model.graph.node] == ["fp16_node_0", "fp16_node_2", "fp16_node_3"]
    bodies = {a.name: a.g for a in model.graph.node[1].attribute}
    assert bodies["then_branch"].node[0].name == "fp16_node_4"
    assert bodies["else_branch"].node[0].name == "fp16_node_1"
    assert model.functions[0].node[0].name == ""
