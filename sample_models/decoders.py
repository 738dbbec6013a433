"""Decoder-only language models with a KV cache, built in code (random weights).

The graphs follow the two export conventions users bring:

* **optimum** (Hugging Face ``optimum-cli export onnx``): ``input_ids``, ``attention_mask``
  (``[batch_size, past_sequence_length + sequence_length]``), ``position_ids``,
  ``past_key_values.N.key/value`` (``[batch_size, kv_heads, past_sequence_length, head_dim]``) in,
  ``logits`` and ``present.N.key/value`` out; plain ONNX ops (the torch exporter's decomposed
  attention, ``onnx::MatMul_N`` weight names). GPT-2 comes as the pair optimum writes
  (``decoder_model`` without past, ``decoder_with_past_model``) and as the merged model
  (both graphs under an ``If`` on ``use_cache_branch``, shared weights outside it, as
  ``optimum.onnx.merge_decoders`` writes it).
* **genai** (onnxruntime-genai's model builder): com.microsoft ``GroupQueryAttention``
  (``seqlens_k``/``total_sequence_length`` from the attention mask), ``RotaryEmbedding``
  with ``cos_cache``/``sin_cache``, ``SkipSimplifiedLayerNormalization`` and ``MatMulNBits``
  int4 weights (block 16, symmetric: zero point 8); the past is
  ``[batch_size, kv_heads, past_sequence_length, head_dim]``, the present
  ``[batch_size, kv_heads, total_sequence_length, head_dim]``. ORT's CPU GroupQueryAttention takes one
  new token per step when batch > 1 and a past is given (a multi-token continuation needs batch 1).

Every weight is random (seeded): these models have no meaning, only structure; results on them
are labelled "random weights" (the one trained sample, :mod:`sample_models.trained_decoder`, passes its
trained weights to :func:`build_gpt2_with_past_weights`). :func:`write_large_decoder` streams a
~1B-parameter-shaped model (TinyLlama-1.1B sizes, > 2 GiB of external data) to disk without ever holding
its weights in memory.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from sample_models.protos import sample_model

__all__ = ["DecoderShape", "GPT2_TINY", "LLAMA_TINY", "LLAMA_1B", "build_gpt2_decoder", "build_gpt2_with_past",
           "build_gpt2_with_past_weights", "build_gpt2_merged", "build_llama_optimum", "build_llama_genai",
           "quantize_int4", "write_large_decoder"]

F32, I64, I32, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL
MS = "com.microsoft"
INT4_BLOCK = 16


@dataclass(frozen=True)
class DecoderShape:
    """The sizes of a decoder (what ``inspect --decoder`` must read back from the graph)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    context: int
    eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# Sizes chosen so that no two facts coincide (a swapped field shows in the tests).
GPT2_TINY = DecoderShape(layers=2, hidden=32, heads=4, kv_heads=4, intermediate=128, vocab=288, context=64)
LLAMA_TINY = DecoderShape(layers=3, hidden=48, heads=6, kv_heads=2, intermediate=96, vocab=320, context=96)
# TinyLlama-1.1B: 1.1 G parameters, 4.4 GB in float32.
LLAMA_1B = DecoderShape(layers=22, hidden=2048, heads=32, kv_heads=4, intermediate=5632, vocab=32000, context=2048)


# ------------------------------------------------------------------------------ tensors


