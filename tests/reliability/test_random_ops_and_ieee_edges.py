"""R36 (random and stateful ops are never folded, merged or removed; verification says the model
is nondeterministic instead of blaming a pass) and R37 (IEEE edge cases through fusions)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

from passes.pipeline import resolve_passes, run_passes
from passes.registry import make_pass
from studio.verification.verifier import Verifier
from tests.conftest import save, sha256_file

# ---------------------------------------------------------------------------------------- R36

_F4 = [4, 16]   # 64 draws: two runs never agree by chance


def _const(name: str, value, dtype=np.float32) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value, dtype), name)


def _random_node(op: str, out: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """One random op whose inputs are all constants (so a folder could evaluate it), output float[1,4]."""
    if op == "Bernoulli":
        return [helper.make_node("Bernoulli", ["p"], [out])], [_const("p", np.full(_F4, 0.5))]
    if op in ("RandomNormal", "RandomUniform"):
        return [helper.make_node(op, [], [out], shape=_F4)], []
    if op in ("RandomNormalLike", "RandomUniformLike"):
        return [helper.make_node(op, ["c"], [out])], [_const("c", np.zeros(_F4))]
    if op == "Multinomial":
        return ([helper.make_node("Multinomial", ["logits"], [out + "_i"], sample_size=16),
                 helper.make_node("Cast", [out + "_i"], [out], to=T.FLOAT)],
                [_const("logits", np.zeros(_F4))])
    if op == "Dropout":
        return ([helper.make_node("Dropout", ["c", "ratio", "training"], [out])],
                [_const("c", np.ones(_F4)), _const("ratio", 0.5), _const("training", True, np.bool_)])
    raise AssertionError(op)


RANDOM = ["Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
          "Dropout"]


def _model(op: str, *, twice: bool = False, deterministic_output: bool = True) -> onnx.ModelProto:
    """y = x + draw (+ a second draw on the same inputs when ``twice``); z = x * 2 (deterministic);
    an Identity that eliminate-identity removes, so verification runs in every preset."""
    nodes, inits = _random_node(op, "r1")
    total = "r1"
    if twice:
        second, _ = _random_node(op, "r2")
        for n in second:     # same inputs (a CSE candidate), different output names
            n.output[0] = n.output[0].replace("r1", "r2")
            n.input[:] = [i.replace("r1", "r2") for i in n.input]
        nodes += second
        nodes.append(helper.make_node("Add", ["r1", "r2"], ["rs"]))
        total = "rs"
    nodes += [helper.make_node("Identity", ["x"], ["xi"]), helper.make_node("Add", ["xi", total], ["y"])]
    outputs = [helper.make_tensor_value_info("y", T.FLOAT, _F4)]
    if deterministic_output:
        nodes.append(helper.make_node("Mul", ["x", "two"], ["z"]))
        inits.append(_const("two", 2.0))
        outputs.append(helper.make_tensor_value_info("z", T.FLOAT, _F4))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, _F4)], outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _random_ops(model: ir.Model | onnx.ModelProto) -> Counter:
    if isinstance(model, onnx.ModelProto):
        model = ir.serde.deserialize_model(model)
    return Counter(n.op_type for n in model.graph if n.op_type in RANDOM)


@pytest.mark.parametrize("op", RANDOM)
def test_r36_fold_constants_never_evaluates_random_ops(op):
    model = ir.serde.deserialize_model(_model(op))
    before = _random_ops(model)
    res = make_pass("fold-constants").call(model)
    assert _random_ops(res.model) == before
    assert any(op in n and "random" in n for n in res.notes), res.notes


@pytest.mark.parametrize("op", RANDOM)
def test_r36_cse_keeps_two_draws_on_the_same_inputs(op):
    model = ir.serde.deserialize_model(_model(op, twice=True))
    res = make_pass("cse").call(model)
    assert _random_ops(res.model)[op] == 2
    assert res.counts.get("nodes_removed", 0) == 0


@pytest.mark.parametrize("op", RANDOM)
def test_r36_onnxsim_result_keeps_random_ops(op):
    model = ir.serde.deserialize_model(_model(op))
    before = _random_ops(model)
    res = make_pass("onnxsim").call(model)
    assert _random_ops(res.model) == before, res.notes


@pytest.mark.parametrize("op", RANDOM)
def test_r36_safe_preset_keeps_random_ops_and_says_the_model_is_nondeterministic(tmp_path, op):
    src = save(_model(op), tmp_path / "in" / "m.onnx")
    before = sha256_file(src)
    r = run_passes(src, resolve_passes("safe"), tmp_path / "out" / "m.onnx")
    assert r.ok, r.summary()
    assert _random_ops(onnx.load(str(r.output))) == _random_ops(onnx.load(str(src)))
    assert "the model is nondeterministic: output 'y' differs between two runs of the original" in r.reference
    changed = [rec for rec in r.records if rec.verification is not None]
    assert changed and all(rec.verification.ok for rec in changed)
    assert all(rec.verification.nondeterministic == ("y",) for rec in changed)
    assert sha256_file(src) == before


def test_r36_onnxsim_refuses_a_result_that_lost_a_random_op(monkeypatch):
    """onnxsim's result is checked, whatever onnxsim does: one that drops a draw is refused."""
    import onnxsim

    model = ir.serde.deserialize_model(_model("Bernoulli"))

    def freezes_the_draw(proto, **kwargs):
        frozen = onnx.ModelProto()
        frozen.CopyFrom(proto)
        node = next(n for n in frozen.graph.node if n.op_type == "Bernoulli")
        frozen.graph.node.remove(node)
        frozen.graph.initializer.append(_const("r1", np.ones(_F4)))
        return frozen, True

    monkeypatch.setattr(onnxsim, "simplify", freezes_the_draw)
    res = make_pass("onnxsim").call(model)
    assert not res.modified
    assert any("random ops (Bernoulli 1 -> 0)" in n for n in res.warnings), res.warnings


