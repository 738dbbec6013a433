"""The KV-cache decoder samples: each runs a prefill and a decode step on plain onnxruntime, computes
what its architecture says (a NumPy forward pass written here), the merged model equals the pair,
the int4 sample is the MatMulNBits quantization of the float one, and the ~1B generator streams
a > 2 GiB model."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from sample_models import build
from sample_models.catalog import DECODERS, path_of
from sample_models.decoders import GPT2_TINY, LLAMA_1B, LLAMA_TINY, build_llama_genai, quantize_int4, write_large_decoder

WITH_PAST = [m.name for m in DECODERS if m.name != "gpt2_decoder"]
B, S = 2, 5


def _session(model) -> ort.InferenceSession:
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"])


def _feeds(sess: ort.InferenceSession, ids: np.ndarray, past_len: int, past: dict | None = None) -> dict:
    """Feeds that keep the cache contract: mask over past + new tokens, positions after the past."""
    inputs = {i.name: i for i in sess.get_inputs()}
    n = ids.shape[1]
    f = {"input_ids": ids, "attention_mask": np.ones((ids.shape[0], past_len + n), np.int64),
         "position_ids": np.tile(np.arange(past_len, past_len + n, dtype=np.int64), (ids.shape[0], 1))}
    for name, info in inputs.items():
        if name.startswith("past_key_values."):
            f[name] = past[name] if past is not None else np.zeros((ids.shape[0], info.shape[1], 0, info.shape[3]),
                                                                    np.float32)
    if "use_cache_branch" in inputs:
        f["use_cache_branch"] = np.array([past is not None])
    return f


def _run(sess: ort.InferenceSession, feeds: dict) -> dict:
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _ids(vocab: int, n: int = S, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, (B, n)).astype(np.int64)


def _as_past(out: dict) -> dict:
    return {k.replace("present.", "past_key_values."): v for k, v in out.items() if k.startswith("present.")}


# ------------------------------------------------------------------ prefill + decode on plain ORT


@pytest.mark.parametrize("name", WITH_PAST)
def test_prefill_then_decode_step_reads_the_cache(name):
    sess = _session(path_of(name))
    vocab = sess.get_outputs()[0].shape[-1]
    ids = _ids(vocab)
    pre = _run(sess, _feeds(sess, ids, 0))
    kv, hd = sess.get_inputs()[3].shape[1], sess.get_inputs()[3].shape[3]
    assert pre["logits"].shape == (B, S, vocab) and pre["present.0.key"].shape == (B, kv, S, hd)
    nxt = pre["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
    step = _run(sess, _feeds(sess, nxt, S, _as_past(pre)))
    assert step["present.0.value"].shape == (B, kv, S + 1, hd) and step["logits"].shape == (B, 1, vocab)
    # the decode step equals recomputing the whole sequence: the cache carries the prompt
    full = _run(sess, _feeds(sess, np.concatenate([ids, nxt], 1), 0))
    np.testing.assert_allclose(step["logits"][:, 0], full["logits"][:, -1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(step["present.1.key"], full["present.1.key"], rtol=1e-4, atol=1e-4)
    # ... and it does read the cache: a zeroed one changes the answer
    zeroed = {k: np.zeros_like(v) for k, v in _as_past(pre).items()}
    assert np.abs(_run(sess, _feeds(sess, nxt, S, zeroed))["logits"] - step["logits"]).max() > 1e-2


def test_gpt2_decoder_without_past_is_the_first_step():
    sess = _session(path_of("gpt2_decoder"))
    assert not [i for i in sess.get_inputs() if i.name.startswith("past_")]
    ids = _ids(GPT2_TINY.vocab)
    first = _run(sess, _feeds(sess, ids, 0))
    with_past = _session(path_of("gpt2_decoder_with_past"))
    ref = _run(with_past, _feeds(with_past, ids, 0))
    for k, v in first.items():
        np.testing.assert_allclose(v, ref[k], rtol=1e-5, atol=1e-5)


def test_merged_equals_the_pair():
    merged = _session(path_of("gpt2_decoder_merged"))
    no_past, with_past = _session(path_of("gpt2_decoder")), _session(path_of("gpt2_decoder_with_past"))
    ids = _ids(GPT2_TINY.vocab, seed=3)
    a = _run(merged, _feeds(merged, ids, 0))                 # use_cache_branch False: the no-past branch
    b = _run(no_past, _feeds(no_past, ids, 0))
    for k in b:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-6)
    nxt = np.array([[7], [11]], np.int64)
    c = _run(merged, _feeds(merged, nxt, S, _as_past(a)))   # True: the with-past branch
    d = _run(with_past, _feeds(with_past, nxt, S, _as_past(b)))
    for k in d:
        np.testing.assert_allclose(c[k], d[k], rtol=1e-6, atol=1e-6)
    m = onnx.load(str(path_of("gpt2_decoder_merged")))
    (if_node,) = m.graph.node
    assert if_node.op_type == "If" and if_node.input == ["use_cache_branch"]
    branches = {a.name: a.g for a in if_node.attribute}
    assert {g.name for g in branches.values()} == {"with_past", "no_past"}
    assert not any(g.initializer for g in branches.values())      # the weights are shared, outside the If
    assert any(n.op_type == "Concat" and "past_key_values.0.key" in n.input for n in branches["then_branch"].node)


# ------------------------------------------------------------------ NumPy references (the architectures)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _causal_attention(q, k, v):
    n = q.shape[2]
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    scores = np.where(np.tril(np.ones((n, n), bool)), scores, -np.inf)
    ctx = _softmax(scores) @ v
    return ctx.transpose(0, 2, 1, 3).reshape(q.shape[0], n, -1)


def _weights(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}


def test_gpt2_computes_gpt2():
    s, m = GPT2_TINY, onnx.load(str(path_of("gpt2_decoder")))
    W = _weights(m)
    ids = _ids(s.vocab)

    def ln(x, p):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * W[p + ".weight"] + W[p + ".bias"]

    def heads(x):
        return x.reshape(B, S, 4, 8).transpose(0, 2, 1, 3)

    h = W["transformer.wte.weight"][ids] + W["transformer.wpe.weight"][np.arange(S)]
    for i in range(2):
        p = f"transformer.h.{i}"
        qkv = ln(h, p + ".ln_1") @ W[p + ".attn.c_attn.weight"] + W[p + ".attn.c_attn.bias"]
        q, k, v = (heads(t) for t in np.split(qkv, 3, axis=-1))
        h = h + _causal_attention(q, k, v) @ W[p + ".attn.c_proj.weight"] + W[p + ".attn.c_proj.bias"]
        x = ln(h, p + ".ln_2") @ W[p + ".mlp.c_fc.weight"] + W[p + ".mlp.c_fc.bias"]
        x = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        h = h + x @ W[p + ".mlp.c_proj.weight"] + W[p + ".mlp.c_proj.bias"]
    logits = ln(h, "transformer.ln_f") @ W["transformer.wte.weight"].T      # tied head
    got = _run(_session(m), {"input_ids": ids, "attention_mask": np.ones((B, S), np.int64),
                             "position_ids": np.tile(np.arange(S), (B, 1))})["logits"]
    np.testing.assert_allclose(got, logits, rtol=1e-4, atol=1e-4)


def _llama_reference(m: onnx.ModelProto, ids: np.ndarray) -> np.ndarray:
    """LLaMA: RMSNorm, rotary (theta 10000, rotate-half), GQA (6 heads share 2 KV heads), SwiGLU."""
    W = _weights(m)
    proj = {n.name.removesuffix("/MatMul"): n.input[1] for n in m.graph.node if n.op_type == "MatMul"}
    n = ids.shape[1]

    def lin(x, scope):
        return x @ W[proj[scope]]

    def rms(x, w):
        return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5) * W[w]

    ang = np.arange(n)[:, None] * 10000.0 ** (-np.arange(0, 8, 2) / 8)
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))

    def rope(x):
        return x * cos + np.concatenate([-x[..., 4:], x[..., :4]], -1) * sin

    def heads(x, k):
        return x.reshape(B, n, k, 8).transpose(0, 2, 1, 3)

    h = W["model.embed_tokens.weight"][ids]
    for i in range(3):
        a, p = f"/model/layers.{i}/self_attn", f"model.layers.{i}"
        x = rms(h, p + ".input_layernorm.weight")
        q, k, v = rope(heads(lin(x, a + "/q_proj"), 6)), rope(heads(lin(x, a + "/k_proj"), 2)), heads(lin(x, a + "/v_proj"), 2)
        k, v = np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1)
        h = h + lin(_causal_attention(q, k, v), a + "/o_proj")
        x = rms(h, p + ".post_attention_layernorm.weight")
        mlp = f"/model/layers.{i}/mlp"
        gate = lin(x, mlp + "/gate_proj")
        h = h + lin(gate / (1 + np.exp(-gate)) * lin(x, mlp + "/up_proj"), mlp + "/down_proj")
    return lin(rms(h, "model.norm.weight"), "/lm_head")


def test_llama_computes_llama_and_genai_fp32_equals_optimum():
    m = onnx.load(str(path_of("llama_optimum")))
    ids = _ids(LLAMA_TINY.vocab, n=6, seed=5)
    ref = _llama_reference(m, ids)
    opt = _session(m)
    got = _run(opt, _feeds(opt, ids, 0))["logits"]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    # the genai graph (GQA, RotaryEmbedding, SkipSimplifiedLayerNormalization) with float weights is the same model
    genai = _session(build_llama_genai(int4=False))
    np.testing.assert_allclose(_run(genai, _feeds(genai, ids, 0))["logits"], got, rtol=1e-4, atol=1e-4)
    # (GroupQueryAttention on CPU takes one new token per step when batch > 1 and there is a past)
    pre_o, pre_g = _run(opt, _feeds(opt, ids[:, :5], 0)), _run(genai, _feeds(genai, ids[:, :5], 0))
    step_o = _run(opt, _feeds(opt, ids[:, 5:], 5, _as_past(pre_o)))
    step_g = _run(genai, _feeds(genai, ids[:, 5:], 5, _as_past(pre_g)))
    np.testing.assert_allclose(step_g["logits"], step_o["logits"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(step_g["logits"], ref[:, 5:], rtol=1e-4, atol=1e-4)


def _dequantize(packed: np.ndarray, scales: np.ndarray, k: int) -> np.ndarray:
    """MatMulNBits' documented layout: B[N, K/block, block/2], low nibble first, zero point 8."""
    n, blocks, half = packed.shape
    q = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(n, blocks, 2 * half).astype(np.float64)
    w = (q - 8) * scales.reshape(n, blocks)[..., None]
    return w.reshape(n, -1)[:, :k].T


