"""RELIABILITY.md R30 (graph-pass regression graphs) and R17 (invalid graphs:
passes refuse to run, with the checker's message)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from passes.pipeline import resolve_passes, run_passes
from passes.registry import make_pass
from studio.verification.verifier import interface_problems
from studio import api
from studio.core.errors import StudioError
from tests.conftest import assert_user_message, parse_model, save, sha256_file

H = '<ir_version: 8, opset_import: ["" : 17]>'
W = ", ".join(str(v) for v in np.round(np.linspace(-1, 1, 16), 3))

R30 = {
    "multi_consumer_pad_slice_matmul": H + f"""
    g (float[1,2,4,4] x, float[4,4] v) => (float[1,2,6,6] a, float[1,2,6,6] b, float[1,2,2,4] c, float[1,2,2,4] d,
                                          float[4,4] e, float[4,4] f, float[1,2,4,4] g, float[1,2,4,4] h)
    <int64[8] pads = {{0,0,1,1,0,0,1,1}}, int64[8] nopads = {{0,0,0,0,0,0,0,0}}, int64[1] s = {{0}},
     int64[1] en = {{2}}, int64[1] ax = {{2}}, float[4,4] w = {{{W}}}, float[4] bias = {{1,2,3,4}}> {{
      p = Pad(x, pads)
      a = Relu(p)
      b = Sigmoid(p)
      sl = Slice(x, s, en, ax)
      c = Neg(sl)
      d = Abs(sl)
      mm = MatMul(v, w)
      e = Add(mm, bias)
      f = Relu(mm)
      pz = Pad(x, nopads)
      g = Relu(pz)
      h = Neg(pz)
    }}""",
    "negative_axes": H + """
    g (float[2,3,4] x) => (float[2,3,4] y, float[2,1,4] z, float[2,3,4,1] u, float[2,3,8] w)
    <int64[1] s = {0}, int64[1] big = {2147483647}, int64[1] m1 = {-1}, int64[1] m2 = {-2}, int64[1] one = {1},
     int64[1] two = {2}, int64[4] shp = {2, 3, 4, 1}> {
      a = Slice(x, s, big, m1)
      b = Softmax<axis=-1>(a)
      t1 = Transpose<perm=[0,2,1]>(b)
      t2 = Sigmoid(t1)
      y = Transpose<perm=[0,2,1]>(t2)
      z = Slice(x, one, two, m2)
      uu = Unsqueeze(x, m1)
      u = Reshape(uu, shp)
      w = Concat<axis=-1>(x, y)
    }""",
    "zero_size_dims": H + """
    g (float[0,4] x, float[N,4] v) => (float[0,4] y, float[0,3] z, float[N,0] e)
    <int64[2] shp = {0, 4}, float[4,3] w = {1,2,3,4,5,6,7,8,9,10,11,12}, float[3] b = {1,2,3},
     int64[2] zshape = {1, 0}, int64[1] s = {0}, int64[1] en = {0}, int64[1] ax = {1}> {
      r = Reshape(x, shp)
      y = Relu(r)
      mm = MatMul(x, w)
      z = Add(mm, b)
      k = ConstantOfShape(zshape)
      sl = Slice(v, s, en, ax)
      e = Add(sl, k)
    }""",
    "intermediate_is_graph_output": H + """
    g (float[2,4] x) => (float[2,4] a, float[2,4] b, float[2,4] c, float[4,2] t, float[2,4] y)
    <float[4,4] w = {1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1}, float[4] bias = {1,2,3,4}, float[1] one = {1.0}> {
      a = Relu(x)
      b = Identity(a)
      c = MatMul(b, w)
      d = Add(c, bias)
      t = Transpose<perm=[1,0]>(d)
      u = Transpose<perm=[1,0]>(t)
      y = Mul(u, one)
    }""",
    "cast_mul_one": H + """
    g (int32[1] xi, float[3] xf) => (float[3] y, float[3] z, float[3] q)
    <float[3] ones3 = {1.0, 1.0, 1.0}, float[1] one = {1.0}> {
      c = Cast<to=1>(xi)
      y = Mul(c, ones3)
      cf = Cast<to=1>(xf)
      z = Mul(cf, one)
      ci = Cast<to=6>(xf)
      cb = Cast<to=1>(ci)
      q = Mul(cb, ones3)
    }""",
}

PASSES = ["eliminate-identity", "fold-constants", "eliminate-dead-code", "dedup-initializers", "cse", "fuse-conv-bn",
          "fuse-matmul-add", "cancel-transposes", "merge-reshapes", "fuse-layernorm", "fuse-gelu"]


def _check(src, out, passes):
    r = run_passes(src, passes, out)
    assert r.ok, [(x.name, x.status, x.message) for x in r.records]
    onnx.checker.check_model(str(r.output), full_check=True)
    assert interface_problems(onnx.load(str(src)), onnx.load(str(r.output))) == []
    again = run_passes(r.output, [make_pass(p.name, **p.options) for p in passes], out.parent / "again" / "m.onnx")
    assert not again.modified, [(x.name, x.changes) for x in again.records if x.modified]
    return r


@pytest.mark.parametrize("case", sorted(R30))
def test_r30_safe_and_ort_presets(case, tmp_path):
    src = save(parse_model(R30[case]), tmp_path / "in" / "m.onnx")
    r = _check(src, tmp_path / "safe" / "m.onnx", resolve_passes("safe"))
    if case == "cast_mul_one":
        result = onnx.load(str(r.output))
        # int32->float Cast and the broadcasting Mul stay; float->float Cast goes; x->int->float round trip stays.
        assert [n.op_type for n in result.graph.node].count("Cast") == 3
        assert [n.op_type for n in result.graph.node].count("Mul") >= 2
    _check(src, tmp_path / "ort" / "m.onnx", resolve_passes("ort"))


@pytest.mark.slow
@pytest.mark.parametrize("name", PASSES)
@pytest.mark.parametrize("case", sorted(R30))
def test_r30_each_pass_alone(case, name, tmp_path):
    src = save(parse_model(R30[case]), tmp_path / "in" / "m.onnx")
    _check(src, tmp_path / "out" / "m.onnx", [make_pass(name)])


def _r17_models() -> dict[str, onnx.ModelProto]:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    ops = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]

    def mk(nodes, inputs=(x,), outputs=(y,), functions=()):
        return helper.make_model(helper.make_graph(nodes, "g", list(inputs), list(outputs)), opset_imports=ops,
                                 ir_version=8, functions=list(functions))

    rec = helper.make_function("local", "Rec", ["a"], ["b"], [helper.make_node("Rec", ["a"], ["b"], domain="local")],
                               ops)
    return {
        "recursive function": mk([helper.make_node("Rec", ["x"], ["y"], domain="local")], functions=[rec]),
        "graph cycle": mk([helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Relu", ["y"], ["t"])]),
        "missing node input": mk([helper.make_node("Add", ["x", "nope"], ["y"])]),
        "duplicate output names": mk([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])]),
        "output not produced": mk([helper.make_node("Relu", ["x"], ["t"])]),
        "empty graph": mk([], (), ()),
    }


@pytest.mark.parametrize("case", sorted(_r17_models()))
def test_r17_passes_refuse_invalid_graphs(case, tmp_path):
    src = save(_r17_models()[case], tmp_path / "in" / "m.onnx")
    before = sha256_file(src)
    with pytest.raises(StudioError) as err:
        api.optimize(api.load(src), preset="safe", out_path=tmp_path / "out" / "m.onnx")
    assert_user_message(str(err.value), "cannot optimize")
    assert "onnx.checker" in str(err.value) or "no outputs" in str(err.value)
    with pytest.raises(StudioError):          # the pipeline itself refuses too (not only the facade)
        run_passes(src, resolve_passes("safe"), tmp_path / "out2" / "m.onnx")
    assert sha256_file(src) == before
    assert not (tmp_path / "out" / "m.onnx").exists() and not (tmp_path / "out2" / "m.onnx").exists()


def test_r14_expand_bomb_is_neither_folded_nor_allowed_to_take_the_studio_down(tmp_path):
    from onnx import numpy_helper

    from studio.core.sandbox import Limits

    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    shp = numpy_helper.from_array(np.array([2**20, 2**20], np.int64), "shp")          # 4 TiB of float32
    graph = helper.make_graph(
        [helper.make_node("Expand", ["one", "shp"], ["big"]), helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
         helper.make_node("Identity", ["x"], ["xi"]), helper.make_node("Add", ["xi", "s"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [one, shp])
    src = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
               tmp_path / "in" / "m.onnx")
    r = run_passes(src, resolve_passes("safe"), tmp_path / "out" / "m.onnx",
                     limits=Limits(timeout_s=30, memory_bytes=2 * 2**30))
    fold = next(x for x in r.records if x.name == "fold-constants")
    assert fold.status == "unchanged" and any("Expand" in n and "MiB" in n for n in fold.notes)
    assert r.reference.startswith("structure only") and "cannot run the original" in r.reference
    assert r.ok and "Expand" in [n.op_type for n in onnx.load(str(r.output)).graph.node]


def test_r18_shape_traps_are_refused_by_the_full_check(tmp_path):
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], strides=[0, 0])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], [w])
    src = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
               tmp_path / "in" / "m.onnx")
    with pytest.raises(StudioError) as err:
        api.optimize(api.load(src), preset="safe", out_path=tmp_path / "out" / "m.onnx")
    assert_user_message(str(err.value), "cannot optimize", "full check")