def _write(tmp_path: Path, model: onnx.ModelProto, name: str) -> Path:
    return save(model, tmp_path / name / "m.onnx")


def test_r36_verification_compares_only_deterministic_outputs(tmp_path):
    original = _write(tmp_path, _model("Dropout"), "orig")
    v = Verifier(original)
    # A candidate that keeps the draw but breaks the deterministic output must still fail.
    broken = _model("Dropout")
    next(t for t in broken.graph.initializer if t.name == "two").CopyFrom(_const("two", 3.0))
    res = v.verify(_write(tmp_path, broken, "broken"))
    assert not res.ok and "'z'" in res.message
    assert v.nondeterministic == ("y",)
    same = v.verify(_write(tmp_path, _model("Dropout"), "same"))
    assert same.ok and same.numeric_status == "passed"
    assert "the model is nondeterministic: output 'y' differs" in same.message


def test_r36_verification_of_an_all_random_model_is_structural(tmp_path):
    original = _write(tmp_path, _model("RandomNormal", deterministic_output=False), "orig")
    res = Verifier(original).verify(_write(tmp_path, _model("RandomNormal", deterministic_output=False), "cand"))
    assert res.ok and res.numeric_status.startswith("skipped")
    assert "no output is deterministic" in res.message and "structure verified" in res.message


def test_r36_dropout_inference_and_ratio_zero_are_not_random():
    from passes.nondeterministic import nondeterministic_reason

    m = ir.serde.deserialize_model(_model("Dropout"))
    drop = next(n for n in m.graph if n.op_type == "Dropout")
    assert nondeterministic_reason(drop) is not None
    drop.inputs[1].const_value = ir.tensor(np.float32(0.0))
    assert nondeterministic_reason(drop) is None
    drop.inputs[1].const_value = ir.tensor(np.float32(0.5))
    drop.inputs[2].const_value = ir.tensor(np.bool_(False))
    assert nondeterministic_reason(drop) is None
    custom = ir.Node("my.domain", "Noise", [])
    assert "may be random" in nondeterministic_reason(custom)


