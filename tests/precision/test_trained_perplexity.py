"""Perplexity on the one trained sample decoder (char_gpt2_decoder): the figures api.precision reports equal
exp(mean NLL) computed here with plain onnxruntime + numpy over the same prompts, fp32 and int4 alike; on
the random-weights samples the same figures stay labelled as such."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from sample_models.catalog import SAMPLE_DIR, get, path_of
from sample_models.trained_decoder import CHAR_GPT2, bigram_log_probs, corpus, encode
from studio import api
from studio.data.datasets import import_dataset
from studio.precision.generation_agreement import MAX_PROMPT_TOKENS, has_random_weights
from tests.conftest import sha256_file

pytestmark = pytest.mark.slow
NAME = "char_gpt2_decoder"
STEPS = 4


def _nll(path, ids: list[int]) -> np.ndarray:
    """-log p(ids[t+1] | ids[:t+1]) from one plain ORT prefill (past length 0), float64 log-softmax."""
    s = CHAR_GPT2
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    n = len(ids)
    feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, n), np.int64),
             "position_ids": np.arange(n, dtype=np.int64)[None]}
    for i in range(s.layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = np.zeros((1, s.heads, 0, s.head_dim), np.float32)
    logits = sess.run(["logits"], feeds)[0][0].astype(np.float64)
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -logp[np.arange(n - 1), ids[1:]]


def _heldout_dataset(tmp):
    """The sample's held-out text as a text dataset through its tokenizer.json, and the text file."""
    tokenizer, heldout = (SAMPLE_DIR / f for f in get(NAME).side_files)
    src = tmp / "text"
    src.mkdir()
    (src / "heldout.txt").write_bytes(heldout.read_bytes())
    return import_dataset(src, tmp / "data", tokenizer=tokenizer, calibration_fraction=0.5, name="heldout"), heldout


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trained")
    ds, heldout = _heldout_dataset(tmp)
    model = path_of(NAME)
    before = sha256_file(model)
    report = api.precision(api.load(model), variants=["fp32", "int4", "int8-weights"], out_dir=tmp / "variants",
                           latency_budget_s=0.5, dataset=ds, generation_steps=STEPS)
    assert sha256_file(model) == before
    lines = heldout.read_text(encoding="utf-8").splitlines()
    prompts = [encode(lines[r.line])[:MAX_PROMPT_TOKENS] for r in ds.part("evaluation")][:4]   # decoder_prompts' 4
    return model, report, prompts


def test_trained_sample_is_not_labelled_random_and_the_others_are():
    assert not has_random_weights(onnx.load(path_of(NAME), load_external_data=False))
    assert "trained" in get(NAME).tags and "random-weights" not in get(NAME).tags
    for other in ("gpt2_decoder_with_past", "llama_optimum"):
        assert has_random_weights(onnx.load(path_of(other), load_external_data=False))


def test_perplexity_equals_plain_onnxruntime_and_is_far_below_the_vocabulary(run):
    model, report, prompts = run
    gen = report.variant("int4").generation
    assert gen is not None and gen["random_weights"] is False and gen["prompts"] == len(prompts) == 4
    assert not any("random weights" in n or "untrained" in n for n in gen["notes"])
    want_fp32 = float(np.exp(np.mean(np.concatenate([_nll(model, p) for p in prompts]))))
    want_int4 = float(np.exp(np.mean(np.concatenate([_nll(report.variant("int4").path, p) for p in prompts]))))
    assert gen["perplexity_fp32"] == pytest.approx(want_fp32, rel=1e-5)
    assert gen["perplexity"] == pytest.approx(want_int4, rel=1e-5)
    assert want_fp32 < CHAR_GPT2.vocab / 3                         # trained: far below 48 (uniform guessing)
    # the model is the corpus' bigram model: its perplexity is within 5 % of the counted bigrams'
    bigram = bigram_log_probs(corpus()[0])
    counted = float(np.exp(np.mean(np.concatenate([-bigram[p[:-1], p[1:]] for p in map(np.asarray, prompts)]))))
    assert want_fp32 == pytest.approx(counted, rel=0.05)
    assert want_int4 > want_fp32 and gen["mean_kl"] > 0           # int4 moved the distributions, for the worse
    w8 = report.variant("int8-weights").generation
    assert w8["perplexity_fp32"] == pytest.approx(want_fp32, rel=1e-5)
    assert w8["mean_kl"] < gen["mean_kl"]                         # 8-bit blocks are closer than 4-bit
    assert abs(np.log(w8["perplexity"] / want_fp32)) < abs(np.log(want_int4 / want_fp32))


def test_random_weights_sample_perplexity_stays_labelled(tmp_path):
    """The same held-out text through the same tokenizer on a random-weights GPT-2 (vocab 288 holds ids < 48)."""
    ds, _heldout = _heldout_dataset(tmp_path)
    report = api.precision(api.load(path_of("gpt2_decoder_with_past")), variants=["fp32", "int4"],
                           out_dir=tmp_path / "variants", latency_budget_s=0.5, dataset=ds, generation_steps=2)
    gen = report.variant("int4").generation
    assert gen["random_weights"] is True and gen["perplexity_fp32"] is not None
    assert any("random weights" in n for n in gen["notes"])
