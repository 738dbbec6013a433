"""Feeds respect dtypes, ranks and value ranges; comparisons check shapes first,
then values with dtype-aware tolerances, including non-tensor outputs."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from studio.core.compare import QUANTIZED, compare_outputs, tolerance_for
from studio.core.errors import StudioError
from studio.core.feeds import choose_dims, input_specs, load_npz, random_feeds
from studio.core.model import load
from tests.conftest import SAMPLES, parse_model


def test_transformer_feeds_are_valid_token_ids():
    h = load(SAMPLES / "transformer_block.onnx")
    specs = {s.name: s for s in input_specs(h.proto)}
    assert specs["input_ids"].role == "token_ids" and specs["input_ids"].high == 1000
    assert specs["attention_mask"].role == "mask"
    feeds = random_feeds(tuple(specs.values()), {"batch": 2, "sequence": 7}, seed=3)
    assert feeds["input_ids"].shape == (2, 7) and feeds["input_ids"].dtype == np.int64
    assert feeds["input_ids"].max() < 1000 and (feeds["attention_mask"] == 1).all()
    out = ort.InferenceSession(str(h.path), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert np.isfinite(out[0]).all()
    again = random_feeds(tuple(specs.values()), {"batch": 2, "sequence": 7}, seed=3)
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)


def test_default_dims_are_reported():
    h = load(SAMPLES / "transformer_block.onnx")
    dims = choose_dims(input_specs(h.proto))
    assert dims == {"batch": 1, "sequence": 16}


def test_npz_inputs_checked(tmp_path):
    h = load(SAMPLES / "cnn_unfused.onnx")
    specs = input_specs(h.proto)
    good = tmp_path / "good.npz"
    np.savez(good, **{"input/0": np.zeros((1, 3, 32, 32), np.float32), "input/1": np.ones((2, 3, 32, 32), np.float32)})
    samples = load_npz(good, specs)
    assert len(samples) == 2 and samples[1]["input"].shape == (2, 3, 32, 32)
    bad = tmp_path / "bad.npz"
    np.savez(bad, input=np.zeros((1, 3, 16, 16), np.float32))
    with pytest.raises(StudioError, match="needs shape"):
        load_npz(bad, specs)
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, other=np.zeros(3))
    with pytest.raises(StudioError, match="not an input"):
        load_npz(wrong, specs)
    pickled = tmp_path / "p.npz"
    np.savez(pickled, input=np.array([{"a": 1}], dtype=object))
    with pytest.raises(StudioError):
        load_npz(pickled, specs)


def test_compare_shape_first_then_values():
    ref = {"y": np.ones((2, 3), np.float32)}
    assert compare_outputs(ref, {"y": np.ones((2, 3), np.float32) + 1e-7})
    c = compare_outputs(ref, {"y": np.ones((3, 2), np.float32)})
    assert not c and "shape" in c.summary()
    c = compare_outputs(ref, {"y": np.ones((2, 3), np.float32) * 1.01})
    assert not c and c.first_failure.max_abs == pytest.approx(0.01, rel=1e-3)
    assert not compare_outputs(ref, {})


def test_compare_nan_positions_and_ints():
    assert not compare_outputs({"y": np.array([1.0, np.nan])}, {"y": np.array([1.0, 2.0])})
    assert compare_outputs({"y": np.array([1.0, np.nan])}, {"y": np.array([1.0, np.nan])})
    assert not compare_outputs({"i": np.array([1, 2])}, {"i": np.array([1, 3])})


def test_compare_sequences_and_maps():
    ref = {"s": [np.ones(2), np.zeros(3)], "m": {1: np.float32(0.5), 2: np.float32(0.25)}}
    assert compare_outputs(ref, {"s": [np.ones(2), np.zeros(3)], "m": {1: np.float32(0.5), 2: np.float32(0.25)}})
    c = compare_outputs(ref, {"s": [np.ones(2)], "m": {1: np.float32(0.5), 2: np.float32(0.25)}})
    assert not c and "s[len]" in {d.name for d in c.outputs.values() if not d.match}
    c = compare_outputs(ref, {"s": [np.ones(2), np.zeros(3)], "m": {1: np.float32(0.5), 3: np.float32(0.25)}})
    assert not c


def test_quantized_tolerance_uses_cosine():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(1000).astype(np.float32)
    noisy = ref + rng.standard_normal(1000).astype(np.float32) * 0.05
    assert not compare_outputs({"y": ref}, {"y": noisy})
    c = compare_outputs({"y": ref}, {"y": noisy}, QUANTIZED, quantized=True)
    assert c and c.outputs["y"].cosine > 0.99
    assert not compare_outputs({"y": ref}, {"y": np.zeros_like(ref)}, quantized=True)
    assert tolerance_for("int64").rtol == 0


def test_top1_agreement_for_classifiers():
    a = np.array([[0.1, 0.9], [0.8, 0.2]], np.float32)
    d = compare_outputs({"p": a}, {"p": a[:, ::-1].copy()}).outputs["p"]
    assert d.top1_agreement == 0.0


def test_scalar_int_inputs_are_small():
    m = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (int64 n, float[2] x) => (float[2] y) '
                    '{ y = Identity(x) }')
    specs = {s.name: s for s in input_specs(m)}
    assert specs["n"].role == "scalar" and 1 <= random_feeds(tuple(specs.values()))["n"] < 4
