"""The generation loop (profilers.generation) against a reference greedy loop written here with plain
onnxruntime, the mechanism (prefill once, then decode steps whose past grows by one; only the timed
rounds' calls recorded), the generation profile through the CLI's JSON, and its bad inputs."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from profilers.generation import GreedyGeneration, make_stepper, prompt_ids
from profilers.latency import timed_rounds, warm_up
from studio import api
from studio.core.requests import GenerationRequest
from studio.core.engines import sessions
from studio.core.errors import StudioError
from studio.core.jobs import JobContext
from studio.inspect.decoder import recognize
from studio.inspect.decoder_contract import GenerationContract, contract_of
from tests.conftest import SAMPLES


def reference_greedy(path: Path, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, float]:
    """Greedy decoding with plain onnxruntime: (tokens [batch, new_tokens], the smallest top-1 / top-2
    logit margin seen, so a caller knows whether another engine's rounding could flip a token)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    batch, length = prompt.shape
    past = {n: np.zeros((batch, i.shape[1], 0, i.shape[3]), np.float32) for n, i in inputs.items()
            if n.startswith("past_key_values.")}
    ids, tokens, margin = prompt, [], np.inf
    for step in range(new_tokens):
        start = 0 if step == 0 else length + step - 1
        feeds = {"input_ids": ids, "attention_mask": np.ones((batch, start + ids.shape[1]), np.int64),
                 "position_ids": np.tile(np.arange(start, start + ids.shape[1], dtype=np.int64), (batch, 1)), **past}
        if "use_cache_branch" in inputs:
            feeds["use_cache_branch"] = np.array([step > 0])
        out = dict(zip(outputs, session.run(None, feeds)))
        last = out["logits"][:, -1, :]
        top2 = np.sort(last, axis=-1)[:, -2:]
        margin = min(margin, float((top2[:, 1] - top2[:, 0]).min()))
        token = last.argmax(-1)
        tokens.append(token)
        past = {n: out[n.replace("past_key_values", "present")] for n in past}
        ids = token.reshape(batch, 1).astype(np.int64)
    return np.stack(tokens, axis=1), margin


def _generation(path: Path, engine: str, prompt: np.ndarray, new_tokens: int, *, io_binding: bool,
                tmp: Path) -> tuple[GreedyGeneration, object]:
    model = onnx.load(str(path))
    contract = contract_of(model, recognize(model), path.name)
    runner = sessions.open_runner(engine, path, {}, JobContext(scratch=tmp, out_dir=tmp))
    return GreedyGeneration(make_stepper(runner, contract, io_binding=io_binding), contract, prompt, new_tokens), runner


@pytest.mark.parametrize("name", ["gpt2_decoder_with_past", "gpt2_decoder_merged", "llama_optimum", "llama_genai"])
@pytest.mark.parametrize("io_binding", [True, False])
def test_tokens_equal_the_reference_loop_and_the_past_grows_by_one(name, io_binding, tmp_path):
    path = SAMPLES / f"{name}.onnx"
    prompt, n = prompt_ids(256, 2, 7, seed=3), 9
    expected, _ = reference_greedy(path, prompt, n)
    gen, runner = _generation(path, "onnxruntime", prompt, n, io_binding=io_binding, tmp=tmp_path)
    try:
        assert type(gen.stepper).__name__ == ("BoundOrtStepper" if io_binding else "PlainStepper")
        gen()
        np.testing.assert_array_equal(gen.tokens, expected)
        # prefill with past 0, then n - 1 decode steps reading past 7, 8, ..., 7 + n - 2
        assert gen.past_lengths == [0, *range(7, 7 + n - 1)]
        assert (gen.steps_ns > 0).all() and gen.steps_ns.shape == (n,)
        gen()                                   # a second generation starts again from an empty cache
        np.testing.assert_array_equal(gen.tokens, expected)
    finally:
        runner.close()


def test_openvino_runs_the_same_loop(tmp_path):
    path = SAMPLES / "llama_optimum.onnx"
    prompt = prompt_ids(320, 1, 5, seed=1)
    expected, margin = reference_greedy(path, prompt, 6)
    gen, runner = _generation(path, "openvino", prompt, 6, io_binding=True, tmp=tmp_path)
    try:
        assert type(gen.stepper).__name__ == "PlainStepper"      # OpenVINO offers no I/O binding here
        gen()
        assert gen.past_lengths == [0, 5, 6, 7, 8, 9]
        assert margin > 1e-3, "the reference has a near tie: pick another seed"
        np.testing.assert_array_equal(gen.tokens, expected)
    finally:
        runner.close()


def test_only_the_timed_calls_are_recorded_in_round_order(tmp_path):
    """timed_rounds' per-call hooks mark the timed generations: warm-ups and block warm-ups are not kept."""
    path = SAMPLES / "gpt2_decoder_with_past.onnx"
    a, ra = _generation(path, "onnxruntime", prompt_ids(288, 1, 4), 3, io_binding=True, tmp=tmp_path)
    b, rb = _generation(path, "onnxruntime", prompt_ids(288, 1, 4), 3, io_binding=False, tmp=tmp_path)
    try:
        warm_up({"a": (a, ()), "b": (b, ())}, 2)
        run = timed_rounds({"a": (a, ()), "b": (b, ())}, {"a": [1, 2, 1], "b": [1, 2, 1]},
                           hooks={"a": (a.start, a.stop), "b": (b.start, b.stop)})
        assert run.block_warmup                                   # 2 variants: one untimed call per block
        assert len(a.recorded) == len(b.recorded) == 4 == run.samples_ms["a"].size
        assert list(run.rounds_of["a"]) == [0, 1, 1, 2]
        assert all(r.shape == (3,) for r in a.recorded)
    finally:
        ra.close()
        rb.close()


def test_contract_of_names_what_the_loop_feeds():
    model = onnx.load(str(SAMPLES / "gpt2_decoder_merged.onnx"))
    c = contract_of(model, recognize(model))
    assert c.use_cache_branch == "use_cache_branch" and c.seq_axis == 2 and c.context == 64 and c.vocab == 288
    assert [x[0] for x in c.cache] == [f"past_key_values.{i}.{k}" for i in range(2) for k in ("key", "value")]
    assert GenerationContract.from_args(json.loads(json.dumps(c.to_args()))) == c
    assert c.positions_needed(16, 32) == 47


def test_bad_inputs_are_one_line_errors(tmp_path):
    options = api.GenerationOptions(prompt_lengths=(8,), new_tokens=4)
    with pytest.raises(StudioError, match=r"image_classifier\.onnx is not a KV-cache decoder.*past_key_values"):
        api.profile_generation([api.load(SAMPLES / "image_classifier.onnx")], "ort", options, out_dir=tmp_path)
    with pytest.raises(StudioError, match=r"no past_key_values\.N inputs.*decoder-with-past or the merged"):
        api.profile_generation([api.load(SAMPLES / "gpt2_decoder.onnx")], "ort", options, out_dir=tmp_path)
    with pytest.raises(StudioError, match=r"prompt length 80 is longer than the context .* \(64 positions\)"):
        api.profile_generation([api.load(SAMPLES / "gpt2_decoder_with_past.onnx")], "ort",
                               api.GenerationOptions(prompt_lengths=(80,), new_tokens=4), out_dir=tmp_path)
    with pytest.raises(StudioError, match=r"prompt length 40 \+ 32 new tokens needs 71 positions.*up to 33"):
        api.profile_generation([api.load(SAMPLES / "gpt2_decoder_with_past.onnx")], "ort",
                               api.GenerationOptions(prompt_lengths=(40,), new_tokens=32), out_dir=tmp_path)
    with pytest.raises(StudioError, match="new tokens must be an integer >= 2"):
        api.GenerationOptions(new_tokens=1)
    assert not any(tmp_path.iterdir())            # refused before any worker ran


@pytest.mark.slow
def test_cli_json_fields_are_present_and_consistent(capsys):
    from studio.cli import main

    path = SAMPLES / "llama_optimum.onnx"
    code = main(["profile", str(path), "--generate", "--engine", "ort,ov", "--prompt-lengths", "4,9",
                 "--new-tokens", "5", "--batch", "1,2", "--generations", "2", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["kind"] == "generation" and data["ok"] and data["interleaved"]
    assert [v["variant"]["id"] for v in data["variants"]] == ["t0-ort", "t0-ov"]
    assert data["decoders"][0]["kv_bytes_per_token"] == 3 * 2 * 2 * 8 * 4      # layers x K/V x kv heads x dim x fp32
    ort_v, ov_v = data["variants"]
    assert ort_v["details"]["io_binding"] is True and ov_v["details"]["io_binding"] is False
    for v in data["variants"]:
        assert [(c["prompt_length"], c["batch"]) for c in v["cases"]] == [(4, 1), (4, 2), (9, 1), (9, 2)]
        for c in v["cases"]:
            p, b = c["prompt_length"], c["batch"]
            prompt = np.array(data["prompts"][f"p{p}b{b}"], dtype=np.int64)
            assert prompt.shape == (b, p)
            expected, margin = reference_greedy(path, prompt, 5)
            if v is ort_v or margin > 1e-3:
                assert c["tokens"] == expected.tolist(), (v["variant"]["id"], p, b)
            assert c["past_lengths"] == [0, p, p + 1, p + 2, p + 3]
            assert c["generations"] == 2 and c["decode"]["count"] == 2 * 4 and c["ttft"]["count"] == 2
            assert c["ttft_ms"] == c["ttft"]["p50_ms"] and c["decode_p50_ms"] <= c["decode_p99_ms"]
            assert c["tokens_per_s"] == pytest.approx(b * 1000 / c["decode"]["p50_ms"], rel=1e-3)
            assert c["tokens_per_s_per_sequence"] == pytest.approx(c["tokens_per_s"] / b, rel=1e-3)
            assert len(c["decode_by_position_ms"]) == 4
            assert c["kv_cache_bytes"] == 384 * b * (p + 4)
            assert [x[0] for x in c["rss_by_length"]] == [p, p + 1, p + 2, p + 3, p + 4]
            assert c["peak_rss"] >= max(x[1] for x in c["rss_by_length"])
            assert c["peak_source"] in ("VmHWM", "RSS after each token")     # the latter where /proc says nothing
        assert v["opened_rss"] > v["baseline_rss"] > 0
    ratios = data["ratios"]
    assert [(r["other"], r["prompt_length"], r["batch"]) for r in ratios] == [
        ("t0-ov", 4, 1), ("t0-ov", 4, 2), ("t0-ov", 9, 1), ("t0-ov", 9, 2)]
    assert all(r["decode"]["rounds"] == 2 and r["ttft"]["rounds"] == 2 for r in ratios)


def test_flags_a_generation_does_not_use_are_refused(capsys):
    from studio.cli import main

    code = main(["profile", str(SAMPLES / "llama_optimum.onnx"), "--generate", "--per-op"])
    assert code == 2 and "--per-op does not apply to --generate" in capsys.readouterr().err


def test_generation_command_round_trips_the_options():
    """The generation hint is its request's command (the facade has no builder of its own)."""
    request = GenerationRequest(engines=("ort", "ov"), prompt_lengths=(16, 64), new_tokens=8, batch_sizes=(1, 4),
                                generations=3, io_binding=False)
    api.GenerationOptions(**request.options)                  # the options it asks for pass their checks
    line = request.command(["m.onnx"])
    assert line == ("onnx-studio profile m.onnx --generate --engine ort,ov --new-tokens 8 "
                    "--batch 1,4 --generations 3 --no-io-binding")
    assert not hasattr(api, "generation_command")


def test_unsupported_engine_is_the_variant_error_not_a_number(tmp_path):
    """MNN converts to fixed shapes: the loop refuses it with a reason, and the ORT variant still runs."""
    result = api.profile_generation([api.load(SAMPLES / "gpt2_decoder_with_past.onnx")], ["ort", "mnn"],
                                    api.GenerationOptions(prompt_lengths=(3,), new_tokens=2, generations=1,
                                                          memory=False), out_dir=Path(tempfile.mkdtemp(dir=tmp_path)))
    ort_v, mnn_v = result.variants
    assert ort_v.ok and ort_v.cases[0].tokens and not result.ok
    assert mnn_v.error_kind == "unavailable" and "ONNX Runtime and OpenVINO" in mnn_v.error


def test_a_scalar_use_cache_branch_is_fed_as_a_scalar(tmp_path):
    """Some merged exports declare ``use_cache_branch`` as a scalar: the loop feeds the rank declared."""
    model = onnx.load(str(SAMPLES / "gpt2_decoder_merged.onnx"))
    flag = next(i for i in model.graph.input if i.name == "use_cache_branch")
    flag.type.tensor_type.shape.ClearField("dim")
    path = tmp_path / "merged_scalar_flag.onnx"
    onnx.save(model, str(path))
    assert contract_of(model, recognize(model)).branch_rank == 0
    prompt = prompt_ids(288, 1, 5, seed=2)
    gen, runner = _generation(path, "onnxruntime", prompt, 5, io_binding=True, tmp=tmp_path)
    try:
        gen()
    finally:
        runner.close()
    expected, _ = reference_greedy(SAMPLES / "gpt2_decoder_merged.onnx", prompt, 5)
    np.testing.assert_array_equal(gen.tokens, expected)
