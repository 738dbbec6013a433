"""Quantization of models whose outputs include integer pass-through tensors (a sentence
encoder that returns its input_ids and attention mask): the float outputs are judged by
cosine, the integer/boolean ones exactly, by mismatch count and rate."""

from __future__ import annotations

import numpy as np
import onnx

from passes.quant_tools import accuracy, integer_differences
from studio import api
from tests.nontensor_models import sentence_encoder


def _outputs(ids: np.ndarray, emb: np.ndarray) -> dict:
    return {"sentence_embedding": emb, "input_ids_out": ids, "mask_out": np.ones(ids.shape, bool)}


def test_float_outputs_by_cosine_integer_outputs_exactly():
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((4, 32)).astype(np.float32)
    ids = rng.integers(0, 30000, (4, 256))
    ref = [_outputs(ids, emb)]
    noisy = emb + 0.01 * rng.standard_normal(emb.shape).astype(np.float32)
    cos, _ = accuracy(ref, [_outputs(ids, noisy)])
    assert 0.99 < cos < 1.0                                  # the embedding's cosine, not the ids'
    assert integer_differences(ref, [_outputs(ids, noisy)]) is None
    changed = ids.copy()
    changed[0, :20] += 1                                     # cosine of the ids would still be 1.0000
    text = integer_differences(ref, [_outputs(changed, emb)])
    assert text is not None and "input_ids_out" in text and "20 of 1024 values differ" in text
    flipped = ids.copy()
    flipped[0, 0] += 1                                       # one ArgMax-like flip in 1024: within 1 %
    assert integer_differences(ref, [_outputs(flipped, emb)]) is None


def test_only_integer_outputs_all_equal_is_nothing_approximated():
    ids = np.arange(12).reshape(3, 4)
    assert accuracy([{"i": ids}], [{"i": ids.copy()}]) == (1.0, None)
    assert accuracy([{"i": ids}], [{}])[0] == 0.0            # a missing output is no match


def test_dynamic_int8_on_an_encoder_with_integer_copies_of_its_inputs(tmp_path):
    src = tmp_path / "encoder.onnx"
    onnx.save(sentence_encoder(), src)
    out = tmp_path / "out" / "int8.onnx"
    result = api.optimize(api.load(src), passes=["quantize-int8-dynamic"], out_path=out,
                          pass_options={"quantize-int8-dynamic": {"budget_s": 0.5}})    # its latency, not read
    assert result.ok, result.summary()
    verification = result.records[0].verification
    modes = {k: d.mode for k, d in verification.numeric.outputs.items()}
    assert modes["input_ids_out"] == "exact" and modes["mask_out"] == "exact"
    assert modes["sentence_embedding"] == "cosine"
    assert verification.numeric.outputs["input_ids_out"].mismatches == 0
    cmp = api.compare(src, out, engine="ort")
    assert cmp.comparison.outputs["input_ids_out"].mode == "exact" and cmp.comparison.outputs["input_ids_out"].match
