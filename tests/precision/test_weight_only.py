"""Weight-only int4/int8 variants of a KV-cache decoder (issue 26 item 5), checked against oracles written here:
the MatMulNBits count from the fp32 graph, a numpy dequantization of the MatMulNBits blocks run as plain
MatMuls, a teacher-forced greedy loop on plain onnxruntime, per-MatMul errors from plain onnxruntime runs,
and the NNCF IR's compressed constants counted with openvino."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from sample_models.catalog import path_of
from studio import api
from studio.core.errors import StudioError
from studio.data.datasets import import_dataset, text_token_ids
from tests.conftest import sha256_file
from tests.requirements import require_module

require_module("nncf")

pytestmark = pytest.mark.slow
STEPS = 4


def _eligible(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """MatMul output -> its weight, for MatMuls whose weight is a 2-D float initializer (counted here)."""
    inits = {t.name: t for t in model.graph.initializer}
    return {n.output[0]: inits[n.input[1]] for n in model.graph.node
            if n.op_type == "MatMul" and n.input[1] in inits and len(inits[n.input[1]].dims) == 2
            and inits[n.input[1]].data_type == onnx.TensorProto.FLOAT}


def _prompts_dataset(tmp, ids: list[list[int]], model):
    src = tmp / "prompts"
    src.mkdir()
    (src / "prompts.jsonl").write_text("".join(json.dumps({"input_ids": p}) + "\n" for p in ids))
    return import_dataset(src, tmp / "data", model=model, calibration_fraction=0.5, name="prompts")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("weight-only")
    model = path_of("llama_optimum")
    before = sha256_file(model)
    header = onnx.load(model)
    rng = np.random.default_rng(7)
    ds = _prompts_dataset(tmp, [rng.integers(0, 320, size=n).tolist() for n in (5, 9, 6, 7, 11, 4)], header)
    report = api.precision(api.load(model), variants=["fp32", "int4", "int8-weights", "int4-ov"],
                           out_dir=tmp / "variants", latency_budget_s=0.5, dataset=ds, generation_steps=STEPS)
    assert sha256_file(model) == before
    return model, header, ds, report


def test_int4_has_matmulnbits_exactly_where_fp32_had_eligible_matmuls(run):
    model, header, _ds, report = run
    eligible = _eligible(header)
    assert len(eligible) > 10
    for name, bits in (("int4", 4), ("int8-weights", 8)):
        v = report.variant(name)
        assert v.status == "ok", v.error
        q = onnx.load(v.path)
        nbits = [n for n in q.graph.node if n.op_type == "MatMulNBits"]
        assert {n.output[0] for n in nbits} == set(eligible)
        assert len(nbits) == len(eligible)
        assert all(helper.get_attribute_value(next(a for a in n.attribute if a.name == "bits")) == bits
                   for n in nbits)
        assert not _eligible(q)                      # no float weight MatMul left
        # the size follows from the blocks: K*N*bits/8 bytes of values and a float scale per block, instead of 4*K*N
        size = model.stat().st_size
        for n in nbits:
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            blocks = -(-a["K"] // a["block_size"])
            size += a["N"] * blocks * (a["block_size"] * bits // 8 + 4) - 4 * a["K"] * a["N"]
        assert v.details["weight_only"]["size_ratio"] == pytest.approx(size / model.stat().st_size, abs=0.01)


def _dequantized(q: onnx.ModelProto) -> onnx.ModelProto:
    """The int4 model with every MatMulNBits replaced by a float MatMul whose weight is dequantized here in
    numpy from the blocks: B[N, blocks, block/2] low nibble first, symmetric (zero point 8), scale per block."""
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    out = onnx.ModelProto()
    out.CopyFrom(q)
    del out.graph.node[:]
    for n in q.graph.node:
        if n.op_type != "MatMulNBits":
            out.graph.node.append(n)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        k, nn, block = attrs["K"], attrs["N"], attrs["block_size"]
        assert attrs["bits"] == 4 and (len(n.input) < 4 or not n.input[3])     # symmetric: no zero points
        packed = inits[n.input[1]]
        blocks = packed.shape[1]
        q4 = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(nn, blocks, block).astype(np.float32)
        scales = inits[n.input[2]].reshape(nn, blocks, 1)
        w = ((q4 - 8.0) * scales).reshape(nn, blocks * block)[:, :k].T
        name = n.input[1] + "_dequantized"
        out.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(w, np.float32), name))
        out.graph.node.append(helper.make_node("MatMul", [n.input[0], name], list(n.output), name=n.name))
    return out


def _session(model) -> ort.InferenceSession:
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _feeds(header: onnx.ModelProto, tokens, past_len: int, past: dict | None) -> dict:
    feeds = {"input_ids": np.asarray([tokens], np.int64),
             "attention_mask": np.ones((1, past_len + len(tokens)), np.int64),
             "position_ids": np.arange(past_len, past_len + len(tokens), dtype=np.int64)[None]}
    for i in header.graph.input:
        if i.name.startswith("past_key_values."):
            dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
            feeds[i.name] = past[i.name] if past else np.zeros((1, dims[1], 0, dims[3]), np.float32)
    return feeds


def test_int4_logits_equal_plain_matmuls_on_numpy_dequantized_weights(run):
    _model, header, _ds, report = run
    q = onnx.load(report.variant("int4").path)
    feeds = _feeds(header, [3, 141, 59, 26, 5], 0, None)
    got = _session(q).run(["logits"], feeds)[0]
    want = _session(_dequantized(q)).run(["logits"], feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    fp32 = _session(header).run(["logits"], feeds)[0]
    assert not np.allclose(got, fp32, atol=1e-6)            # int4 did change the weights


class _Loop:
    """A plain onnxruntime decoder step with its own KV cache."""

    def __init__(self, header, model) -> None:
        self.header, self.sess, self.past, self.n = header, _session(model), None, 0
        self.outs = [o.name for o in self.sess.get_outputs()]

    def feed(self, tokens) -> np.ndarray:
        res = dict(zip(self.outs, self.sess.run(None, _feeds(self.header, tokens, self.n, self.past))))
        self.past = {k.replace("present.", "past_key_values."): v for k, v in res.items() if k.startswith("present.")}
        self.n += len(tokens)
        return res["logits"][0].astype(np.float64)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_next_token_agreement_and_kl_equal_a_plain_onnxruntime_loop(run):
    model, header, ds, report = run
    v = report.variant("int4")
    gen = v.generation
    assert gen is not None and gen["random_weights"] is True and gen["steps"] == STEPS
    prompts = [p for p in text_token_ids(ds, part="evaluation")]
    agree, kls, positions = [], [], 0
    for prompt in prompts:
        a, b = _Loop(header, model), _Loop(header, onnx.load(v.path))
        la, lb = _log_softmax(a.feed(prompt)), _log_softmax(b.feed(prompt))
        for step in range(STEPS):
            agree += list(la.argmax(-1) == lb.argmax(-1))
            kls += list((np.exp(la) * (la - lb)).sum(-1))
            tok = int(la[-1].argmax())                  # fp32's greedy token, fed to both
            if step < STEPS - 1:
                la, lb = _log_softmax(a.feed([tok])), _log_softmax(b.feed([tok]))
        positions += len(prompt) + STEPS - 1
    assert gen["positions"] == positions == len(agree)
    assert gen["next_token_agreement"] == pytest.approx(np.mean(agree), abs=1e-6)
    assert gen["mean_kl"] == pytest.approx(np.mean(np.maximum(kls, 0)), rel=1e-4)
    assert 0 < gen["mean_kl"]                                    # int4 moved the distributions
    assert gen["prompts"] == len(prompts) and gen["perplexity"] is not None
    assert any("random weights" in n for n in gen["notes"])
    w8 = report.variant("int8-weights").generation
    assert w8["mean_kl"] < gen["mean_kl"]                        # 8-bit blocks are closer than 4-bit


def test_per_matmul_error_equals_plain_onnxruntime_outputs(run):
    model, header, _ds, report = run
    v = report.variant("int4")
    eligible = _eligible(header)
    assert {e["tensor"] for e in v.matmul_errors} == set(eligible)
    assert [e["rel_l2"] for e in v.matmul_errors] == sorted((e["rel_l2"] for e in v.matmul_errors), reverse=True)
    from studio.inspect.decoder_feeds import decoder_steps       # the evaluation's seeded prefill step

    feeds = decoder_steps(header, seed=1000)[0].feeds
    worst, best = v.matmul_errors[0], v.matmul_errors[-1]

    def with_outputs(m: onnx.ModelProto) -> onnx.ModelProto:
        m = onnx.load_from_string(m.SerializeToString())
        for e in (worst, best):
            m.graph.output.append(helper.make_tensor_value_info(e["tensor"], onnx.TensorProto.FLOAT, None))
        return m

    names = [worst["tensor"], best["tensor"]]
    ref = _session(with_outputs(header)).run(names, dict(feeds))
    got = _session(with_outputs(onnx.load(v.path))).run(names, dict(feeds))
    for e, r, g in zip((worst, best), ref, got):
        rel = np.linalg.norm((g - r).astype(np.float64)) / np.linalg.norm(r.astype(np.float64))
        assert e["rel_l2"] == pytest.approx(rel, rel=1e-2, abs=1e-6)
    assert worst["rel_l2"] > best["rel_l2"] > 0


def test_nncf_int4_ir_holds_int4_weights_and_runs(run):
    import openvino as ov

    _model, header, ds, report = run
    v = report.variant("int4-ov")
    assert v.status == "ok", v.error
    core = ov.Core()
    ir = core.read_model(str(v.path))
    i4 = [op for op in ir.get_ops() if op.get_type_name() == "Constant"
          and op.get_element_type().get_type_name() in ("i4", "u4")]
    # every eligible MatMul but the last one (lm_head, kept in int8 by NNCF's default backup) is int4
    assert len(i4) == len(_eligible(header)) - 1
    assert v.details["weight_only"]["compressed_constants"]["i4"] == len(i4)
    feeds = _feeds(header, [3, 141, 59, 26, 5], 0, None)
    compiled = core.compile_model(ir, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = next(np.asarray(t) for k, t in compiled(feeds).items() if "logits" in k.get_names())
    want = _session(header).run(["logits"], feeds)[0]
    cos = float(np.dot(got.ravel(), want.ravel()) / np.linalg.norm(got) / np.linalg.norm(want))
    assert 0.95 < cos < 1.0 - 1e-7
    assert v.generation is not None and v.generation["positions"] == report.variant("int4").generation["positions"]


def test_raw_text_prompts_through_tokenizer_json_and_a_vocabulary_mismatch(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from studio.inspect.decoder import recognize
    from studio.precision.generation_agreement import decoder_prompts

    header = onnx.load(path_of("llama_optimum"), load_external_data=False)
    spec = recognize(header)
    lines = ["the quick brown fox", "jumps over the lazy dog", "the dog sleeps", "a fox runs"]
    words = sorted({w for line in lines for w in line.split()})

    def tokenizer(offset: int):
        tok = Tokenizer(models.WordLevel({w: i + offset for i, w in enumerate(words)} | {"[UNK]": offset + 50},
                                         unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        path = tmp_path / f"tok{offset}.json"
        tok.save(str(path))
        return tok, path

    src = tmp_path / "text"
    src.mkdir()
    (src / "lines.txt").write_text("\n".join(lines) + "\n")
    tok, path = tokenizer(1)
    ds = import_dataset(src, tmp_path / "d1", tokenizer=path, calibration_fraction=0.5, name="text")
    prompts = decoder_prompts(spec, dataset=ds)
    want = [tok.encode(lines[r.line]).ids for r in ds.part("evaluation")]
    assert [list(p) for p in prompts.ids] == want and prompts.real_text
    far_tok, far = tokenizer(5000)                                # ids beyond the model's 320 logits
    ds2 = import_dataset(src, tmp_path / "d2", tokenizer=far, calibration_fraction=0.5, name="far")
    top = max(i for r in ds2.part("evaluation") for i in far_tok.encode(lines[r.line]).ids)
    with pytest.raises(StudioError) as err:
        decoder_prompts(spec, dataset=ds2)
    msg = str(err.value)
    assert "\n" not in msg and "320" in msg and f"id {top}" in msg       # both sides named


def test_bad_weight_options_are_refused_before_any_work(tmp_path):
    model = path_of("llama_optimum")
    for opts, word in (({"block_size": 12}, "block size"), ({"ratio": 0}, "ratio"), ({"bits": 3}, "bits")):
        with pytest.raises(StudioError, match=word):
            api.precision(api.load(model), variants=["fp32", "int4"], weight_options=opts, out_dir=tmp_path / "o")
        assert not any((tmp_path / "o").glob("int4*"))


def test_cli_weight_only_options_and_generation_in_json(tmp_path, capsys):
    from studio.cli import main

    model = path_of("llama_optimum")
    assert main(["precision", str(model), "--variants", "fp32,int8-weights", "--block-size", "32", "--steps", "2",
                 "--budget", "0.5", "--out", str(tmp_path / "v"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    v = next(x for x in d["variants"] if x["name"] == "int8-weights")
    assert v["details"]["weight_only"]["block_size"] == 32 and v["details"]["weight_only"]["bits"] == 8
    assert v["generation"]["steps"] == 2 and v["generation"]["random_weights"] is True
    assert len(v["matmul_errors"]) == len(_eligible(onnx.load(model)))
    q = onnx.load(tmp_path / "v" / "int8-weights" / model.name)
    assert {helper.get_attribute_value(a) for n in q.graph.node if n.op_type == "MatMulNBits"
            for a in n.attribute if a.name == "block_size"} == {32}
    assert any("greedy steps" in n for n in d["notes"])


def test_merged_decoder_matmuls_inside_if_branches_are_quantized(tmp_path):
    """optimum's merged decoder keeps its weights outside the If and its MatMuls inside both branches."""
    from passes.pipeline import run_passes
    from passes.registry import make_pass

    src = path_of("gpt2_decoder_merged")
    m = onnx.load(src)
    weights = {t.name for t in m.graph.initializer if len(t.dims) == 2 and t.data_type == onnx.TensorProto.FLOAT}

    def branch_nodes(model):
        return [n for node in model.graph.node if node.op_type == "If" for a in node.attribute for n in a.g.node]

    want = sorted(n.output[0] for n in branch_nodes(m) if n.op_type == "MatMul" and n.input[1] in weights)
    assert len(want) > 4 and not any(n.op_type == "MatMul" and n.input[1] in weights for n in m.graph.node)
    r = run_passes(src, [make_pass("quantize-weight-only", bits=4)], tmp_path / "m.onnx", on_failure="stop")
    assert r.ok, r.summary()
    q = onnx.load(tmp_path / "m.onnx")
    assert sorted(n.output[0] for n in branch_nodes(q) if n.op_type == "MatMulNBits") == want


def test_genai_decoder_already_in_int4_says_so():
    report = api.precision(api.load(path_of("llama_genai")), variants=["fp32", "int4"], latency_budget_s=0.5)
    v = report.variant("int4")
    header = onnx.load(path_of("llama_genai"), load_external_data=False)
    done = sum(n.op_type == "MatMulNBits" for n in header.graph.node)
    assert v.status == "failed" and f"{done} MatMuls already hold N-bit weights" in v.error and "\n" not in v.error
