"""An OpenVINO IR (NNCF int4 ``compress_weights``) in the generation profile, bound to its source ONNX decoder:
its greedy tokens against a reference loop written here with plain openvino (read_model + compile + infer,
present -> past by hand), a bad IR as one line before any worker runs, and ``--variants auto`` on decoders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from profilers.generation import GreedyGeneration, make_stepper, prompt_ids
from studio import api
from studio.core.engines import sessions
from studio.core.errors import StudioError
from studio.core.jobs import JobContext
from studio.inspect.decoder import recognize
from studio.inspect.decoder_contract import contract_of
from tests.conftest import SAMPLES
from tests.requirements import require_engine

SOURCE = SAMPLES / "llama_optimum.onnx"


@pytest.fixture(scope="module")
def int4_ir(tmp_path_factory) -> Path:
    require_engine("openvino")
    from studio.precision.nncf_weights import compress_openvino

    r = compress_openvino(SOURCE, tmp_path_factory.mktemp("ir"), mode="INT4_SYM", group_size=16)
    assert r.constants.get("i4", 0) > 0          # the IR really holds int4 weights
    return r.ir_path


def reference_greedy_ov(xml: Path, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, float]:
    """Greedy decoding with plain openvino on the IR: (tokens [batch, new_tokens], smallest top-1/top-2 margin)."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(xml)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    inputs = {p.get_any_name(): p for p in compiled.inputs}
    outputs = {p.get_any_name(): p for p in compiled.outputs}
    batch, length = prompt.shape
    past = {n: np.zeros((batch, p.get_partial_shape()[1].get_length(), 0, p.get_partial_shape()[3].get_length()),
                        np.float32) for n, p in inputs.items() if n.startswith("past_key_values.")}
    ids, tokens, margin = prompt, [], np.inf
    for step in range(new_tokens):
        start = 0 if step == 0 else length + step - 1
        feeds = {"input_ids": ids, "attention_mask": np.ones((batch, start + ids.shape[1]), np.int64),
                 "position_ids": np.tile(np.arange(start, start + ids.shape[1], dtype=np.int64), (batch, 1)), **past}
        request.infer(feeds)
        last = np.array(request.get_tensor(outputs["logits"]).data)[:, -1, :]
        top2 = np.sort(last, axis=-1)[:, -2:]
        margin = min(margin, float((top2[:, 1] - top2[:, 0]).min()))
        token = last.argmax(-1)
        tokens.append(token)
        past = {n: np.array(request.get_tensor(outputs[n.replace("past_key_values", "present")]).data, copy=True)
                for n in past}
        ids = token.reshape(batch, 1).astype(np.int64)
    return np.stack(tokens, axis=1), margin


@pytest.mark.slow
def test_int4_ir_generation_equals_a_plain_openvino_loop(int4_ir, tmp_path):
    prompt, n = prompt_ids(320, 1, 6, seed=2), 8
    expected, margin = reference_greedy_ov(int4_ir, prompt, n)
    assert margin > 1e-4, "the reference has a near tie: pick another seed"
    # 1. the runner protocol in this process: the IR read as an IR, names from its source ONNX model
    model = onnx.load(str(SOURCE))
    contract = contract_of(model, recognize(model), SOURCE.name)
    runner = sessions.open_runner("openvino", int4_ir, {"openvino_ir": True, "onnx_path": str(SOURCE)},
                                  JobContext(scratch=tmp_path, out_dir=tmp_path))
    try:
        assert runner.output_names == [o.name for o in model.graph.output]     # the source's order
        gen = GreedyGeneration(make_stepper(runner, contract), contract, prompt, n)
        gen()
        np.testing.assert_array_equal(gen.tokens, expected)
        assert gen.past_lengths == [0, *range(6, 6 + n - 1)]
    finally:
        runner.close()
    # 2. the generation profile (sandbox worker): the IR beside its fp32 source, interleaved on OpenVINO
    handle = api.load(SOURCE)
    target = api.openvino_ir_target(int4_ir, handle, "int4")
    result = api.profile_generation([("fp32", handle), target], ["ort", "ov"],
                                    api.GenerationOptions(prompt_lengths=(6,), new_tokens=n, generations=2,
                                                          memory=False), out_dir=tmp_path / "gen")
    by = {v.id: v for v in result.variants}
    assert sorted(by) == ["t0-ort", "t0-ov", "t1-ov"]          # an IR runs on OpenVINO only
    assert all(v.error is None for v in by.values()), [v.error for v in by.values()]
    drawn = np.array(result.prompts["p6b1"], np.int64)          # the profile's own seeded prompt
    want, margin = reference_greedy_ov(int4_ir, drawn, n)
    assert margin > 1e-4, "the reference has a near tie: pick another seed"
    np.testing.assert_array_equal(np.array(by["t1-ov"].case(6, 1).tokens), want)
    fp32_tokens = np.array(by["t0-ov"].case(6, 1).tokens)
    assert not np.array_equal(fp32_tokens, want), "the int4 IR ran, not its fp32 source"
    assert [r.other_id for r in result.ratios] == ["t0-ov", "t1-ov"]


