"""A cosine-judged comparison (quantized, reduced precision, converted engines) of an output that is numerically
zero on the reference side: its direction is rounding noise, so it is judged value by value instead. A faithful
LiteRT conversion of a text detector failed its export at cosine 0.827 with 0 % of values outside the tolerance
(seeded heat map ~1e-7). Outputs of real magnitude keep the cosine rule (the control below)."""

from __future__ import annotations

import numpy as np

from studio.core.compare import NOISE_FLOOR_RMS, QUANTIZED, REDUCED_PRECISION, compare_arrays


def _cos(a: np.ndarray, b: np.ndarray) -> float:        # the oracle, by hand
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_an_output_at_float_noise_level_is_judged_value_by_value():
    rng = np.random.default_rng(0)
    ref = (rng.random((1, 1, 64, 64)) * 2e-7).astype(np.float32)          # RMS ~1.2e-7
    got = ref + (rng.standard_normal(ref.shape) * 1e-7).astype(np.float32)
    assert _cos(got, ref) < 0.9 and np.sqrt(np.mean(ref.astype(np.float64) ** 2)) < NOISE_FLOOR_RMS
    for tol in (REDUCED_PRECISION, QUANTIZED):
        d = compare_arrays("heat", ref, got, tol)
        assert d.match and d.mismatches == 0 and "noise level" in d.note and d.mode == "tolerance"
        far = ref.copy()
        far[0, 0, 3, 3] = 0.5                      # one value far outside the tolerance still fails it
        assert not compare_arrays("heat", ref, far, tol).match


def test_an_output_of_real_magnitude_keeps_the_cosine_rule():
    rng = np.random.default_rng(1)
    ref = rng.dirichlet(np.ones(1000)).astype(np.float32)[None]           # softmax-like, RMS ~1.4e-3
    got = rng.permutation(ref[0])[None]                                   # every value small, the direction lost
    assert np.sqrt(np.mean(ref.astype(np.float64) ** 2)) > NOISE_FLOOR_RMS and _cos(got, ref) < 0.98
    d = compare_arrays("probs", ref, got, QUANTIZED)
    assert not d.match and d.mode == "cosine"


def test_a_converted_engine_check_judges_a_numerically_zero_output_by_its_values():
    """check's converted-engine verdict (LiteRT, MNN, ncnn vs ONNX Runtime) used cosine < 0.999 alone:
    rapidocr_ppocrv3_det's LiteRT run, 8.78e-08 off ONNX Runtime, was a LITERT-MISMATCH at cosine 0.83."""
    from diagnostics.converted_check import judge_output

    rng = np.random.default_rng(2)
    ref = (rng.random((1, 1, 32, 32)) * 2e-7).astype(np.float32)
    got = ref + (rng.standard_normal(ref.shape) * 1e-7).astype(np.float32)
    assert _cos(got, ref) < 0.9
    assert judge_output("heat", ref, got)["problem"] is None
    far = ref.copy()
    far[0, 0, 1, 1] = 0.25
    assert judge_output("heat", ref, far)["problem"] is not None
    big = ref * 1e6                                          # the same shape of error at real magnitude: flagged
    assert "cosine" in judge_output("heat", big, got * 1e6)["problem"]


def test_the_one_line_summary_quotes_no_cosine_of_noise():
    """`compare --engine-b litert` on rapidocr_ppocrv3_det printed 'PASS: 1 outputs match (max abs 1e-07, min cosine
    0.852044)': a cosine the verdict did not use, read as a warning. The summary's min cosine is over the outputs
    judged by direction; a noise-level output is named as judged value by value, and the CLI column says so."""
    from studio.cli.compare_cmd import _mode
    from studio.core.compare import Comparison, merge_comparisons

    rng = np.random.default_rng(3)
    ref = (rng.random((1, 1, 32, 32)) * 2e-7).astype(np.float32)
    got = ref + (rng.standard_normal(ref.shape) * 1e-7).astype(np.float32)
    probs = rng.dirichlet(np.ones(100)).astype(np.float32)[None]
    heat = compare_arrays("heat", ref, got, QUANTIZED)
    real = compare_arrays("probs", probs, probs * np.float32(1.0001), QUANTIZED)
    assert heat.noise_floor and not real.noise_floor
    assert _mode(heat) == "tolerance (reference at noise level)" and _mode(real) == "cosine"
    alone = Comparison({"heat": heat})
    assert alone.ok and alone.min_cosine is None and "cosine" not in alone.summary().split(";")[0]
    assert "reference at float noise level, judged value by value" in alone.summary()
    both = Comparison({"heat": heat, "probs": real})
    assert both.min_cosine == real.cosine == max(heat.cosine, real.cosine)    # the noise cosine is left out
    assert f"min cosine {real.cosine:.6f}" in both.summary()
    plain = compare_arrays("heat", ref, got)          # float32 tolerance, no cosine criterion (compare's default)
    assert plain.match and plain.noise_floor and Comparison({"heat": plain}).min_cosine is None
    merged = merge_comparisons([Comparison({"heat": plain}), Comparison({"heat": plain})])   # compare's feed sets
    assert merged.outputs["heat"].noise_floor and merged.min_cosine is None
    louder = compare_arrays("heat", ref * 1e6, got * 1e6)
    mixed = merge_comparisons([Comparison({"heat": plain}), Comparison({"heat": louder})]).outputs["heat"]
    assert not mixed.noise_floor and mixed.cosine == louder.cosine     # the noise set's cosine is not the worst


def test_a_variant_that_moves_a_near_zero_output_is_not_passed_by_its_loose_tolerance():
    """rapidocr_ppocrv3_det on random inputs: the fp32 mask is near zero (RMS ~1e-5, a few values up to 1e-3), and an
    INT8 variant whose mask was unrelated to it (cosine 0.00) passed, because INT8's atol 1e-2 holds anything of that
    size; precision recommended it. At the noise floor the values must be as close as float32's own tolerance asks."""
    rng = np.random.default_rng(4)
    ref = np.zeros((1, 1, 64, 64), np.float32)
    ref.flat[rng.choice(ref.size, 8, replace=False)] = rng.random(8).astype(np.float32) * 2e-4   # RMS < 1e-5
    got = np.zeros_like(ref)
    got.flat[rng.choice(ref.size, 8, replace=False)] = rng.random(8).astype(np.float32) * 2e-4  # elsewhere
    rms = np.sqrt(np.mean(ref.astype(np.float64) ** 2))
    assert rms < NOISE_FLOOR_RMS and abs(_cos(got, ref)) < 0.5 and np.abs(got - ref).max() < QUANTIZED.atol
    for tol in (QUANTIZED, REDUCED_PRECISION):
        d = compare_arrays("mask", ref, got, tol)
        assert not d.match and d.noise_floor and d.tolerance.atol == 1e-5, d
        assert "near zero on these inputs" in d.note and "real inputs" in d.note
        assert d.tolerance.min_cosine == tol.min_cosine        # still the variant's criterion, tightened
        faithful = compare_arrays("mask", ref, ref + np.float32(2e-7) * (ref > 0), tol)   # equal within float32's
        assert faithful.match and faithful.noise_floor