class _Tensors:
    """Initializers by name, drawn once (a second request for a name returns the same tensor,
    so the two branches of a merged model share their weights)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.tensors: dict[str, TensorProto] = {}

    def weight(self, name: str, shape: Sequence[int], std: float = 0.02, mean: float = 0.0) -> str:
        if name not in self.tensors:
            self._add_random(name, tuple(shape), std, mean)
        return name

    def _add_random(self, name: str, shape: tuple[int, ...], std: float, mean: float) -> None:
        arr = (mean + std * self.rng.standard_normal(shape)).astype(np.float32)
        self.tensors[name] = numpy_helper.from_array(arr, name)

    def small(self, name: str, shape: Sequence[int], std: float = 0.02, mean: float = 0.0) -> str:
        """A small tensor (norm gains): always inline."""
        if name not in self.tensors:
            arr = (mean + std * self.rng.standard_normal(tuple(shape))).astype(np.float32)
            self.tensors[name] = numpy_helper.from_array(arr, name)
        return name

    def array(self, name: str, value: np.ndarray) -> str:
        if name not in self.tensors:
            self.tensors[name] = numpy_helper.from_array(np.ascontiguousarray(value), name)
        return name

    def int4(self, name: str, k: int, n: int, std: float = 0.02) -> tuple[str, str]:
        """A random [K, N] weight stored as MatMulNBits int4 (``<name>_Q4``, ``<name>_scales``)."""
        q, s = f"{name}_Q4", f"{name}_scales"
        if q not in self.tensors:
            w = (std * self.rng.standard_normal((k, n))).astype(np.float32)
            packed, scales = quantize_int4(w, INT4_BLOCK)
            self.tensors[q] = numpy_helper.from_array(packed, q)
            self.tensors[s] = numpy_helper.from_array(scales, s)
        return q, s


class _LazyTensors(_Tensors):
    """Big weights declared as external data at an offset, written later chunk by chunk
    (``fill="random"``: seeded normal values; ``"zeros"``: a sparse file, nothing written)."""

    ALIGN = 4096

    def __init__(self, seed: int, location: str) -> None:
        super().__init__(seed)
        self.location = location
        self.plan: list[tuple[int, int, float, float, int]] = []   # offset, elements, std, mean, seed
        self.size = 0

    def _add_random(self, name: str, shape: tuple[int, ...], std: float, mean: float) -> None:
        t = TensorProto(name=name, data_type=F32, dims=list(shape))
        count = math.prod(shape)
        offset = -(-self.size // self.ALIGN) * self.ALIGN
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(offset)), ("length", str(count * 4))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        self.tensors[name] = t
        self.plan.append((offset, count, std, mean, len(self.plan)))
        self.size = offset + count * 4

    def write(self, path: Path, fill: str, chunk: int = 1 << 22) -> None:
        with open(path, "wb") as fh:
            if fill == "random":
                for offset, count, std, mean, index in self.plan:
                    rng = np.random.default_rng([index, 20260])
                    fh.seek(offset)
                    for start in range(0, count, chunk):
                        n = min(chunk, count - start)
                        fh.write((mean + std * rng.standard_normal(n, dtype=np.float32)).tobytes())
            fh.truncate(self.size)


def quantize_int4(w: np.ndarray, block: int = INT4_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """MatMulNBits int4 layout of a [K, N] weight: symmetric per block of ``block`` rows of K (default
    zero point 8), ``B[N, K/block, block/2]`` uint8 (two values a byte, low nibble first) and
    ``scales[N * K/block]`` float32. Dequantized: ``(q - 8) * scale``."""
    k, n = w.shape
    blocks = -(-k // block)
    padded = np.zeros((blocks * block, n), np.float32)
    padded[:k] = w
    wt = padded.T.reshape(n, blocks, block)
    scale = np.abs(wt).max(axis=2) / 7.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(wt / scale[..., None]) + 8, 0, 15).astype(np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    return packed, scale.astype(np.float32).reshape(-1)


# ------------------------------------------------------------------------------ graph


class _Graph:
    """Nodes with exporter-style names: ``<name>_output_0`` (torch) or ``<name>/output_0`` (genai)."""

    def __init__(self, tensors: _Tensors, out_sep: str = "_") -> None:
        self.t = tensors
        self.nodes: list[onnx.NodeProto] = []
        self.sep = out_sep
        self._consts: dict[str, int] = {}

    def node(self, op: str, inputs: Sequence[str], name: str, outputs: Sequence[str] | None = None,
             domain: str = "", **attrs) -> str:
        outs = list(outputs) if outputs is not None else [f"{name}{self.sep}output_0"]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, domain=domain or None, **attrs))
        return outs[0]

    def const(self, scope: str, value) -> str:
        k = self._consts.get(scope, 0)
        self._consts[scope] = k + 1
        name = f"{scope}/Constant" + (f"_{k}" if k else "")
        return self.node("Constant", [], name, value=numpy_helper.from_array(np.asarray(value)))

    def i64(self, scope: str, *values: int) -> str:
        return self.const(scope, np.array(values, dtype=np.int64))

    def scalar(self, scope: str, value, dtype=np.float32) -> str:
        return self.const(scope, np.array(value, dtype=dtype))


def _vi(name: str, elem: int, shape: Sequence[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(shape))


def _model(t: _Tensors, g: _Graph, io: tuple[list, list], doc: str, ms: bool = False) -> onnx.ModelProto:
    """The decoder's main graph over ``g``'s nodes and ``t``'s weights (com.microsoft opset 1 with ``ms``)."""
    ins, outs = io
    graph = helper.make_graph(g.nodes, "main_graph", ins, outs, list(t.tensors.values()))
    return sample_model(graph, 17, doc, extra_opsets=[(MS, 1)] if ms else ())


def _past_io(s: DecoderShape, past: bool, total: str) -> tuple[list, list]:
    """KV cache inputs (when ``past``) and outputs, in the conventions' order (key, value per layer)."""
    ins, outs = [], []
    for i in range(s.layers):
        for kind in ("key", "value"):
            if past:
                ins.append(_vi(f"past_key_values.{i}.{kind}", F32,
                               ["batch_size", s.kv_heads, "past_sequence_length", s.head_dim]))
            outs.append(_vi(f"present.{i}.{kind}", F32, ["batch_size", s.kv_heads, total, s.head_dim]))
    return ins, outs