def test_int4_sample_is_the_quantized_float_sample():
    opt, g4 = onnx.load(str(path_of("llama_optimum"))), onnx.load(str(path_of("llama_genai")))
    Wo, W4 = _weights(opt), {t.name: numpy_helper.to_array(t) for t in g4.graph.initializer}
    proj = {n.name.removesuffix("/MatMul"): n.input[1] for n in opt.graph.node if n.op_type == "MatMul"}
    nbits = [n for n in g4.graph.node if n.op_type == "MatMulNBits"]
    assert len(nbits) == 3 * 7 + 1 and {n.domain for n in nbits} == {"com.microsoft"}
    for n in nbits:
        attrs = {a.name: a.i for a in n.attribute}
        assert attrs["bits"] == 4 and attrs["block_size"] == 16
        scope = n.name.removesuffix("/MatMulNBits").replace("/attn/", "/self_attn/")
        w = Wo[proj[scope]]
        assert w.shape == (attrs["K"], attrs["N"])
        deq = _dequantize(W4[n.input[1]], W4[n.input[2]], attrs["K"])
        step = np.repeat(W4[n.input[2]].reshape(attrs["N"], -1), 16, axis=1)[:, :attrs["K"]].T
        assert np.all(np.abs(deq - w) <= step / 2 + 1e-6), n.name     # round to nearest of the int4 grid
    # ORT's MatMulNBits kernel computes A @ dequant(B) with that layout
    rng = np.random.default_rng(1)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    packed, scales = quantize_int4(w, 16)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft", K=40, N=24, bits=4,
                            block_size=16)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [3, 40])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 24])],
                              [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(scales, "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    a = rng.standard_normal((3, 40)).astype(np.float32)
    np.testing.assert_allclose(_session(model).run(None, {"A": a})[0], a @ _dequantize(packed, scales, 40),
                               rtol=1e-4, atol=1e-4)


def test_genai_sample_uses_the_contrib_ops():
    m = onnx.load(str(path_of("llama_genai")))
    ops = {(n.domain, n.op_type) for n in m.graph.node}
    assert {("com.microsoft", op) for op in ("GroupQueryAttention", "RotaryEmbedding",
                                             "SkipSimplifiedLayerNormalization", "MatMulNBits")} <= ops
    gqa = [n for n in m.graph.node if n.op_type == "GroupQueryAttention"]
    assert [{a.name: a.i for a in n.attribute}["kv_num_heads"] for n in gqa] == [2, 2, 2]
    assert [list(n.output[1:]) for n in gqa] == [[f"present.{i}.key", f"present.{i}.value"] for i in range(3)]


# ------------------------------------------------------------------ the large decoder


def test_large_decoder_is_streamed_sparse_and_over_2_gib(tmp_path):
    assert build.main(["--large-decoder", str(tmp_path), "--large-fill", "zeros"]) == 0
    model_path, data = tmp_path / "model.onnx", tmp_path / "model.onnx.data"
    m = onnx.load(str(model_path), load_external_data=False)
    s = LLAMA_1B
    d = s.hidden // s.heads
    per_layer = 2 * s.hidden * s.heads * d + 2 * s.hidden * s.kv_heads * d + 3 * s.hidden * s.intermediate + 2 * s.hidden
    expected = s.layers * per_layer + 2 * s.vocab * s.hidden + s.hidden      # TinyLlama-1.1B: 1,100,048,384
    assert expected == 1_100_048_384
    external = [t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    counted = sum(math.prod(t.dims) for t in m.graph.initializer if t.data_type == TensorProto.FLOAT
                  and t.name not in ("cos_cache", "sin_cache"))
    assert counted == expected
    ends = [int(e["offset"]) + int(e["length"]) for e in ({x.key: x.value for x in t.external_data} for t in external)]
    assert data.stat().st_size == max(ends) > 2**31 and data.stat().st_blocks * 512 < 2**20   # sparse: no disk used
    assert model_path.stat().st_size < 2**21
    cfg = json.loads((tmp_path / "genai_config.json").read_text())
    assert cfg["model"]["decoder"]["num_key_value_heads"] == 4 and cfg["search"]["past_present_share_buffer"] is True


@pytest.mark.parametrize("convention", ["genai", "optimum"])
def test_large_decoder_generator_writes_runnable_weights(tmp_path, convention):
    """The same writer at the tiny shape with random weights: the streamed data file is a valid model."""
    path = write_large_decoder(tmp_path, shape=LLAMA_TINY, convention=convention, fill="random")
    sess = _session(path)
    ids = _ids(LLAMA_TINY.vocab)
    pre = _run(sess, _feeds(sess, ids, 0))
    assert np.isfinite(pre["logits"]).all() and np.ptp(pre["logits"]) > 1e-2
    step = _run(sess, _feeds(sess, ids[:, :1], S, _as_past(pre)))
    assert step["present.2.key"].shape == (B, 2, S + 1, 8)
