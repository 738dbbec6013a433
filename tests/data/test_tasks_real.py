"""Task inference for every output kind of the real corpus (issue 32 item 6), judged against what a person
states about each output (the corpus manifest, ``benchmarks/corpus/manifest.toml``), and language-model
logits on the sample decoders.

Before this change an LLM's logits [batch, seq, vocab] were "regression", the PP-OCR text detector's
probability map "regression", ddddocr's CTC head (declared [1, seqlen], really [T, 1, 8210]) "regression",
Silero VAD's speech probability "regression" and the iris classifier's probabilities "other".
Oracles: the manifest; numpy argmax / thresholds on plain onnxruntime outputs for the metrics.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from studio.core.compare import compare_arrays
from studio.data.evaluate import output_specs
from studio.data.metrics import METRICS, metrics_for
from studio.data.tasks import output_tasks
from tests.conftest import SAMPLES
from tests.corpus import ACCEPTED_TASKS, corpus_manifest, corpus_model


def test_task_inference_matches_the_manifest_over_the_corpus(capsys):
    """Every output of every corpus model (benchmarks/corpus/manifest.toml: what a person states each output
    is) against the inferred task, counted right/wrong; the kept-aside models are reported on their own line."""
    tally = {False: [0, 0], True: [0, 0]}
    wrong: dict[bool, list[str]] = {False: [], True: []}
    for name, m in corpus_manifest().items():
        model = onnx.load(str(corpus_model(name)), load_external_data=False)
        inferred = output_tasks(model)
        assert set(inferred) == set(m.outputs), name
        for out, t in inferred.items():
            ok = t.kind in ACCEPTED_TASKS[m.outputs[out]]
            tally[m.kept_aside][0 if ok else 1] += 1
            if not ok:
                wrong[m.kept_aside].append(f"{name} {out}: {t.kind} ({t.reason[:100]}), fact {m.outputs[out]}")
    with capsys.disabled():
        for aside, label in ((False, "tuned on"), (True, "kept aside")):
            right, bad = tally[aside]
            print(f"\ntask inference vs the manifest ({label}): {right} of {right + bad} outputs right"
                  + (f"; wrong: {wrong[aside]}" if bad else ""))
    assert wrong[False] == []
    assert tally[False][0] >= 27           # 20 tuned-on models, 27 outputs (manifest of 25 models)


@pytest.mark.parametrize("sample", ["gpt2_decoder", "gpt2_decoder_with_past", "gpt2_decoder_merged",
                                    "char_gpt2_decoder", "llama_optimum", "llama_genai"])
def test_llm_logits_are_language_model_logits_not_regression(sample):
    model = onnx.load(str(SAMPLES / f"{sample}.onnx"), load_external_data=False)
    t = output_tasks(model)["logits"]
    assert t.kind == "language-model", t.reason
    assert t.classes == model.graph.output[0].type.tensor_type.shape.dim[2].dim_value
    spec = next(s for s in output_specs(model) if s.name == "logits")
    assert [m.name for m in metrics_for(spec)] == ["next-token-agreement", "cosine"]
    # an encoder fed token ids keeps its hidden states an embedding
    enc = onnx.load(str(SAMPLES / "transformer_block.onnx"), load_external_data=False)
    assert output_tasks(enc)["last_hidden_state"].kind == "embedding"


def _char_logits(seed: int) -> np.ndarray:
    from studio.core.feeds import input_specs, random_feeds

    path = SAMPLES / "char_gpt2_decoder.onnx"
    feeds = random_feeds(input_specs(onnx.load(str(path), load_external_data=False)),
                         {"batch_size": 2, "sequence_length": 12, "past_sequence_length": 3}, seed=seed)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(["logits"], feeds)[0]


def test_next_token_agreement_is_argmax_per_position_on_a_real_decoder_run():
    golden = _char_logits(0)
    assert golden.shape == (2, 12, 48)
    cand = golden.copy()
    rng = np.random.default_rng(1)
    flip = rng.choice(24, size=5, replace=False)          # 5 of 24 positions get another best token
    flat = cand.reshape(24, 48)
    for i in flip:
        j = (int(np.argmax(flat[i])) + 1) % 48
        flat[i, j] = flat[i].max() + 1.0
    oracle = float(np.mean(golden.reshape(24, 48).argmax(-1) == cand.reshape(24, 48).argmax(-1)))
    assert oracle == pytest.approx(19 / 24)
    model = onnx.load(str(SAMPLES / "char_gpt2_decoder.onnx"), load_external_data=False)
    task = output_tasks(model)["logits"]
    r = METRICS["next-token-agreement"].score("logits", [golden], [cand])
    assert r.value == pytest.approx(oracle)
    d = compare_arrays("logits", golden, cand, task=task)
    assert d.top1_agreement == pytest.approx(oracle) and d.top5_overlap is None


def test_text_detector_probability_map_is_judged_as_a_mask():
    path = corpus_model("rapidocr_ppocrv4_det")
    model = onnx.load(str(path), load_external_data=False)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((1, 3, 96, 128), dtype=np.float32)
    (golden,) = sess.run(None, {"x": x})
    assert golden.shape == (1, 1, 96, 128)
    specs = output_specs(model, shapes={"sigmoid_0.tmp_0": golden.shape})
    (spec,) = specs
    assert spec.task.kind == "segmentation" and spec.task.threshold == 0.5
    assert [m.name for m in metrics_for(spec)] == ["mask-iou"]
    cand = golden.copy()
    cand[..., :48] = 1.0 - cand[..., :48]          # the left half inverted
    g, c = golden[0, 0] > 0.5, cand[0, 0] > 0.5
    ious = [np.count_nonzero(g & c) / np.count_nonzero(g | c), np.count_nonzero(~g & ~c) / np.count_nonzero(~g | ~c)]
    r = metrics_for(spec)[0].score(spec.name, [golden], [cand])
    assert r.value == pytest.approx(float(np.mean(ious)))


def test_ddddocr_ctc_head_is_a_sequence_whatever_its_declared_shape():
    path = corpus_model("ddddocr_common_old_int8")
    model = onnx.load(str(path), load_external_data=False)
    declared = [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert declared == [1, "seqlen"]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"input1": np.random.default_rng(0).random((1, 1, 64, 160), dtype=np.float32)})
    assert y.shape == (20, 1, 8210)
    for shapes in (None, {"387": y.shape}):
        t = output_tasks(model, shapes=shapes)["387"]
        assert t.kind == "sequence" and "DynamicQuantizeLSTM" in t.reason


def test_silero_speech_probability_inside_nested_ifs_is_a_binary_score():
    model = onnx.load(str(corpus_model("silero_vad")), load_external_data=False)
    assert len(model.graph.node) == 5                    # the whole net sits inside If bodies
    t = output_tasks(model)["output"]
    assert t.kind == "classification" and t.threshold == 0.5 and "If branches" in t.reason