def _decoder_io(s: DecoderShape, past: bool, total: str) -> tuple[list, list]:
    """The decoder's inputs (ids, mask over ``total`` positions, position ids, past) and outputs (logits, present)."""
    ins = [_vi("input_ids", I64, ["batch_size", "sequence_length"]),
           _vi("attention_mask", I64, ["batch_size", total]),
           _vi("position_ids", I64, ["batch_size", "sequence_length"])]
    kv_in, kv_out = _past_io(s, past, total)
    return ins + kv_in, [_vi("logits", F32, ["batch_size", "sequence_length", s.vocab])] + kv_out


# -- pieces of the torch-exported (optimum) graphs ------------------------------------------------


def _causal_mask(g: _Graph, scope: str) -> str:
    """Additive mask [B, 1, S, T]: 0 where key j may be seen by query i (j <= past + i and
    attention_mask[b, j] = 1), the float32 minimum elsewhere."""
    seq = g.node("Gather", [g.node("Shape", ["input_ids"], f"{scope}/Shape"), g.scalar(scope, 1, np.int64)],
                 f"{scope}/Gather", axis=0)
    total = g.node("Gather", [g.node("Shape", ["attention_mask"], f"{scope}/Shape_1"), g.scalar(scope, 1, np.int64)],
                   f"{scope}/Gather_1", axis=0)
    past = g.node("Sub", [total, seq], f"{scope}/Sub")
    rows = g.node("Range", [past, total, g.scalar(scope, 1, np.int64)], f"{scope}/Range")
    rows = g.node("Unsqueeze", [rows, g.i64(scope, 1)], f"{scope}/Unsqueeze")
    cols = g.node("Range", [g.scalar(scope, 0, np.int64), total, g.scalar(scope, 1, np.int64)], f"{scope}/Range_1")
    causal = g.node("LessOrEqual", [cols, rows], f"{scope}/LessOrEqual")
    pad = g.node("Cast", ["attention_mask"], f"{scope}/Cast", to=BOOL)
    pad = g.node("Unsqueeze", [pad, g.i64(scope, 1, 2)], f"{scope}/Unsqueeze_1")
    allowed = g.node("And", [causal, pad], f"{scope}/And")
    return g.node("Where", [allowed, g.scalar(scope, 0.0), g.scalar(scope, np.finfo(np.float32).min)],
                  f"{scope}/Where")


def _heads(g: _Graph, x: str, scope: str, tag: str, heads: int, head_dim: int) -> str:
    """[B, S, heads * head_dim] -> [B, heads, S, head_dim]."""
    x = g.node("Reshape", [x, g.i64(scope, 0, 0, heads, head_dim)], f"{scope}/Reshape{tag}")
    return g.node("Transpose", [x], f"{scope}/Transpose{tag}", perm=[0, 2, 1, 3])


def _attend(g: _Graph, scope: str, q: str, k: str, v: str, mask: str, s: DecoderShape) -> str:
    """softmax(q k^T / sqrt(d) + mask) v over [B, heads, *, d] (k, v repeated for GQA), back to [B, S, H]."""
    if s.kv_heads != s.heads:
        rep = s.heads // s.kv_heads

        def repeat(x: str, tag: str) -> str:
            x = g.node("Unsqueeze", [x, g.i64(scope, 2)], f"{scope}/repeat_kv/Unsqueeze{tag}")
            shape = g.node("Mul", [g.node("Shape", [x], f"{scope}/repeat_kv/Shape{tag}"), g.i64(scope, 1, 1, rep, 1, 1)],
                           f"{scope}/repeat_kv/Mul{tag}")
            x = g.node("Expand", [x, shape], f"{scope}/repeat_kv/Expand{tag}")
            return g.node("Reshape", [x, g.i64(scope, 0, s.heads, -1, s.head_dim)], f"{scope}/repeat_kv/Reshape{tag}")
        k, v = repeat(k, ""), repeat(v, "_1")
    kt = g.node("Transpose", [k], f"{scope}/Transpose_3", perm=[0, 1, 3, 2])
    scores = g.node("MatMul", [q, kt], f"{scope}/MatMul")
    scores = g.node("Div", [scores, g.scalar(scope, math.sqrt(s.head_dim))], f"{scope}/Div")
    scores = g.node("Add", [scores, mask], f"{scope}/Add")
    probs = g.node("Softmax", [scores], f"{scope}/Softmax", axis=-1)
    ctx = g.node("MatMul", [probs, v], f"{scope}/MatMul_1")
    ctx = g.node("Transpose", [ctx], f"{scope}/Transpose_4", perm=[0, 2, 1, 3])
    return g.node("Reshape", [ctx, g.i64(scope, 0, 0, s.heads * s.head_dim)], f"{scope}/Reshape_3")


def _cache(g: _Graph, scope: str, layer: int, kind: str, new: str, past: bool) -> str:
    """present = concat(past, new) along the sequence (or new itself without past)."""
    out = f"present.{layer}.{kind}"
    if past:
        return g.node("Concat", [f"past_key_values.{layer}.{kind}", new], f"{scope}/Concat{'_1' if kind == 'value' else ''}",
                      outputs=[out], axis=-2)
    return g.node("Identity", [new], f"{scope}/Identity{'_1' if kind == 'value' else ''}", outputs=[out])