# ---------------------------------------------------------------------------------------- R37

def _conv_bn(gamma, beta, mean, var, eps=1e-5, weight=2.0) -> onnx.ModelProto:
    c = len(gamma)
    inits = [_const("w", np.full((c, 1, 1, 1), weight)), _const("g", gamma), _const("b", beta), _const("m", mean),
             _const("v", var)]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=c),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"], epsilon=eps)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, c, 2, 2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, c, 2, 2])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


# Overflowing the Conv (2 * 3e38 = inf), infinities, NaN and both zeros, in every channel.
SPECIAL = np.array([[[[3e38, -np.inf], [0.0, -0.0]], [[np.nan, 1.0], [-0.0, 3e38]]]], np.float32)


def _ort(path: Path) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, {"x": SPECIAL})[0]


def _same_ieee(a: np.ndarray, b: np.ndarray) -> bool:
    finite = ~np.isnan(a)
    return (np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[finite], b[finite])
            and np.array_equal(np.signbit(a[finite]), np.signbit(b[finite])))


@pytest.mark.parametrize("case, params, reason", [
    ("scale0", ([0.0, 1.0], [0.5, 0.0], [0.0, 0.0], [1.0, 1.0], 1e-5), "scale is 0"),
    ("var_eps_nonpositive", ([1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [-1.0, 1.0], 1e-5), "variance + epsilon <= 0"),
    ("nan_scale", ([1.0, np.nan], [0.0, 0.0], [0.0, 0.0], [1.0, 1.0], 1e-5), "scale holds NaN/Inf"),
    ("inf_bias", ([1.0, 1.0], [np.inf, 0.0], [0.0, 0.0], [1.0, 1.0], 1e-5), "bias holds NaN/Inf"),
    ("inf_mean", ([1.0, 1.0], [0.0, 0.0], [-np.inf, 0.0], [1.0, 1.0], 1e-5), "mean holds NaN/Inf"),
    ("overflowing_scale", ([1e30, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0], 1e-30), "would overflow"),
])
def test_r37_conv_bn_fusion_refused_where_ieee_results_would_change(tmp_path, case, params, reason):
    gamma, beta, mean, var, eps = params
    src = save(_conv_bn(gamma, beta, mean, var, eps), tmp_path / case / "m.onnx")
    r = run_passes(src, [make_pass("fuse-conv-bn")], tmp_path / case / "out" / "m.onnx")
    rec = r.records[0]
    assert rec.status == "unchanged", (rec.status, rec.message)
    assert any(reason in n for n in rec.notes), rec.notes
    assert _same_ieee(_ort(src), _ort(r.output))


def test_r37_conv_bn_with_negative_zeros_fuses_and_keeps_every_value(tmp_path):
    src = save(_conv_bn([-1.0, 1.0], [-0.0, -0.0], [0.0, -0.0], [1.0, 1.0]), tmp_path / "m.onnx")
    r = run_passes(src, [make_pass("fuse-conv-bn")], tmp_path / "out" / "m.onnx")
    assert r.records[0].status == "changed", r.records[0].message
    assert [n.op_type for n in onnx.load(str(r.output)).graph.node] == ["Conv"]
    assert _same_ieee(_ort(src), _ort(r.output))


def test_r37_layernorm_and_gelu_fusions_state_their_overflow_difference(tmp_path):
    from tests.passes.test_fusions import GELU, H17, H20, LN
    from tests.passes.pass_helpers import run_one

    for name, text, pass_name in (("ln", H17 + LN, "fuse-layernorm"), ("gelu", H20 + GELU, "fuse-gelu")):
        rec = run_one(tmp_path / name, text, pass_name).records[0]
        assert rec.status == "changed"
        assert any(n.startswith("IEEE: same values") and "overflow" in n for n in rec.notes), rec.notes