def _write_ir(tmp: Path, src: Path, name: str) -> Path:
    import openvino as ov

    xml = tmp / f"{name}.xml"
    ov.save_model(ov.Core().read_model(str(src)), str(xml), compress_to_fp16=False)
    return xml


def test_a_bad_ir_is_one_line_before_any_worker(int4_ir, tmp_path):
    handle = api.load(SOURCE)
    options = api.GenerationOptions(prompt_lengths=(4,), new_tokens=2, memory=False)
    out = tmp_path / "out"
    cases = tmp_path / "cases"
    cases.mkdir()
    missing = cases / "missing.xml"
    missing.write_bytes(int4_ir.read_bytes())
    truncated = cases / "truncated.xml"
    truncated.write_bytes(int4_ir.read_bytes())
    truncated.with_suffix(".bin").write_bytes(int4_ir.with_suffix(".bin").read_bytes()[:1000])
    garbage = cases / "garbage.xml"
    garbage.write_text("<net><layers><layer")
    garbage.with_suffix(".bin").write_bytes(b"")
    dtd = cases / "dtd.xml"
    dtd.write_text('<?xml version="1.0"?><!DOCTYPE net [<!ENTITY a "aaaa">]><net><layers/></net>')
    dtd.with_suffix(".bin").write_bytes(b"")
    for path, message in ((missing, r"missing\.bin are missing.*keep the \.bin beside the \.xml"),
                          (truncated, r"truncated\.bin is 1000 bytes but constant .* ends at byte \d+"),
                          (garbage, r"not well-formed XML"), (dtd, r"declares a document type"),
                          (cases / "nothere.xml", r"no such file"), (SOURCE, r"not an \.xml file")):
        with pytest.raises(StudioError, match=message) as info:
            api.openvino_ir_target(path, handle)
        assert "\n" not in str(info.value) and str(info.value).startswith("OpenVINO IR ")
    other = _write_ir(cases, SAMPLES / "gpt2_decoder_with_past.onnx", "gpt2")     # another model's IR
    with pytest.raises(StudioError, match=r"gpt2\.xml: has no input 'attention_mask'|gpt2\.xml: has no input "
                                          r"'past_key_values\.2\.key'|gpt2\.xml: has no input 'position_ids'"):
        api.profile_generation([handle, api.openvino_ir_target(other, handle)], ["ov"], options, out_dir=out)
    with pytest.raises(StudioError, match=r"model_int4_sym\.xml is an OpenVINO IR: it runs on OpenVINO only"):
        api.profile_generation([handle, api.openvino_ir_target(int4_ir, handle)], ["ort"], options, out_dir=out)
    assert not out.exists() or not any(out.iterdir())            # refused before any worker ran


def test_cli_profiles_an_ir_bound_to_the_first_onnx_model(int4_ir, capsys):
    from studio.cli import main

    assert main(["profile", str(SOURCE), str(int4_ir), "--generate", "--engine", "ov", "--prompt-lengths", "4",
                 "--new-tokens", "3", "--generations", "2", "--no-generation-memory"]) == 0
    out = capsys.readouterr().out
    assert "t1-ov" in out and "ratios vs t0-ov" in out
    assert main(["profile", str(int4_ir), "--generate", "--engine", "ov"]) != 0
    assert "list that .onnx first" in capsys.readouterr().err


def test_auto_variants_of_a_decoder_include_int4():
    from studio.precision.variants import _variant_names

    require_engine("openvino")
    llama = api.load(SOURCE).proto
    assert {"int4", "int4-ov"} <= set(_variant_names(llama, ["auto"]))
    assert {"int4", "int4-ov"} <= set(api.default_precision_variants(llama))
    # not for a transformer without a KV cache; no NNCF int4 for a merged decoder (its MatMuls sit inside If
    # branches, which compress_weights leaves alone); none for a genai build already in MatMulNBits
    assert "int4" not in api.default_precision_variants(api.load(SAMPLES / "transformer_block.onnx").proto)
    merged = api.default_precision_variants(api.load(SAMPLES / "gpt2_decoder_merged.onnx").proto)
    assert "int4" in merged and "int4-ov" not in merged
    assert "int4" not in api.default_precision_variants(api.load(SAMPLES / "llama_genai.onnx").proto)