# ------------------------------------------------------------------------------ GPT-2


def _gpt2_graph(t: _Tensors, s: DecoderShape, past: bool) -> _Graph:
    """GPT-2 (learned positions, pre-LayerNorm, fused c_attn, tanh-GELU MLP, tied LM head)."""
    g = _Graph(t)
    d = s.head_dim
    wte = t.weight("transformer.wte.weight", (s.vocab, s.hidden), 0.5)
    wpe = t.weight("transformer.wpe.weight", (s.context, s.hidden), 0.1)
    h = g.node("Add", [g.node("Gather", [wte, "input_ids"], "/transformer/wte/Gather"),
                       g.node("Gather", [wpe, "position_ids"], "/transformer/wpe/Gather")], "/transformer/Add")
    mask = _causal_mask(g, "/transformer")
    for i in range(s.layers):
        sc, p = f"/transformer/h.{i}", f"transformer.h.{i}"

        def ln(x: str, which: str) -> str:
            return g.node("LayerNormalization", [x, t.small(f"{p}.{which}.weight", (s.hidden,), 0.05, 1.0),
                                                 t.small(f"{p}.{which}.bias", (s.hidden,), 0.05)],
                          f"{sc}/{which}/LayerNormalization", axis=-1, epsilon=s.eps)

        def linear(x: str, name: str, k: int, n: int) -> str:
            y = g.node("MatMul", [x, t.weight(f"{p}.{name}.weight", (k, n), 1.0 / math.sqrt(k))],
                       f"{sc}/{name}/MatMul")
            return g.node("Add", [t.small(f"{p}.{name}.bias", (n,), 0.02), y], f"{sc}/{name}/Add")

        a = f"{sc}/attn"
        qkv = linear(ln(h, "ln_1"), "attn.c_attn", s.hidden, 3 * s.hidden)
        split = [f"{a}/Split_output_{j}" for j in range(3)]
        g.node("Split", [qkv, g.i64(a, s.hidden, s.hidden, s.hidden)], f"{a}/Split", outputs=split, axis=2)
        q = _heads(g, split[0], a, "", s.heads, d)
        k = _cache(g, a, i, "key", _heads(g, split[1], a, "_1", s.heads, d), past)
        v = _cache(g, a, i, "value", _heads(g, split[2], a, "_2", s.heads, d), past)
        ctx = _attend(g, a, q, k, v, mask, s)
        h = g.node("Add", [linear(ctx, "attn.c_proj", s.hidden, s.hidden), h], f"{sc}/Add")
        m = f"{sc}/mlp"
        x = linear(ln(h, "ln_2"), "mlp.c_fc", s.hidden, s.intermediate)
        # gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        x3 = g.node("Pow", [x, g.scalar(f"{m}/act", 3.0)], f"{m}/act/Pow")
        inner = g.node("Add", [x, g.node("Mul", [x3, g.scalar(f"{m}/act", 0.044715)], f"{m}/act/Mul")], f"{m}/act/Add")
        th = g.node("Tanh", [g.node("Mul", [inner, g.scalar(f"{m}/act", math.sqrt(2 / math.pi))], f"{m}/act/Mul_1")],
                    f"{m}/act/Tanh")
        x = g.node("Mul", [g.node("Mul", [x, g.scalar(f"{m}/act", 0.5)], f"{m}/act/Mul_2"),
                           g.node("Add", [th, g.scalar(f"{m}/act", 1.0)], f"{m}/act/Add_1")], f"{m}/act/Mul_3")
        h = g.node("Add", [linear(x, "mlp.c_proj", s.intermediate, s.hidden), h], f"{sc}/Add_1")
    h = g.node("LayerNormalization", [h, t.small("transformer.ln_f.weight", (s.hidden,), 0.05, 1.0),
                                      t.small("transformer.ln_f.bias", (s.hidden,), 0.05)],
               "/transformer/ln_f/LayerNormalization", axis=-1, epsilon=s.eps)
    # The exporter folds the tied head's transpose into a new initializer.
    head = t.array("onnx::MatMul_2048", numpy_helper.to_array(t.tensors[wte]).T.copy())
    g.node("MatMul", [h, head], "/lm_head/MatMul", outputs=["logits"])
    return g


def _gpt2_io(s: DecoderShape, past: bool) -> tuple[list, list]:
    return _decoder_io(s, past, "past_sequence_length + sequence_length" if past else "sequence_length")


_GPT2_DOC = ("GPT-2-style decoder, random weights ({what}): {s.layers} layers, {s.heads} heads of {s.head_dim}, "
             "hidden {s.hidden}, vocab {s.vocab}, {s.context} learned positions; optimum I/O names.")


