"""A tiny *trained* character-level GPT-2 decoder (the one sample whose perplexity means something).

Corpus: the English prose of the Python Language Reference topics that ship with CPython itself
(``pydoc_data.topics``, the text behind ``help("if")``; PSF License 2.0, permissive, not public
domain: no public-domain English text ships in the installed packages). Code blocks, grammar
rules and heading underlines are dropped; topics ``sorted(topics)[i]`` with ``i % 8 == 3`` are held
out as the evaluation text, the rest train the model. The extract (CPython 3.11.7's topics) is
committed as ``texts/python_reference_prose.jsonl.gz`` with the PSF licence beside it, so the sample
does not change with the interpreter that builds it.

Training is closed-form and deterministic (numpy, float64, well under a second): the model is a
character bigram model in GPT-2 clothing. Each character's embedding is a seeded code with zero mean
and unit variance over the hidden dims (so the final LayerNorm leaves it unchanged); the untied LM
head is the minimum-norm least-squares solution of ``code @ head = log P(next | char)``, the
maximum-likelihood bigram log-probabilities counted on the training text (add-0.5 smoothing,
centred per row). The two transformer blocks carry small seeded weights (output projections scaled
down), so they perturb the bigram logits only slightly; positions add nothing. Weights are rounded to
1e-4 so that the bytes do not depend on the BLAS. The graph is :func:`build_gpt2_with_past`'s (optimum
``decoder_with_past_model`` I/O names). Side files: ``tokenizer.json`` (HF tokenizers, BPE without
merges = one token per character, lowercasing) and the held-out lines for a text dataset.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import numpy as np
import onnx

from sample_models.decoders import DecoderShape, build_gpt2_with_past_weights

__all__ = ["ALPHABET", "CHAR_GPT2", "TOKENIZER_FILE", "HELDOUT_FILE", "corpus", "encode", "build_char_gpt2",
           "tokenizer_json", "heldout_text", "bigram_log_probs"]

UNK = "<unk>"
ALPHABET = " abcdefghijklmnopqrstuvwxyz0123456789.,;:'\"()-_"      # ids 1.., <unk> is 0
CHAR_GPT2 = DecoderShape(layers=2, hidden=64, heads=4, kv_heads=4, intermediate=128, vocab=len(ALPHABET) + 1,
                         context=64)
TOKENIZER_FILE = "char_gpt2_decoder.tokenizer.json"
HELDOUT_FILE = "char_gpt2_decoder.heldout.txt"
# The prose extracted from CPython 3.11.7's pydoc_data.topics (PSF License 2.0; see texts/LICENSE-PSF.txt).
CORPUS_FILE = Path(__file__).with_name("texts") / "python_reference_prose.jsonl.gz"
HELDOUT_LINES = 24
LINE_CHARS = 72
SMOOTHING = 0.5
BLOCK_SCALE = 0.05                                             # output projections, against 1/sqrt(fan-in)
SEED = 2604
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"})
_INDEX = {c: i + 1 for i, c in enumerate(ALPHABET)}


def _prose(text: str) -> list[str]:
    """The topic's paragraphs of prose: unindented lines joined, headings/underlines and code dropped."""
    paragraphs, cur = [], []
    for line in text.splitlines():
        if not line.strip() or line.startswith((" ", "\t")) or re.fullmatch(r"[*=\-~^]+", line.strip()):
            if cur:
                paragraphs.append(" ".join(cur))
            cur = []
            continue
        cur.append(line.strip())
    if cur:
        paragraphs.append(" ".join(cur))
    return [re.sub(r"\s+", " ", p.translate(_QUOTES).lower()) for p in paragraphs if len(p) > 40]


def extract_corpus() -> list[tuple[bool, str]]:
    """(held out, paragraph) from the running interpreter's ``pydoc_data.topics``: how
    :data:`CORPUS_FILE` was made (CPython 3.11.7). The build reads the committed file, never this:
    each CPython release regenerates its topics, and the sample must not change with the interpreter."""
    from pydoc_data.topics import topics

    return [(i % 8 == 3, p) for i, key in enumerate(sorted(topics)) for p in _prose(topics[key])]


def write_corpus(path: Path = CORPUS_FILE) -> None:
    """Rewrite :data:`CORPUS_FILE` from this interpreter (``python -m sample_models.trained_decoder``)."""
    rows = "".join(json.dumps({"held_out": h, "text": t}) + "\n" for h, t in extract_corpus())
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(rows.encode())


