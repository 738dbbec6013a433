"""remove-dead-guards: a NaN guard after attention goes only where no row can be all -inf.

Oracle: plain onnxruntime on the original model (optimizer off). The -inf case shows why the analysis
matters: there a fully masked row really is NaN without the guard, and the pass must keep it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.conftest import save
from tests.corpus import corpus_model
from tests.passes.pass_helpers import assert_plain_ort_equal, check_applies, check_skips, ops, run_one

# one attention head: scores = q k^T * s + bias(mask); p = Softmax(scores); guard; out = p v
_ATTENTION = '<ir_version: 8, opset_import: ["" : 17]>' + """
g (float[1,8,4] q, float[1,8,4] k, float[1,8,4] v, int64[1,8] mask) => (float[1,8,4] out) <{inits}> {{
  kt = Transpose<perm=[0,2,1]>(k)
  raw = MatMul(q, kt)
  scores = Mul(raw, scale)
  keep = Cast<to=9>(mask)
  keep3 = Unsqueeze(keep, one)
  bias = Where(keep3, zero, low)
  x = Add(scores, bias)
  p = Softmax<axis=-1>(x)
  {guard}
  out = MatMul(g, v)
}}"""
_INITS = ("float scale = {{0.5}}, float zero = {{0.0}}, float low = {{{low}}}, int64[1] one = {{1}}, "
          "float eps = {{1e-6}}, float half = {{0.5}}")
_NAN_GUARD = "isnan = IsNaN(p)\n  g = Where(isnan, zero, p)"
_NOT_GUARD = "isnan = IsNaN(p)\n  fine = Not(isnan)\n  g = Where(fine, p, zero)"


def _model(low: str = "-3.4028235e+38", guard: str = _NAN_GUARD, prefix: str = "") -> str:
    body = _ATTENTION.format(inits=_INITS.format(low=low), guard=guard)
    return body.replace("kt = Transpose", prefix + "kt = Transpose") if prefix else body


def _feeds(fully_masked: bool = False) -> list[dict]:
    rng = np.random.default_rng(0)
    mask = np.ones((1, 8), np.int64)
    mask[0, 5:] = 0
    sets = [{n: rng.standard_normal((1, 8, 4)).astype(np.float32) for n in ("q", "k", "v")} | {"mask": mask}]
    if fully_masked:
        sets.append({**sets[0], "mask": np.zeros((1, 8), np.int64)})
    return sets


def test_a_guard_behind_a_finite_mask_bias_is_removed_and_outputs_stay_bit_equal(tmp_path):
    r = check_applies(tmp_path, _model(), "remove-dead-guards")
    assert "IsNaN" not in ops(r.output) and ops(r.output).count("Where") == 1      # the mask's Where stays
    assert r.records[0].counts["nodes_removed"] == 2
    # a fully masked row: every score is finfo.min + a small number, finite: softmax is uniform, never NaN
    assert_plain_ort_equal(tmp_path / "in-a" / "m.onnx", r.output, _feeds(fully_masked=True), exact=True)


def test_the_not_form_is_the_same_guard(tmp_path):
    r = check_applies(tmp_path, _model(guard=_NOT_GUARD), "remove-dead-guards")
    assert not {"IsNaN", "Not"} & set(ops(r.output))


def test_a_minus_inf_mask_bias_keeps_the_guard_that_fires_on_a_fully_masked_row(tmp_path):
    model = onnx.parser.parse_model(_model(low="-inf"))
    r = check_skips(tmp_path, model, "remove-dead-guards")
    assert any("not proven finite" in n for n in r.records[0].notes)
    # the mechanism the analysis protects: without the guard, a fully masked row is NaN; with it, zeros
    unguarded = onnx.parser.parse_model(_model(low="-inf", guard="g = Identity(p)"))
    feeds = _feeds(fully_masked=True)[1]
    path = save(unguarded, tmp_path / "unguarded.onnx")
    bare = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    kept = ort.InferenceSession(str(tmp_path / "in-skip" / "m.onnx"), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    assert np.isnan(bare).all() and (kept == 0).all()


@pytest.mark.parametrize("prefix", [
    "qq = Div(q, q)\n  ",                       # a Div by a computed value can be a 0/0
    "qq = Sqrt(q)\n  ",                         # a Sqrt of a negative is NaN
], ids=["div-by-computed", "sqrt"])
def test_a_score_not_proven_finite_keeps_the_guard(tmp_path, prefix):
    text = _model(prefix=prefix).replace("raw = MatMul(q, kt)", "raw = MatMul(qq, kt)")
    check_skips(tmp_path, text, "remove-dead-guards")


# q normalised by hand before attention, as exporters write LayerNorm/RMSNorm without the fused op
_RMS_NORM = "sq = Mul(q, q)\n  ms = ReduceMean<axes=[-1]>(sq)\n  pe = Add(ms, eps)\n  {root}\n  qq = Div(q, r)\n  "


@pytest.mark.parametrize("root", ["r = Sqrt(pe)", "r = Pow(pe, half)"])
def test_a_hand_written_rms_norm_before_the_scores_is_proven(tmp_path, root):
    text = _model(prefix=_RMS_NORM.format(root=root)).replace("raw = MatMul(q, kt)", "raw = MatMul(qq, kt)")
    r = check_applies(tmp_path, text, "remove-dead-guards")
    assert "IsNaN" not in ops(r.output)


@pytest.mark.parametrize("change", [
    ("pe = Add(ms, eps)", "pe = Sub(ms, eps)"),            # mean - eps can be negative: its root is NaN
    ("pe = Add(ms, eps)", "pe = Add(ms, zero)"),           # no epsilon: a zero row divides by zero
    ("sq = Mul(q, q)", "sq = Mul(q, k)"),                  # not a square: the mean can be negative
], ids=["minus-eps", "no-eps", "not-a-square"])
def test_a_norm_that_can_divide_by_zero_or_root_a_negative_is_not_proven(tmp_path, change):
    text = _model(prefix=_RMS_NORM.format(root="r = Sqrt(pe)")).replace("raw = MatMul(q, kt)", "raw = MatMul(qq, kt)")
    check_skips(tmp_path, text.replace(*change), "remove-dead-guards")


def test_a_mean_over_an_axis_of_unknown_length_is_not_proven(tmp_path):
    """A mean over an empty axis is NaN: the axis must be statically non-empty."""
    text = _model(prefix=_RMS_NORM.format(root="r = Sqrt(pe)")).replace("raw = MatMul(q, kt)", "raw = MatMul(qq, kt)")
    text = text.replace("float[1,8,4] q, float[1,8,4] k, float[1,8,4] v", "float[1,8,d] q, float[1,8,d] k, "
                        "float[1,8,d] v").replace("=> (float[1,8,4] out)", "=> (float[1,8,d] out)")
    check_skips(tmp_path, text, "remove-dead-guards")


def test_a_div_by_a_nonzero_constant_is_proven(tmp_path):
    text = _model(prefix="qq = Div(q, scale)\n  ").replace("raw = MatMul(q, kt)", "raw = MatMul(qq, kt)")
    r = check_applies(tmp_path, text, "remove-dead-guards")
    assert "IsNaN" not in ops(r.output)


def test_a_constant_holding_nan_is_not_finite(tmp_path):
    check_skips(tmp_path, _model(low="nan"), "remove-dead-guards")


def test_the_deployment_presets_run_it():
    from passes.presets import BUILTIN

    for name in ("ort", "openvino", "tensorrt"):
        assert "remove-dead-guards" in BUILTIN[name].passes, name
    assert "remove-dead-guards" not in BUILTIN["safe"].passes     # it assumes finite float inputs


def test_the_real_minilm_loses_its_six_guards_and_keeps_its_outputs(tmp_path):
    """Corpus minilm_l6_v2_int8 (torch dynamo export, finfo.min mask bias): every guard proven dead."""
    from tests.corpus import corpus_feeds

    src = corpus_model("minilm_l6_v2_int8")
    model = onnx.load(str(src))
    r = run_one(tmp_path, model, "remove-dead-guards")
    rec = r.records[0]
    assert rec.status == "changed" and rec.verification.ok, (rec.status, rec.message)
    before, after = ops(tmp_path / "in-a" / "m.onnx"), ops(r.output)
    assert before.count("IsNaN") == 6 and "IsNaN" not in after
    assert before.count("Where") - after.count("Where") == 6
    feeds = corpus_feeds("minilm_l6_v2_int8")
    padded = {**feeds, "attention_mask": np.where(np.arange(128) < 40, 1, 0).astype(np.int64)[None]}
    assert_plain_ort_equal(tmp_path / "in-a" / "m.onnx", r.output, [feeds, padded])
    # optimizer off on both sides: the same arithmetic, bit for bit
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    a, b = (ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"]) for p in (src, r.output))
    for f in (feeds, padded):
        np.testing.assert_array_equal(a.run(None, f)[0], b.run(None, f)[0])


def test_a_bias_built_by_constant_of_shape_and_trilu_is_proven(tmp_path):
    """A causal bias as exporters build it: ConstantOfShape(finfo.min) to a computed shape, Trilu above the
    diagonal; with a -inf fill the guard stays."""
    def text(fill: str) -> str:
        body = _model().replace("bias = Where(keep3, zero, low)",
                                f"shp = Shape(raw)\n  full = ConstantOfShape<value = float[1] {{{fill}}}>(shp)\n"
                                "  causal = Trilu<upper=1>(full, one_s)\n  masked = Where(keep3, zero, low)\n"
                                "  bias = Add(masked, causal)")
        return body.replace("int64[1] one = {1}", "int64[1] one = {1}, int64 one_s = {1}")

    r = check_applies(tmp_path, text("-3.4028235e+38"), "remove-dead-guards")
    assert "IsNaN" not in ops(r.output)
    check_skips(tmp_path, text("-inf"), "remove-dead-guards")


def test_a_guard_whose_other_value_broadcasts_the_result_stays(tmp_path):
    """Where(IsNaN(p), c, p) with c of shape [2,1,1] is [2,8,8], not p's [1,8,8]: not p, whatever p's values."""
    text = _model(guard="isnan = IsNaN(p)\n  g2 = Where(isnan, wide, p)\n  g = ReduceMean<axes=[0], keepdims=1>(g2)")
    text = text.replace("float eps = {{1e-6}}".replace("{{", "{").replace("}}", "}"),
                        "float eps = {1e-6}, float[2,1,1] wide = {0.0, 0.0}")
    r = check_skips(tmp_path, text, "remove-dead-guards")
    assert any("broadcast" in n for n in r.records[0].notes), r.records[0].notes