def _gpt2_single(s: DecoderShape, seed: int, past: bool) -> onnx.ModelProto:
    t = _Tensors(seed)
    g = _gpt2_graph(t, s, past=past)
    what = "decoder with past" if past else "decoder without past"
    return _model(t, g, _gpt2_io(s, past=past), _GPT2_DOC.format(what=what, s=s))


def build_gpt2_decoder(s: DecoderShape = GPT2_TINY, seed: int = 2601) -> onnx.ModelProto:
    """optimum's ``decoder_model.onnx``: the first step (no past inputs), present outputs."""
    return _gpt2_single(s, seed, past=False)


def build_gpt2_with_past(s: DecoderShape = GPT2_TINY, seed: int = 2601) -> onnx.ModelProto:
    """optimum's ``decoder_with_past_model.onnx`` (past length 0 works too)."""
    return _gpt2_single(s, seed, past=True)


def build_gpt2_with_past_weights(weights: dict[str, np.ndarray], s: DecoderShape, doc: str,
                                 seed: int = 2604) -> onnx.ModelProto:
    """The with-past GPT-2 graph of :func:`build_gpt2_with_past` over given weights (initializer name ->
    array, e.g. trained ones; ``onnx::MatMul_2048`` is the LM head [hidden, vocab]); a weight not given
    is drawn as there. ``doc`` is the model's doc string."""
    t = _Tensors(seed)
    for name, value in weights.items():
        t.array(name, np.asarray(value, np.float32))
    return _model(t, _gpt2_graph(t, s, past=True), _gpt2_io(s, past=True), doc)


def build_gpt2_merged(s: DecoderShape = GPT2_TINY, seed: int = 2601) -> onnx.ModelProto:
    """optimum's ``decoder_model_merged.onnx``: ``If(use_cache_branch)`` with the with-past graph as
    then-branch and the no-past graph as else-branch, the shared weights in the outer graph. The
    no-past branch ignores the past inputs (feed them with past length 0, or 1 as optimum does)."""
    t = _Tensors(seed)
    with_past, no_past = _gpt2_graph(t, s, past=True), _gpt2_graph(t, s, past=False)
    ins, outs = _gpt2_io(s, past=True)
    _, outs_no_past = _gpt2_io(s, past=False)
    then_branch = helper.make_graph(with_past.nodes, "with_past", [], outs)
    else_branch = helper.make_graph(no_past.nodes, "no_past", [], outs_no_past)
    if_node = helper.make_node("If", ["use_cache_branch"], [o.name for o in outs], name="optimum::if",
                               then_branch=then_branch, else_branch=else_branch)
    merged_outs = [_vi("logits", F32, ["batch_size", "sequence_length", s.vocab])] + [
        _vi(o.name, F32, ["batch_size", s.kv_heads, "past_sequence_length + sequence_length", s.head_dim])
        for o in outs[1:]]
    graph = helper.make_graph([if_node], "main_graph", ins + [_vi("use_cache_branch", BOOL, [1])], merged_outs,
                              list(t.tensors.values()))
    return sample_model(graph, 17, _GPT2_DOC.format(what="merged decoder, If on use_cache_branch", s=s))


# ------------------------------------------------------------------------------ LLaMA


def _rms_norm(g: _Graph, x: str, scope: str, weight: str, eps: float) -> str:
    """x / sqrt(mean(x^2) + eps) * weight, as the torch exporter writes LlamaRMSNorm."""
    var = g.node("ReduceMean", [g.node("Pow", [x, g.scalar(scope, 2.0)], f"{scope}/Pow")], f"{scope}/ReduceMean",
                 axes=[-1], keepdims=1)
    rs = g.node("Sqrt", [g.node("Add", [var, g.scalar(scope, eps)], f"{scope}/Add")], f"{scope}/Sqrt")
    x = g.node("Mul", [x, g.node("Div", [g.scalar(scope, 1.0), rs], f"{scope}/Div")], f"{scope}/Mul")
    return g.node("Mul", [weight, x], f"{scope}/Mul_1")


def _rope_tables(s: DecoderShape, half: bool) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / (s.rope_theta ** (np.arange(0, s.head_dim, 2, dtype=np.float64) / s.head_dim))
    freqs = np.outer(np.arange(s.context, dtype=np.float64), inv)
    if not half:
        freqs = np.concatenate([freqs, freqs], axis=1)
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)


