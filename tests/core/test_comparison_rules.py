"""One comparison module (issue 24 item 2): cosine, max abs/rel, the NaN/Inf rules, integers and
booleans compared exactly, empty tensors and dtype mismatches are ``studio.core.closeness``'s, and
the figures a verdict reports (``studio.core.compare``) and a task metric scores
(``studio.data.metrics``) are the same numbers. Oracles: ``scipy.spatial.distance.cosine`` and
numpy written here; hand values for NaN, Inf, zero vectors and near-zero references."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.distance import cosine as scipy_cosine_distance

from studio.core.closeness import closeness, cosine_matrix, cosine_similarity, count_unequal, top_classes
from studio.core.compare import compare_arrays
from studio.data.metrics import METRICS, TopKAgreement

ROOT = Path(__file__).resolve().parents[2]


def _oracle_cos(ref: np.ndarray, got: np.ndarray) -> float:
    return 1.0 - float(scipy_cosine_distance(np.ravel(ref).astype(np.float64), np.ravel(got).astype(np.float64)))


def _metric(name: str, ref, got) -> float | None:
    return METRICS[name].score("y", [np.asarray(ref)], [np.asarray(got)]).value


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_cosine_and_errors_match_scipy_and_numpy_at_every_call_site(shape):
    rng = np.random.default_rng(sum(shape))
    ref = rng.standard_normal(shape).astype(np.float32)
    got = (ref + rng.normal(0, 0.3, shape)).astype(np.float32)
    want_cos = _oracle_cos(ref, got)
    r64, g64 = ref.astype(np.float64), got.astype(np.float64)
    want_abs = float(np.max(np.abs(g64 - r64)))
    want_rel = float(np.max(np.abs(g64 - r64) / np.maximum(np.abs(r64), 1e-6 * max(1.0, np.abs(r64).max()))))
    want_l2 = float(np.linalg.norm(g64 - r64) / np.linalg.norm(r64))
    c = closeness(ref, got)
    assert c.cosine == pytest.approx(want_cos, abs=1e-12)
    assert (c.max_abs, c.max_rel, c.rel_l2) == pytest.approx((want_abs, want_rel, want_l2), rel=1e-12)
    d = compare_arrays("y", ref, got)
    assert (d.cosine, d.max_abs, d.max_rel, d.rel_l2) == (c.cosine, c.max_abs, c.max_rel, c.rel_l2)
    assert _metric("cosine", ref, got) == c.cosine
    assert _metric("max-abs", ref, got) == c.max_abs and _metric("max-rel", ref, got) == c.max_rel
    assert cosine_similarity(ref, got) == pytest.approx(want_cos, abs=1e-12)


def test_nan_at_the_same_positions_agrees_and_the_figures_skip_it():
    ref = np.array([1.0, np.nan, 3.0, 4.0], np.float32)
    got = np.array([1.0, np.nan, 3.5, 4.0], np.float32)
    c = closeness(ref, got)
    assert (c.nan_mismatches, c.inf_mismatches, c.compared) == (0, 0, 3)
    assert c.max_abs == 0.5 and c.cosine == pytest.approx(_oracle_cos([1, 3, 4], [1, 3.5, 4]), abs=1e-12)
    d = compare_arrays("y", ref, got)
    assert d.max_abs == 0.5 and not d.match and "NaN" not in d.note
    assert _metric("cosine", ref, got) == c.cosine and _metric("max-abs", ref, got) == 0.5


def test_nan_on_one_side_only_is_a_mismatch_everywhere():
    ref = np.array([1.0, 2.0, 3.0], np.float32)
    got = np.array([1.0, np.nan, 3.0], np.float32)
    for a, b in ((ref, got), (got, ref)):
        c = closeness(a, b)
        assert c.nan_mismatches == 1 and not c.specials_agree
        assert (c.cosine_score, c.max_abs_score, c.max_rel_score) == (0.0, float("inf"), float("inf"))
        d = compare_arrays("y", a, b)
        assert not d.match and d.mismatches == 1 and d.note == "NaN at 1 positions that differ from the reference"
        assert _metric("cosine", a, b) == 0.0 and _metric("max-abs", a, b) == float("inf")


def test_inf_of_the_same_sign_agrees_and_the_finite_values_are_still_measured():
    # Masked attention logits: -inf by design on both sides, the rest differs a little. The task
    # metric used to score any sample with an Inf in it 1.0 if bit-equal, else 0.0.
    ref = np.array([-np.inf, 0.5, 1.0, np.inf, 2.0], np.float32)
    got = np.array([-np.inf, 0.5, 1.001, np.inf, 2.0], np.float32)
    want = _oracle_cos([0.5, 1.0, 2.0], got[[1, 2, 4]])
    c = closeness(ref, got)
    assert c.specials_agree and c.compared == 3 and c.cosine == pytest.approx(want, abs=1e-12)
    assert compare_arrays("y", ref, got).cosine == c.cosine
    assert _metric("cosine", ref, got) == pytest.approx(want, abs=1e-12) and 0.999 < want < 1.0


@pytest.mark.parametrize("got", [[-np.inf, 1.0, 2.0], [1.0, 1.0, 2.0]])
def test_inf_of_the_other_sign_or_on_one_side_only_is_a_mismatch(got):
    ref = np.array([np.inf, 1.0, 2.0], np.float32)
    got = np.array(got, np.float32)
    c = closeness(ref, got)
    assert c.inf_mismatches == 1 and c.nan_mismatches == 0 and c.compared == 2
    d = compare_arrays("y", ref, got)
    assert not d.match and d.note == "infinities differ from the reference"
    # max-rel used to skip non-finite positions altogether and call this 0.0
    assert _metric("max-rel", ref, got) == float("inf") and _metric("cosine", ref, got) == 0.0


def test_equal_vectors_have_a_cosine_of_exactly_one():
    # |a|^2 / (|a| |a|) rounds to 0.9999999999999998 for [1, 3]; the metric used to special-case Inf to get 1.0
    ref = np.array([1.0, np.nan, 3.0, np.inf], np.float32)
    assert closeness(ref, ref.copy()).cosine == 1.0 and _metric("cosine", ref, ref.copy()) == 1.0
    x = np.random.default_rng(9).standard_normal(1000)
    assert cosine_similarity(x, x) == 1.0 and compare_arrays("y", x, x.copy()).cosine == 1.0
    assert cosine_similarity(x, -x) == -1.0 and cosine_matrix(x[None], x[None])[0, 0] == pytest.approx(1.0, abs=1e-12)


def test_zero_vectors_by_hand():
    z, x = np.zeros(4, np.float32), np.array([0.0, 1.0, 0.0, 0.0], np.float32)
    assert cosine_similarity(z, z) == 1.0 and cosine_similarity(z, x) == 0.0 and cosine_similarity(x, z) == 0.0
    assert closeness(z, z).rel_l2 == 0.0 and closeness(z, x).rel_l2 == float("inf")
    assert compare_arrays("y", z, z).cosine == 1.0 and _metric("cosine", x, z) == 0.0


def test_max_rel_measures_a_near_zero_reference_against_the_outputs_scale():
    # compare used a 1e-12 floor here (max rel 1e9), the task metric the output's scale: one rule now.
    ref = np.array([1000.0, 0.0], np.float32)
    got = np.array([1000.0, 1e-3], np.float32)
    want = float(np.float32(1e-3)) / (1e-6 * 1000.0)
    assert closeness(ref, got).max_rel == pytest.approx(want, rel=1e-9)
    assert compare_arrays("y", ref, got).max_rel == pytest.approx(want, rel=1e-9)
    assert _metric("max-rel", ref, got) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_integers_and_booleans_are_compared_exactly(dtype):
    ref = np.array([1, 0, 1, 1], dtype)
    got = np.array([1, 1, 1, 0], dtype)
    assert count_unequal(ref, got) == 2
    d = compare_arrays("ids", ref, got)
    assert d.mode == "exact" and not d.match and d.mismatches == 2 and d.mismatch_fraction == 0.5
    assert d.max_abs is None and d.cosine is None          # a class id is not "1 apart" from another
    assert _metric("mismatch-rate", ref, got) == 0.5


def test_exact_comparison_counts_nan_as_equal_to_nan():
    ref = np.array([1.0, np.nan, 2.0])
    assert count_unequal(ref, ref.copy()) == 0
    assert count_unequal(ref, np.array([1.0, 2.0, 2.0])) == 1
    assert count_unequal(np.array([1, 2, 3]), np.array([1.0, np.nan, 3.0])) == 1


def test_empty_tensors_have_no_figures_but_agree():
    e = np.zeros((0, 3), np.float32)
    c = closeness(e, e)
    assert (c.size, c.compared, c.max_abs, c.cosine, c.cosine_score) == (0, 0, 0.0, None, 1.0)
    d = compare_arrays("y", e, e)
    assert d.match and d.cosine is None and "empty output" in d.note
    assert _metric("cosine", e, e) == 1.0 and _metric("max-abs", e, e) == 0.0
    assert compare_arrays("ids", np.zeros(0, np.int64), np.zeros(0, np.int64)).mismatches == 0


def test_only_agreeing_specials_measure_no_cosine():
    ref = np.array([np.nan, np.inf], np.float32)
    c = closeness(ref, ref.copy())
    assert c.compared == 0 and c.cosine is None and c.cosine_score == 1.0 and c.max_abs_score == 0.0
    d = compare_arrays("y", ref, ref.copy())
    assert d.match and d.cosine is None and d.max_abs == 0.0


def test_dtype_mismatches_are_compared_on_the_values_in_float64():
    rng = np.random.default_rng(5)
    ref = rng.standard_normal(16).astype(np.float32)
    got = ref.astype(np.float16)
    want_abs = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
    c = closeness(ref, got)
    assert c.max_abs == want_abs > 0 and c.cosine == pytest.approx(_oracle_cos(ref, got), abs=1e-12)
    d = compare_arrays("y", ref, got)
    assert (d.ref_dtype, d.got_dtype, d.max_abs) == ("float32", "float16", want_abs)
    # an integer candidate of a float reference is judged as floats; a float candidate of an integer
    # reference exactly, its NaN a mismatch
    assert compare_arrays("y", np.array([1.0, 2.0]), np.array([1, 2])).mode == "tolerance"
    d = compare_arrays("ids", np.array([1, 2, 3]), np.array([1.0, np.nan, 3.0]))
    assert d.mode == "exact" and d.mismatches == 1


def test_a_shape_difference_is_refused_naming_both_shapes():
    with pytest.raises(ValueError, match=r"shape \[3\] != reference \[2, 2\]"):
        closeness(np.zeros((2, 2)), np.zeros(3))
    assert not compare_arrays("y", np.zeros((2, 2)), np.zeros(3)).match


def test_nan_never_wins_a_top1_in_the_verdict_or_the_metric():
    ref = np.array([[np.nan, 0.9, 0.1]], np.float32)
    got = np.array([[np.nan, 0.1, 0.9]], np.float32)
    assert top_classes(ref)[0, 0] == 1 and top_classes(got)[0, 0] == 2
    assert top_classes(np.array([[0.5, np.nan, 0.5, 0.2]]), 3).tolist() == [[0, 2, 3]]
    # numpy's argmax picks the NaN: the verdict used to call these two rows agreeing
    assert compare_arrays("y", ref, got).top1_agreement == 0.0
    assert TopKAgreement(1).score("y", [ref], [got]).value == 0.0


def test_retrieval_cosines_follow_the_same_rules():
    rng = np.random.default_rng(2)
    r, g = rng.standard_normal((4, 8)), rng.standard_normal((3, 8))
    m = cosine_matrix(r, g)
    assert m.shape == (3, 4)
    assert m == pytest.approx(np.array([[_oracle_cos(r[j], g[i]) for j in range(4)] for i in range(3)]), abs=1e-12)
    z = np.zeros((1, 8))
    assert cosine_matrix(z, z)[0, 0] == 1.0 and cosine_matrix(r[:1], z)[0, 0] == 0.0


def _computes_cosine(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "norm" and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "linalg":
            return True
    return False


# The converted engines' option search judges an attempt with its own cosine; studio/core/engines
# is another piece of work's (issue 24): merge it into studio.core.closeness there, then drop it here.
_NOT_YET_MERGED: set[str] = set()


def test_no_other_module_computes_a_cosine_or_a_norm_of_its_own():
    found = {str(p.relative_to(ROOT)) for top in ("studio", "diagnostics", "passes", "profilers")
             for p in (ROOT / top).rglob("*.py") if _computes_cosine(p)}
    assert found - _NOT_YET_MERGED == {"studio/core/closeness.py"}


def test_nan_never_wins_in_segmentation_maps_and_ctc_strings():
    from studio.data.metrics import MaskIoU, ctc_greedy

    logits = np.zeros((1, 3, 8, 8), np.float32)
    logits[0, 2] = 1.0                       # class 2 everywhere...
    logits[0, 0, 0, 0] = np.nan              # ...and a NaN score of class 0 at one pixel
    assert MaskIoU().score("m", [logits], [logits.copy()]).value == 1.0
    clean = logits.copy()
    clean[0, 0, 0, 0] = 0.0
    # numpy's argmax would make that pixel class 0 in one map only: IoU (63/64 + 0) / 2
    assert MaskIoU().score("m", [clean], [logits]).value == 1.0
    seq = np.array([[0.1, np.nan, 0.9], [0.8, 0.1, 0.1], [0.1, 0.9, np.nan]], np.float32)
    assert ctc_greedy(seq) == [(2, 1)]
