"""Inspect figures against hand-computed values on tiny models, and the
structural facts (subgraphs, functions, custom ops, unused domains)."""

from __future__ import annotations

import onnx
import pytest

from studio import api
from tests.conftest import SAMPLES, parse_model, save


def _summary(tmp_path, text: str, dims=None, name="m.onnx"):
    return api.inspect(api.load(save(parse_model(text), tmp_path / name)), dims)


def test_conv_relu_pool_figures(tmp_path):
    s = _summary(tmp_path, """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1,3,8,8] x) => (float[1,4,4,4] y)
    <float[4,3,3,3] W = {0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1}, float[4] B = {0,0,0,0}>
    {
      c = Conv <pads = [1,1,1,1], kernel_shape = [3,3]> (x, W, B)
      r = Relu (c)
      y = MaxPool <kernel_shape = [2,2], strides = [2,2]> (r)
    }""")
    by = {n.op_type: n for n in s.nodes}
    assert by["Conv"].macs == 256 * 27 and by["Conv"].flops == 2 * 256 * 27 + 256
    assert by["Relu"].flops == 256
    assert by["MaxPool"].flops == 64 * 4
    assert s.flops.flops == 2 * 6912 + 256 + 256 + 256 and s.flops.macs == 6912
    assert s.params.elements == 108 + 4 and s.params.bytes == 112 * 4 and s.params.initializers == 2
    # Lifetimes: x (768 B) + c (1 KiB) at Conv; Relu runs in place (ORT's kernel writes r into c's
    # buffer at c's last use: 1 KiB, not 2); r + y (256 B) at MaxPool. The peak is at the Conv.
    assert s.memory.peak_activation_bytes == 768 + 1024 and s.memory.peak_after_node == "Conv_0"
    assert [t.name for t in s.inputs] == ["x"] and s.outputs[0].shape == (1, 4, 4, 4)


def test_gemm_and_batched_matmul(tmp_path):
    s = _summary(tmp_path, """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,16] a, float[16,8] b, float[8] c, float[2,4,8] p, float[2,8,5] q) => (float[2,8] y, float[2,4,5] z)
    {
      y = Gemm (a, b, c)
      z = MatMul (p, q)
    }""")
    by = {n.op_type: n for n in s.nodes}
    assert by["Gemm"].macs == 2 * 8 * 16 and by["Gemm"].flops == 2 * 256 + 16
    assert by["MatMul"].macs == 2 * 4 * 5 * 8


def test_dynamic_dims_use_user_values(tmp_path):
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[N,16] x, float[16,8] w) => (float[N,8] y) { y = MatMul (x, w) }"""
    assumed = _summary(tmp_path, text)
    assert assumed.flops.macs == 16 * 8 and assumed.flops.assumed_dims == ("N",)
    given = _summary(tmp_path, text, {"N": 4}, name="m2.onnx")
    assert given.flops.macs == 4 * 16 * 8 and given.flops.assumed_dims == ()
    assert given.inputs[0].shape == ("N", 16)        # symbolic dims are kept for display


def test_unused_domain_and_custom_op(tmp_path):
    s = _summary(tmp_path, """
    <ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1, "mmdeploy" : 1]>
    g (float[1,3,4,4] x, float[1,4,4,2] grid) => (float[1,3,4,4] y)
    { y = mmdeploy.grid_sampler <interpolation_mode = 0, padding_mode = 0, align_corners = 0> (x, grid) }""")
    used = {o.domain: o.used for o in s.opsets}
    assert used == {"": False, "com.microsoft": False, "mmdeploy": True}
    assert [(c.domain, c.op_type) for c in s.custom_ops] == [("mmdeploy", "grid_sampler")]


def test_unknown_default_domain_op_is_custom(tmp_path):
    m = parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) { y = Relu (x) }""")
    m.graph.node[0].op_type = "NotARealOp"
    s = api.inspect(api.load(save(m, tmp_path / "m.onnx")))
    assert [c.op_type for c in s.custom_ops] == ["NotARealOp"]
    assert not s.check_ok


def test_subgraphs_are_counted():
    s = api.inspect(api.load(SAMPLES / "if_loop.onnx"))
    nc = s.node_counts
    assert nc.main == 5 and nc.total == 22 and nc.subgraphs >= 3
    assert any(n.scope for n in s.nodes)
    hist = {o.op_type: o.count for o in s.op_histogram}
    assert hist["If"] == 2 and hist["Loop"] == 1        # the nested If is counted too


def test_constant_node_weights_are_params():
    s = api.inspect(api.load(SAMPLES / "constant_weights.onnx"))
    assert s.params.initializers == 0 and s.params.constant_nodes >= 4
    assert s.params.elements > 1000


def test_weight_stripped_light_model_counts_generated_weights():
    from tests.conftest import ONNX_DATA

    s = api.inspect(api.load(ONNX_DATA / "light" / "light_resnet50.onnx"))
    assert 25.5e6 < s.params.elements < 25.7e6          # ResNet-50: 25.6 M parameters
    assert 4.0e9 < s.flops.macs < 4.2e9                 # ResNet-50: 4.1 GMACs at 224x224
    assert s.memory.peak_activation_bytes < 20 * 2**20  # weights are not activations