def _llama_optimum_graph(t: _Tensors, s: DecoderShape) -> _Graph:
    """LlamaForCausalLM as the torch exporter writes it (decomposed attention, repeat_kv for GQA)."""
    g = _Graph(t)
    d, counter = s.head_dim, iter(range(1000, 10**6))

    def linear(x: str, scope: str, k: int, n: int) -> str:     # torch writes W^T as onnx::MatMul_N
        return g.node("MatMul", [x, t.weight(f"onnx::MatMul_{next(counter)}", (k, n), 1.0 / math.sqrt(k))],
                      f"{scope}/MatMul")

    h = g.node("Gather", [t.weight("model.embed_tokens.weight", (s.vocab, s.hidden), 1.0), "input_ids"],
               "/model/embed_tokens/Gather")
    mask = _causal_mask(g, "/model")
    cos_t, sin_t = _rope_tables(s, half=False)
    r = "/model/rotary_emb"
    cos = g.node("Unsqueeze", [g.node("Gather", [t.array("model.rotary_emb.cos_cached", cos_t), "position_ids"],
                                      f"{r}/Gather"), g.i64(r, 1)], f"{r}/Unsqueeze")
    sin = g.node("Unsqueeze", [g.node("Gather", [t.array("model.rotary_emb.sin_cached", sin_t), "position_ids"],
                                      f"{r}/Gather_1"), g.i64(r, 1)], f"{r}/Unsqueeze_1")

    def rotate(x: str, scope: str, tag: str) -> str:
        """x * cos + rotate_half(x) * sin."""
        x1 = g.node("Slice", [x, g.i64(scope, 0), g.i64(scope, d // 2), g.i64(scope, 3)], f"{scope}/Slice{tag}")
        x2 = g.node("Slice", [x, g.i64(scope, d // 2), g.i64(scope, d), g.i64(scope, 3)], f"{scope}/Slice{tag}_1")
        rot = g.node("Concat", [g.node("Neg", [x2], f"{scope}/Neg{tag}"), x1], f"{scope}/Concat{tag}_2", axis=-1)
        return g.node("Add", [g.node("Mul", [x, cos], f"{scope}/Mul{tag}"), g.node("Mul", [rot, sin], f"{scope}/Mul{tag}_1")],
                      f"{scope}/Add{tag}_1")

    for i in range(s.layers):
        sc, p = f"/model/layers.{i}", f"model.layers.{i}"
        a = f"{sc}/self_attn"
        x = _rms_norm(g, h, f"{sc}/input_layernorm", t.small(f"{p}.input_layernorm.weight", (s.hidden,), 0.05, 1.0), s.eps)
        q = _heads(g, linear(x, f"{a}/q_proj", s.hidden, s.heads * d), a, "", s.heads, d)
        k = _heads(g, linear(x, f"{a}/k_proj", s.hidden, s.kv_heads * d), a, "_1", s.kv_heads, d)
        v = _heads(g, linear(x, f"{a}/v_proj", s.hidden, s.kv_heads * d), a, "_2", s.kv_heads, d)
        q, k = rotate(q, a, "_q"), rotate(k, a, "_k")
        k = _cache(g, a, i, "key", k, past=True)
        v = _cache(g, a, i, "value", v, past=True)
        ctx = _attend(g, a, q, k, v, mask, s)
        h = g.node("Add", [h, linear(ctx, f"{a}/o_proj", s.heads * d, s.hidden)], f"{sc}/Add")
        m = f"{sc}/mlp"
        x = _rms_norm(g, h, f"{sc}/post_attention_layernorm",
                      t.small(f"{p}.post_attention_layernorm.weight", (s.hidden,), 0.05, 1.0), s.eps)
        gate = linear(x, f"{m}/gate_proj", s.hidden, s.intermediate)
        act = g.node("Mul", [gate, g.node("Sigmoid", [gate], f"{m}/act_fn/Sigmoid")], f"{m}/act_fn/Mul")
        x = g.node("Mul", [act, linear(x, f"{m}/up_proj", s.hidden, s.intermediate)], f"{m}/Mul")
        h = g.node("Add", [h, linear(x, f"{m}/down_proj", s.intermediate, s.hidden)], f"{sc}/Add_1")
    h = _rms_norm(g, h, "/model/norm", t.small("model.norm.weight", (s.hidden,), 0.05, 1.0), s.eps)
    g.node("MatMul", [h, t.weight(f"onnx::MatMul_{next(counter)}", (s.hidden, s.vocab), 1.0 / math.sqrt(s.hidden))],
           "/lm_head/MatMul", outputs=["logits"])
    return g


def _llama_genai_graph(t: _Tensors, s: DecoderShape, int4: bool) -> _Graph:
    """The model builder's graph: GQA fed by the mask's row sums, RotaryEmbedding ops with the
    cos/sin caches, SkipSimplifiedLayerNormalization carrying the residual, MatMulNBits weights."""
    g = _Graph(t, out_sep="/")
    d = s.head_dim

    def linear(x: str, scope: str, name: str, k: int, n: int) -> str:
        if int4:
            q, sc = t.int4(name, k, n, 1.0 / math.sqrt(k))
            return g.node("MatMulNBits", [x, q, sc], f"{scope}/MatMulNBits", domain=MS, K=k, N=n, bits=4,
                          block_size=INT4_BLOCK)
        return g.node("MatMul", [x, t.weight(name, (k, n), 1.0 / math.sqrt(k))], f"{scope}/MatMul")

    emb = g.node("Gather", [t.weight("model.embed_tokens.weight", (s.vocab, s.hidden), 1.0), "input_ids"],
                 "/model/embed_tokens/Gather")
    m = "/model/attn_mask_reformat/attn_mask_subgraph"
    rows = g.node("ReduceSum", ["attention_mask", g.i64(m, 1)], f"{m}/ReduceSum", keepdims=0)
    seqlens = g.node("Cast", [g.node("Sub", [rows, g.scalar(m, 1, np.int64)], f"{m}/Sub")], f"{m}/Sub/Cast", to=I32)
    total = g.node("Gather", [g.node("Shape", ["attention_mask"], f"{m}/Shape"), g.scalar(m, 1, np.int64)],
                   f"{m}/Gather", axis=0)
    total = g.node("Cast", [total], f"{m}/Gather/Cast", to=I32)
    cos_t, sin_t = _rope_tables(s, half=True)
    cos, sin = t.array("cos_cache", cos_t), t.array("sin_cache", sin_t)
    residual, x = emb, _rms_norm(g, emb, "/model/layers.0/input_layernorm",
                                 t.small("model.layers.0.input_layernorm.weight", (s.hidden,), 0.05, 1.0), s.eps)
    for i in range(s.layers):
        sc, p = f"/model/layers.{i}", f"model.layers.{i}"
        a = f"{sc}/attn"
        if i:
            x = g.node("SkipSimplifiedLayerNormalization", [x, residual,
                                                            t.small(f"{p}.input_layernorm.weight", (s.hidden,), 0.05, 1.0)],
                       f"{sc}/input_layernorm/SkipLayerNorm", domain=MS, epsilon=s.eps,
                       outputs=[f"{sc}/input_layernorm/output_0", "", "", f"{sc}/input_layernorm/output_3"])
            residual = f"{sc}/input_layernorm/output_3"
        q = linear(x, f"{a}/q_proj", f"{p}.attn.q_proj.MatMul.weight", s.hidden, s.heads * d)
        k = linear(x, f"{a}/k_proj", f"{p}.attn.k_proj.MatMul.weight", s.hidden, s.kv_heads * d)
        v = linear(x, f"{a}/v_proj", f"{p}.attn.v_proj.MatMul.weight", s.hidden, s.kv_heads * d)
        q = g.node("RotaryEmbedding", [q, "position_ids", cos, sin], f"{a}/q_rotary/RotaryEmbedding", domain=MS,
                   interleaved=0, num_heads=s.heads)
        k = g.node("RotaryEmbedding", [k, "position_ids", cos, sin], f"{a}/k_rotary/RotaryEmbedding", domain=MS,
                   interleaved=0, num_heads=s.kv_heads)
        ctx = g.node("GroupQueryAttention",
                     [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens, total],
                     f"{a}/GroupQueryAttention", domain=MS,
                     outputs=[f"{a}/GroupQueryAttention/output_0", f"present.{i}.key", f"present.{i}.value"],
                     num_heads=s.heads, kv_num_heads=s.kv_heads, scale=1.0 / math.sqrt(d), local_window_size=-1,
                     do_rotary=0, rotary_interleaved=0, softcap=0.0)
        o = linear(ctx, f"{a}/o_proj", f"{p}.attn.o_proj.MatMul.weight", s.heads * d, s.hidden)
        n = f"{sc}/post_attention_layernorm"
        x = g.node("SkipSimplifiedLayerNormalization",
                   [o, residual, t.small(f"{p}.post_attention_layernorm.weight", (s.hidden,), 0.05, 1.0)],
                   f"{n}/SkipLayerNorm", domain=MS, epsilon=s.eps, outputs=[f"{n}/output_0", "", "", f"{n}/output_3"])
        residual = f"{n}/output_3"
        mlp = f"{sc}/mlp"
        gate = linear(x, f"{mlp}/gate_proj", f"{p}.mlp.gate_proj.MatMul.weight", s.hidden, s.intermediate)
        up = linear(x, f"{mlp}/up_proj", f"{p}.mlp.up_proj.MatMul.weight", s.hidden, s.intermediate)
        act = g.node("Mul", [gate, g.node("Sigmoid", [gate], f"{mlp}/act_fn/Sigmoid")], f"{mlp}/act_fn/Mul")
        x = linear(g.node("Mul", [act, up], f"{mlp}/Mul"), f"{mlp}/down_proj", f"{p}.mlp.down_proj.MatMul.weight",
                   s.intermediate, s.hidden)
    n = f"/model/layers.{s.layers}/final_norm_layernorm"
    x = g.node("SkipSimplifiedLayerNormalization", [x, residual, t.small("model.norm.weight", (s.hidden,), 0.05, 1.0)],
               f"{n}/SkipLayerNorm", domain=MS, epsilon=s.eps, outputs=[f"{n}/output_0"])
    if int4:
        q, sc_ = t.int4("lm_head.MatMul.weight", s.hidden, s.vocab, 1.0 / math.sqrt(s.hidden))
        g.node("MatMulNBits", [x, q, sc_], "/lm_head/MatMulNBits", domain=MS, outputs=["logits"], K=s.hidden,
               N=s.vocab, bits=4, block_size=INT4_BLOCK)
    else:
        g.node("MatMul", [x, t.weight("lm_head.MatMul.weight", (s.hidden, s.vocab), 1.0 / math.sqrt(s.hidden))],
               "/lm_head/MatMul", outputs=["logits"])
    return g


def _llama_io(s: DecoderShape, convention: str) -> tuple[list, list]:
    return _decoder_io(s, True, "total_sequence_length" if convention == "genai"
                       else "past_sequence_length + sequence_length")


_LLAMA_DOC = ("LLaMA-style decoder, random weights ({what}): {s.layers} layers, {s.heads} heads and {s.kv_heads} KV "
              "heads of {s.head_dim}, hidden {s.hidden}, SwiGLU {s.intermediate}, vocab {s.vocab}, rotary over "
              "{s.context} positions, RMSNorm.")


def build_llama_optimum(s: DecoderShape = LLAMA_TINY, seed: int = 2602) -> onnx.ModelProto:
    """optimum's single ``model.onnx`` with past inputs (prefill with past length 0)."""
    t = _Tensors(seed)
    g = _llama_optimum_graph(t, s)
    return _model(t, g, _llama_io(s, "optimum"), _LLAMA_DOC.format(what="optimum convention", s=s))


def build_llama_genai(s: DecoderShape = LLAMA_TINY, seed: int = 2602, int4: bool = True) -> onnx.ModelProto:
    """onnxruntime-genai model builder's layout (com.microsoft ops; int4 MatMulNBits by default)."""
    t = _Tensors(seed)
    g = _llama_genai_graph(t, s, int4)
    what = "onnxruntime-genai convention, " + ("MatMulNBits int4 block 16" if int4 else "float32 MatMul")
    return _model(t, g, _llama_io(s, "genai"), _LLAMA_DOC.format(what=what, s=s), ms=True)


# ------------------------------------------------------------------------------ the large model


def write_large_decoder(out_dir: str | Path, *, shape: DecoderShape = LLAMA_1B, convention: str = "genai",
                        fill: str = "random", seed: int = 2603) -> Path:
    """Write ``model.onnx`` + ``model.onnx.data`` (+ ``genai_config.json`` for genai) for a
    LLaMA-shaped decoder of ``shape`` (default ~1.1 G parameters, 4.4 GB of float32 external data)
    into ``out_dir``; returns the model path. Weights are declared first and streamed to the data
    file tensor by tensor in 16 MiB chunks, never all in memory. ``fill="zeros"`` writes a sparse data file
    of the full size (no disk used, no time): for tests that must not read it."""
    if convention not in ("genai", "optimum"):
        raise ValueError(f"convention must be genai or optimum, not {convention!r}")
    if fill not in ("random", "zeros"):
        raise ValueError(f"fill must be random or zeros, not {fill!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_path, data_name = out / "model.onnx", "model.onnx.data"
    t = _LazyTensors(seed, data_name)
    if convention == "genai":
        g = _llama_genai_graph(t, shape, int4=False)
    else:
        g = _llama_optimum_graph(t, shape)
    doc = _LLAMA_DOC.format(what=f"{convention} convention, ~{_param_count(shape) / 1e9:.1f} G parameters, "
                                 f"{fill} weights", s=shape)
    model = _model(t, g, _llama_io(shape, convention), doc, ms=convention == "genai")
    t.write(out / data_name, fill)
    tmp = model_path.with_suffix(".onnx.tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, model_path)
    if convention == "genai":
        (out / "genai_config.json").write_text(json.dumps(_genai_config(shape, model_path.name), indent=4) + "\n")
    return model_path


def _param_count(s: DecoderShape) -> int:
    d = s.head_dim
    per_layer = s.hidden * (s.heads * d * 2 + s.kv_heads * d * 2) + 3 * s.hidden * s.intermediate + 2 * s.hidden
    return s.layers * per_layer + 2 * s.vocab * s.hidden + s.hidden


def _genai_config(s: DecoderShape, filename: str) -> dict:
    """The ``genai_config.json`` the model builder writes beside its model (the fields inspect reads)."""
    return {"model": {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "type": "llama",
                      "context_length": s.context, "vocab_size": s.vocab,
                      "decoder": {"filename": filename, "head_size": s.head_dim, "hidden_size": s.hidden,
                                  "num_attention_heads": s.heads, "num_hidden_layers": s.layers,
                                  "num_key_value_heads": s.kv_heads,
                                  "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                                             "position_ids": "position_ids",
                                             "past_key_names": "past_key_values.%d.key",
                                             "past_value_names": "past_key_values.%d.value"},
                                  "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                                              "present_value_names": "present.%d.value"},
                                  "session_options": {"log_id": "onnxruntime-genai", "provider_options": []}}},
            "search": {"do_sample": False, "max_length": s.context, "min_length": 0, "num_beams": 1,
                       "past_present_share_buffer": True, "top_k": 1}}