def corpus() -> tuple[str, list[str]]:
    """(training text, held-out paragraphs) from the committed extract :data:`CORPUS_FILE`."""
    train, held = [], []
    with gzip.open(CORPUS_FILE, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            (held if row["held_out"] else train).append(row["text"])
    return " ".join(train), held


def encode(text: str) -> list[int]:
    """Character ids as the tokenizer gives them (lowercased; outside the alphabet: <unk> = 0)."""
    return [_INDEX.get(c, 0) for c in text.lower()]


def bigram_log_probs(text: str, vocab: int = CHAR_GPT2.vocab) -> np.ndarray:
    """log P(b | a) [vocab, vocab], maximum likelihood with add-``SMOOTHING`` counts (float64)."""
    ids = np.asarray(encode(text), np.int64)
    counts = np.full((vocab, vocab), SMOOTHING)
    np.add.at(counts, (ids[:-1], ids[1:]), 1.0)
    return np.log(counts / counts.sum(axis=1, keepdims=True))


def _weights(s: DecoderShape, text: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    code = rng.standard_normal((s.vocab, s.hidden))
    code -= code.mean(axis=1, keepdims=True)
    code /= code.std(axis=1, keepdims=True)                     # a fixed point of LayerNorm(1, 0)
    code = np.round(code, 4)
    ln = (code - code.mean(axis=1, keepdims=True)) / np.sqrt(code.var(axis=1, keepdims=True) + s.eps)
    target = bigram_log_probs(text, s.vocab)
    target -= target.mean(axis=1, keepdims=True)                # softmax ignores a per-row constant
    head = np.linalg.lstsq(ln, target, rcond=None)[0]           # minimum norm: unique
    w = {"transformer.wte.weight": code, "transformer.wpe.weight": np.zeros((s.context, s.hidden)),
         "onnx::MatMul_2048": np.round(head, 4),
         "transformer.ln_f.weight": np.ones(s.hidden), "transformer.ln_f.bias": np.zeros(s.hidden)}
    for i in range(s.layers):
        p = f"transformer.h.{i}"
        for name, k in (("attn.c_proj", s.hidden), ("mlp.c_proj", s.intermediate)):
            w[f"{p}.{name}.weight"] = np.round(BLOCK_SCALE / math.sqrt(k) * rng.standard_normal((k, s.hidden)), 4)
            w[f"{p}.{name}.bias"] = np.zeros(s.hidden)
    return w


def build_char_gpt2(s: DecoderShape = CHAR_GPT2) -> onnx.ModelProto:
    """The trained character-level decoder (see module docs); optimum's with-past I/O."""
    text, _held = corpus()
    doc = (f"GPT-2-style character-level decoder, trained (closed form, numpy) on the Python Language Reference "
           f"prose in CPython's pydoc_data.topics (PSF License): the LM head holds the maximum-likelihood character "
           f"bigram log-probabilities over seeded zero-mean character codes; small transformer blocks. "
           f"{s.layers} layers, {s.heads} heads of {s.head_dim}, hidden {s.hidden}, vocab {s.vocab} "
           f"(<unk> + {len(ALPHABET)} characters, {TOKENIZER_FILE}), {s.context} positions; optimum I/O names "
           f"(decoder with past). Held-out text: {HELDOUT_FILE}.")
    return build_gpt2_with_past_weights(_weights(s, text), s, doc, seed=SEED)


def tokenizer_json() -> str:
    """HF ``tokenizers`` JSON: lowercase, then one token per character (BPE with no merges), <unk> = 0."""
    vocab = {UNK: 0} | {c: i for c, i in _INDEX.items()}
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": 0, "content": UNK, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True}],
           "normalizer": {"type": "Lowercase"}, "pre_tokenizer": None, "post_processor": None, "decoder": None,
           "model": {"type": "BPE", "dropout": None, "unk_token": UNK, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": []}}
    return json.dumps(tok, indent=1, ensure_ascii=False) + "\n"


def heldout_text(lines: int = HELDOUT_LINES, width: int = LINE_CHARS) -> str:
    """``lines`` lines of held-out prose, each cut at a word boundary to about ``width`` characters."""
    _text, held = corpus()
    out: list[str] = []
    for para in held:
        words, cur = para.split(" "), ""
        for w in words:
            if len(cur) + 1 + len(w) > width and cur:
                out.append(cur)
                cur = ""
            cur = f"{cur} {w}".strip()
        if len(out) >= lines:
            break
    return "\n".join(out[:lines]) + "\n"


if __name__ == "__main__":      # rewrite the committed corpus extract from this interpreter
    write_corpus()