def test_local_function_calls_are_not_custom_ops(tmp_path):
    fn = onnx.helper.make_function("local", "Twice", ["x"], ["y"], [onnx.helper.make_node("Add", ["x", "x"], ["y"])],
                                   [onnx.helper.make_opsetid("", 17)])
    g = onnx.helper.make_graph([onnx.helper.make_node("Twice", ["x"], ["y"], domain="local")], "g",
                               [onnx.helper.make_tensor_value_info("x", 1, [2])],
                               [onnx.helper.make_tensor_value_info("y", 1, [2])])
    m = onnx.helper.make_model(g, functions=[fn], ir_version=8,
                               opset_imports=[onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("local", 1)])
    s = api.inspect(api.load(save(m, tmp_path / "m.onnx")))
    assert s.custom_ops == () and s.local_functions == ("local::Twice",)
    assert s.node_counts.function_nodes == 1 and s.node_counts.functions == 1


def test_external_weights_stats_read_on_demand():
    from studio.inspect.weights import weight_stats

    h = api.load(SAMPLES / "external_data.onnx")
    name = h.proto.graph.initializer[0].name
    st = weight_stats(h, name)
    assert st.elements > 0 and st.std is not None and st.std > 0 and sum(st.histogram_counts) == st.elements


def test_node_details_attributes_and_weights():
    from studio.inspect.node_details import node_details

    h = api.load(SAMPLES / "cnn_unfused.onnx")
    s = api.inspect(h)
    conv = next(n for n in s.nodes if n.op_type == "Conv")
    d = node_details(h, s, conv.id)
    assert {a.name for a in d.attributes} >= {"kernel_shape"}
    assert any(p.is_weight for p in d.inputs) and d.outputs[0].shape.startswith("[")


@pytest.mark.parametrize("name", ["cnn_unfused", "transformer_block", "if_loop", "external_data"])
def test_json_is_serializable(name):
    import json

    s = api.inspect(api.load(SAMPLES / f"{name}.onnx"))
    d = json.loads(json.dumps(s.to_dict(), allow_nan=False))
    assert d["schema_version"] == 1 and d["node_counts"]["total"] == len(d["nodes"])


def _if_model(tmp_path):
    """y = If(c) then Relu(MatMul(x, W)) else Relu(x); x: float[1,64], W: [64,64]."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    vi = helper.make_tensor_value_info
    then = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["t1"], name="mm"),
                              helper.make_node("Relu", ["t1"], ["t2"], name="r1")], "then", [],
                             [vi("t2", TensorProto.FLOAT, [1, 64])])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="r2")], "else", [],
                              [vi("e", TensorProto.FLOAT, [1, 64])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
                          "g", [vi("x", TensorProto.FLOAT, [1, 64]), vi("c", TensorProto.BOOL, [])],
                          [vi("y", TensorProto.FLOAT, [1, 64])],
                          initializer=[numpy_helper.from_array(np.ones((64, 64), np.float32), "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return api.inspect(api.load(save(m, tmp_path / "if.onnx")))


def test_if_counts_the_larger_branch_and_bodies_count_in_memory(tmp_path):
    s = _if_model(tmp_path)
    then_flops, else_flops = 2 * 64 * 64 + 64, 64
    assert s.flops.flops == then_flops                       # not then + else: one branch runs
    (b,) = s.flops.branches
    assert (b.node, b.then_flops, b.else_flops, b.counted) == ("if", then_flops, else_flops, "then_branch")
    assert {k: v for k, v in s.flops.by_op if v} == {"MatMul": 2 * 64 * 64, "Relu": 64}
    assert s.to_dict()["flops"]["branches"][0]["counted"] == "then_branch"
    # While the If runs: x (256 B) and c (1 B) outside, t1 + t2 (512 B) in the then branch.
    assert s.memory.peak_activation_bytes == 256 + 1 + 512
    assert s.memory.peak_after_node == "/if/then_branch/r1"


def test_unknown_dim_is_reported(tmp_path):
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[N,16] x, float[16,8] w) => (float[N,8] y) { y = MatMul (x, w) }"""
    s = _summary(tmp_path, text, {"N": 2, "foo": 3})
    assert s.flops.unknown_dims == ("foo",) and s.flops.macs == 2 * 16 * 8


def test_a_cyclic_graph_fails_inspect_s_check_by_name(tmp_path):
    """A graph whose Add reads Relu's output and Relu reads Add's: plain ORT refuses it ('not acyclic'). inspect's
    check now fails naming both nodes and the cycle, as check and memory do."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["a"], name="add"),
                           helper.make_node("Relu", ["a"], ["b"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])])
    path = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "cycle.onnx")
    with pytest.raises(Exception, match="not acyclic"):          # the oracle: plain ONNX Runtime refuses it
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    s = api.inspect(api.load(path))
    assert not s.check_ok
    assert s.check_message.startswith("the graph has a cycle: 2 node(s) in it or waiting on it ('add', 'relu')")
    assert api.inspect(api.load(SAMPLES / "gpt2_decoder_merged.onnx")).check_ok     # If branches: no cycle
