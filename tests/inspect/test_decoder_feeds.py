"""Seeded decoder feeds keep the KV-cache contract (issue 26 item 3): a prefill step (past 0) and a decode
step (past > 0) on every sample decoder, each with a mask of ones over past + new positions, position ids
that continue after the past and token ids in the vocabulary. The oracle is generation itself, in plain
onnxruntime: the decode step's feeds, with the prefill's present as their past, must give the logits the
prompt plus that token gives in one prefill (wrong positions or a wrong mask change them). The check and
the verification run both steps; a user's mask of the wrong length is one line naming both sides."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from sample_models.decoders import GPT2_TINY, build_gpt2_with_past
from studio import api
from studio.inspect.decoder import DecoderError, recognize
from studio.inspect.decoder_feeds import check_step, decoder_steps, verification_steps
from tests.conftest import SAMPLES, assert_user_message, ort_reference

WITH_PAST = ("gpt2_decoder_with_past", "gpt2_decoder_merged", "llama_optimum", "llama_genai")


def _load(name: str) -> onnx.ModelProto:
    return onnx.load(str(SAMPLES / f"{name}.onnx"))


@pytest.mark.parametrize("name", WITH_PAST)
def test_prefill_and_decode_steps_keep_the_contract(name):
    model = _load(name)
    spec = recognize(model)
    prefill, decode = decoder_steps(model, spec)
    assert (prefill.name, prefill.past_length, prefill.sequence_length) == ("prefill", 0, 8)
    assert (decode.name, decode.past_length, decode.sequence_length) == ("decode", 8, 1)
    for step in (prefill, decode):
        f = step.feeds
        assert f["attention_mask"].shape == (1, step.past_length + step.sequence_length)
        assert (f["attention_mask"] == 1).all()
        np.testing.assert_array_equal(f["position_ids"], [np.arange(step.past_length, step.past_length + 1
                                                                    if step.name == "decode" else 8)])
        assert 0 <= f["input_ids"].min() and f["input_ids"].max() < spec.vocab
        for c in spec.cache:
            assert f[c.input].shape == (1, c.heads, step.past_length, c.head_dim)
    if spec.use_cache_branch:
        assert prefill.feeds["use_cache_branch"].tolist() == [False]
        assert decode.feeds["use_cache_branch"].tolist() == [True]


@pytest.mark.parametrize("name", WITH_PAST)
def test_decode_feeds_continue_the_prefill_as_generation_does(name):
    """Prefill of P tokens, then the decode step's feeds with that present as past, equal one prefill of P + 1
    tokens at the last position: the positions and the mask the feeds give are the ones generation needs."""
    model = _load(name)
    spec = recognize(model)
    prefill, decode = decoder_steps(model, spec)
    first = ort_reference(model, prefill.feeds)
    feeds = dict(decode.feeds)
    for c in spec.cache:
        feeds[c.input] = first[c.output]
    step = ort_reference(model, feeds)
    whole = dict(prefill.feeds)
    whole["input_ids"] = np.concatenate([prefill.feeds["input_ids"], decode.feeds["input_ids"]], axis=1)
    whole["attention_mask"] = np.ones((1, 9), np.int64)
    whole["position_ids"] = np.arange(9, dtype=np.int64)[None]
    once = ort_reference(model, whole)
    np.testing.assert_allclose(step["logits"][:, -1], once["logits"][:, -1], rtol=1e-4, atol=1e-5)
    wrong = dict(feeds, position_ids=np.zeros_like(feeds["position_ids"]))     # the oracle can tell
    assert not np.allclose(ort_reference(model, wrong)["logits"][:, -1], once["logits"][:, -1], atol=1e-3)


def test_no_past_decoder_gets_a_prefill_only_and_user_dims_set_the_sizes():
    model = _load("gpt2_decoder")
    (only,) = decoder_steps(model)
    assert only.name == "prefill" and only.feeds["attention_mask"].shape == (1, 8)
    model = _load("llama_genai")            # mask dim named total_sequence_length: past + new, not a free 16
    prefill, decode = decoder_steps(model, dims={"sequence_length": 3, "past_sequence_length": 5, "batch_size": 2})
    assert prefill.feeds["input_ids"].shape == (2, 3) and prefill.feeds["attention_mask"].shape == (2, 3)
    assert decode.feeds["attention_mask"].shape == (2, 6) and decode.feeds["position_ids"].tolist() == [[5], [5]]


def test_verification_adds_a_decode_step_at_another_batch_and_past():
    model = _load("gpt2_decoder_merged")
    steps = verification_steps(model, recognize(model))
    assert [(s.name, s.batch, s.past_length) for s in steps] == [("prefill", 1, 0), ("decode", 1, 8), ("decode", 2, 3)]
    pinned = verification_steps(model, recognize(model), {"batch_size": 1, "past_sequence_length": 4})
    assert [(s.name, s.past_length) for s in pinned] == [("prefill", 0), ("decode", 4)]


def test_wrong_feeds_are_one_line_naming_both_sides():
    model = _load("gpt2_decoder_merged")
    spec = recognize(model)
    _prefill, decode = decoder_steps(model, spec)
    bad = dict(decode.feeds, attention_mask=np.ones((1, 12), np.int64))
    with pytest.raises(DecoderError) as e:
        check_step(spec, bad)
    assert_user_message(str(e.value), "attention_mask", "length 12", "past_key_values.0.key", "8", "input_ids",
                        "must be 9")
    # use_cache_branch False is the no-past branch: its mask covers the new tokens only
    with pytest.raises(DecoderError, match=r"use_cache_branch is False .* must be 1 "):
        check_step(spec, dict(decode.feeds, use_cache_branch=np.array([False])))
    with pytest.raises(DecoderError, match="position ids position_ids have length 2"):
        check_step(spec, dict(decode.feeds, position_ids=np.zeros((1, 2), np.int64)))
    with pytest.raises(DecoderError, match="outside the vocabulary of 288"):
        check_step(spec, dict(decode.feeds, input_ids=np.array([[288]])))
    layer1 = dict(decode.feeds, **{"past_key_values.1.key": np.zeros((1, 4, 5, 8), np.float32)})
    with pytest.raises(DecoderError, match="past_key_values.0.key has past length 8 but past_key_values.1.key has 5"):
        check_step(spec, layer1)
    check_step(spec, decode.feeds)      # the seeded ones pass


def test_verifier_uses_the_steps_and_refuses_a_users_wrong_mask(tmp_path):
    from studio.verification.verifier import Verifier

    path = SAMPLES / "gpt2_decoder_merged.onnx"
    v = Verifier(path)
    assert [f["attention_mask"].shape for f in v.feed_sets] == [(1, 8), (1, 9), (2, 4)]
    assert [f["use_cache_branch"].tolist() for f in v.feed_sets] == [[False], [True], [True]]
    ref = v.reference()
    assert ref is not None and len(ref.outputs) == 3          # ORT ran every step
    bad = dict(v.feed_sets[1], attention_mask=np.ones((1, 4), np.int64))
    with pytest.raises(DecoderError, match="has length 4"):
        Verifier(path, feeds=[bad])


def _fails_after_prefill(tmp_path):
    """GPT-2 with past whose first layer's past goes through Reshape to length 0: a prefill (past 0) runs,
    a decode step (past 8) fails in that Reshape."""
    model = build_gpt2_with_past(GPT2_TINY)
    g = model.graph
    cat = next(n for n in g.node if n.op_type == "Concat" and n.input[0] == "past_key_values.0.key")
    shape = onnx.helper.make_tensor("zero_past", onnx.TensorProto.INT64, [4], [1, GPT2_TINY.kv_heads, 0, 8])
    g.initializer.append(shape)
    g.node.insert(list(g.node).index(cat), onnx.helper.make_node(
        "Reshape", ["past_key_values.0.key", "zero_past"], ["past0_reshaped"], name="break_decode", allowzero=1))
    cat.input[0] = "past0_reshaped"
    path = tmp_path / "fails_after_prefill.onnx"
    onnx.save(model, str(path))
    return path


def test_check_runs_both_steps_and_a_decode_failure_is_the_verdict(tmp_path):
    report = api.check(api.load(SAMPLES / "gpt2_decoder_merged.onnx"), ["onnxruntime"])
    v = report.verdict("onnxruntime")
    assert v.verdict == "runs"
    assert v.ran_on["steps"] == ["prefill step (past length 0, 8 new token(s))",
                                 "decode step (past length 8, 1 new token(s))"]
    assert v.ran_on["inputs"]["attention_mask"] == "int64[1, 9]" and v.ran_on["inputs"]["use_cache_branch"] == "bool=True"
    broken = api.check(api.load(_fails_after_prefill(tmp_path)), ["onnxruntime"])
    v = broken.verdict("onnxruntime")
    assert v.verdict == "fails", v
    errors = [f for f in broken.findings if f.engine == "onnxruntime" and f.is_error]
    assert errors and "decode step (past length 8" in errors[0].message, errors
    assert not any(f.code == "NEEDS-INPUTS" for f in broken.findings)     # no size search beyond the contract


def test_check_with_a_users_wrong_mask_says_so(tmp_path):
    model = _load("gpt2_decoder_with_past")
    _prefill, decode = decoder_steps(model)
    npz = tmp_path / "bad.npz"
    np.savez(npz, **dict(decode.feeds, attention_mask=np.ones((1, 3), np.int64)))
    report = api.check(api.load(SAMPLES / "gpt2_decoder_with_past.onnx"), ["onnxruntime"], inputs=npz)
    messages = [f.message for f in report.findings if f.engine == "onnxruntime"]
    assert any("attention mask attention_mask has length 3" in m and "must be 9" in m for m in messages), messages
    assert report.verdict("onnxruntime").verdict != "runs"


def test_check_cli_names_the_steps(capsys):
    from studio.cli import main

    assert main(["check", str(SAMPLES / "gpt2_decoder_with_past.onnx"), "--engines", "onnxruntime"]) == 0
    out = capsys.readouterr().out
    assert ("steps  prefill step (past length 0, 8 new token(s)) then decode step (past length 8, 1 new token(s))"
            in out), out


def test_one_builder_of_step_feeds_follows_the_declared_ranks():
    """The contract's ``step_feeds`` (the one builder the seeded steps, the generation loop and the generation
    agreement share): hand-computed feeds for a rank 1 ``cache_position`` and a scalar branch flag, and for
    rank 2 positions at batch 2 sliced from a preallocated mask."""
    from studio.inspect.decoder_contract import GenerationContract

    c = GenerationContract(input_ids="ids", ids_dtype="int32", logits="logits", cache=(), cache_dtype="float32",
                           seq_axis=2, attention_mask="mask", position_ids="pos", positions_rank=1,
                           use_cache_branch="flag", branch_rank=0)
    f = c.step_feeds([[5]], 7)
    assert f["ids"].dtype == np.int32 and f["ids"].tolist() == [[5]]
    assert f["mask"].dtype == np.int64 and f["mask"].tolist() == [[1] * 8]
    assert f["pos"].tolist() == [7] and f["flag"].shape == () and bool(f["flag"]) is True
    assert bool(c.step_feeds([[1, 2, 3]], 0)["flag"]) is False
    two = GenerationContract(input_ids="ids", ids_dtype="int64", logits="logits", cache=(), cache_dtype="float32",
                             seq_axis=2, attention_mask="mask", position_ids="pos")
    buffer = np.ones((2, 16), np.int64)
    g = two.step_feeds(np.array([[4], [9]]), 5, mask=buffer)
    assert g["mask"].shape == (2, 6) and g["pos"].tolist() == [[5], [5]] and "flag" not in g
