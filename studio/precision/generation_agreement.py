"""How a reduced-precision decoder agrees with fp32 over a short greedy generation.

For each prompt, fp32 (ONNX Runtime, the original model) generates ``steps`` tokens greedily
with its KV cache (prefill once, then one token per step feeding present -> past); the
candidate is fed the *same* tokens on the same schedule with its own cache (teacher forcing,
so one early difference does not make every later position differ). At every position both
predict the next token: **next-token agreement** is the share of positions where the
candidate's argmax equals fp32's, **KL** the mean of KL(p_fp32 || p_candidate) in nats.
**Perplexity** (fp32's and the candidate's, over the prompt's own next tokens) is computed only
for prompts from a text dataset, and is labelled meaningless when the model carries random
weights (the sample decoders say so in their doc string; a perplexity near the vocabulary size
means the same). Both models run in one sandbox worker through the runner protocol; only
per-position figures come back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from studio.core.engines import RunOptions
from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job
from studio.core.types import np_dtype
from studio.inspect.decoder import DecoderSpec

__all__ = ["GenerationAgreement", "Prompts", "decoder_prompts", "generation_agreement", "has_random_weights",
           "step_feeds"]

MAX_PROMPT_TOKENS = 32


@dataclass(frozen=True)
class Prompts:
    """The prompts a decoder is judged on and where they came from."""

    ids: tuple[tuple[int, ...], ...]
    source: str
    real_text: bool                  # from a text dataset (perplexity means something), not seeded ids


@dataclass(frozen=True)
class GenerationAgreement:
    """A candidate decoder against fp32 over the same greedy generation (see module docs)."""

    next_token_agreement: float
    mean_kl: float
    max_kl: float
    positions: int
    prompts: int
    steps: int
    source: str
    random_weights: bool
    perplexity_fp32: float | None = None
    perplexity: float | None = None
    fp32_tokens: tuple[tuple[int, ...], ...] = ()    # fp32's greedy continuation of each prompt
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        head = "on random weights: " if self.random_weights else ""
        ppl = ""
        if self.perplexity is not None and self.perplexity_fp32 is not None:
            ppl = f", perplexity {self.perplexity:.4g} (fp32 {self.perplexity_fp32:.4g})"
        return (f"{head}next-token agreement {self.next_token_agreement:.4f} over {self.positions} positions "
                f"({self.prompts} prompt(s), {self.steps} greedy steps), mean KL {self.mean_kl:.3g} nats{ppl}")

    def to_dict(self) -> dict:
        return {"summary": self.summary(), "next_token_agreement": round(self.next_token_agreement, 6),
                "mean_kl": float(self.mean_kl), "max_kl": float(self.max_kl), "positions": self.positions,
                "prompts": self.prompts, "steps": self.steps, "source": self.source,
                "random_weights": self.random_weights, "perplexity_fp32": self.perplexity_fp32,
                "perplexity": self.perplexity, "notes": list(self.notes)}


def has_random_weights(model: onnx.ModelProto) -> bool:
    """The model says it carries random weights (the studio's sample decoders do, in their doc string)."""
    text = " ".join([model.doc_string, *(p.value for p in model.metadata_props)]).lower()
    return "random weights" in text or "random-weights" in text


def decoder_prompts(spec: DecoderSpec, *, dataset=None, count: int = 4, length: int = 8, seed: int = 0) -> Prompts:
    """Prompts from a text dataset's evaluation part (token ids, or raw text through its tokenizer.json;
    each cut to ``MAX_PROMPT_TOKENS``), else ``count`` seeded random prompts of ``length`` ids. Ids the
    model's vocabulary cannot hold are refused with both sizes named."""
    if dataset is not None:
        from studio.data.datasets import text_token_ids

        ids = text_token_ids(dataset, part="evaluation", limit=count, key=spec.input_ids or "input_ids")
        if not ids:
            raise StudioError(f"dataset {dataset.name[:40]} has no non-empty text in its evaluation part",
                              code="BAD-INPUT")
        ids = [p[:MAX_PROMPT_TOKENS] for p in ids]
        top = max(max(p) for p in ids)
        if spec.vocab is not None and (top >= spec.vocab or min(min(p) for p in ids) < 0):
            raise StudioError(f"the dataset's token ids do not fit the model: id {top} but the model's vocabulary "
                              f"has {spec.vocab} entries (logits width); use the model's own tokenizer",
                              code="BAD-INPUT")
        return Prompts(tuple(tuple(p) for p in ids), f"dataset {dataset.name[:40]}: {len(ids)} prompt(s)", True)
    vocab = spec.vocab or 100
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(count, length))
    return Prompts(tuple(tuple(int(i) for i in p) for p in ids),
                   f"{count} seeded random prompt(s) of {length} tokens (seed {seed})", False)


# ---------------------------------------------------------------------------- the loop (worker)

def step_feeds(spec: DecoderSpec, dtypes: Mapping[str, str], tokens: Sequence[int], past_len: int,
               past: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """One step's feeds for batch 1: the new ``tokens`` after ``past_len`` cached ones, the mask over all of
    them, their positions, the cache (empty at prefill) and, merged-if, the branch flag."""
    n = len(tokens)
    feeds: dict[str, np.ndarray] = {}

    def put(name: str | None, value: np.ndarray) -> None:
        if name and name in dtypes:
            feeds[name] = value.astype(np_dtype_name(dtypes[name]))

    put(spec.input_ids, np.asarray([tokens]))
    put(spec.attention_mask, np.ones((1, past_len + n)))
    put(spec.position_ids, np.arange(past_len, past_len + n)[None])
    if spec.use_cache_branch:
        put(spec.use_cache_branch, np.asarray(past_len > 0))
    for c in spec.cache:
        if not c.input or c.input not in dtypes:
            continue
        if past is not None and c.input in past:
            feeds[c.input] = past[c.input]
        else:
            shape = [1, c.heads or 1, 0, c.head_dim or 1] if spec.cache_layout == "bnsh" else \
                [1, 0, c.heads or 1, c.head_dim or 1]
            feeds[c.input] = np.zeros(shape, np_dtype_name(dtypes[c.input]))
    return feeds


def np_dtype_name(name: str) -> np.dtype:
    return np.dtype({"float32": np.float32, "float16": np.float16, "int64": np.int64, "int32": np.int32,
                     "bool": np.bool_}.get(name, name))


class _Stepper:
    """One model's cached decoding: feed tokens, get the logits rows of those tokens."""

    def __init__(self, runner, spec: DecoderSpec, dtypes: Mapping[str, str]) -> None:
        self.runner, self.spec, self.dtypes = runner, spec, dtypes
        self.past: dict[str, np.ndarray] | None = None
        self.seen: list[int] = []

    def feed(self, tokens: Sequence[int]) -> np.ndarray:
        spec = self.spec
        if spec.has_past:
            feeds = step_feeds(spec, self.dtypes, tokens, len(self.seen), self.past)
            out = self.runner.infer(feeds)
            self.past = {c.input: np.asarray(out[c.output]) for c in spec.cache if c.input and c.output in out}
            logits = np.asarray(out[spec.logits])[0, -len(tokens):]
        else:                                   # no cache: the whole sequence every step
            feeds = step_feeds(spec, self.dtypes, [*self.seen, *tokens], 0, None)
            logits = np.asarray(self.runner.infer(feeds)[spec.logits])[0, -len(tokens):]
        self.seen.extend(int(t) for t in tokens)
        return logits.astype(np.float64)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@job("precision.generation_agreement")
def generation_agreement_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    from studio.core.engines.sessions import open_runner

    spec = _spec_from(args["spec"])
    dtypes = args["dtypes"]
    steps = int(args["steps"])
    ctx.set_stage("fp32 decoder (ONNX Runtime) for generation agreement")
    ref = open_runner("onnxruntime", args["reference"], {"graph_optimization_level": "all"}, ctx)
    ctx.set_stage(f"candidate decoder ({args['engine']}) for generation agreement")
    cand = open_runner(args["engine"], args["candidate"], args["options"], ctx)
    rows: dict[str, list] = {"ref_top": [], "cand_top": [], "kl": [], "ref_nll": [], "cand_nll": []}
    generated = []
    try:
        for prompt in args["prompts"]:
            a, b = _Stepper(ref, spec, dtypes), _Stepper(cand, spec, dtypes)
            ctx.set_stage("generation agreement: prefill")
            ra, rb = a.feed(prompt), b.feed(prompt)
            la, lb = _log_softmax(ra), _log_softmax(rb)
            nxt = np.asarray(prompt[1:], np.int64)          # the prompt's own next tokens (perplexity)
            rows["ref_nll"].extend((-la[np.arange(len(nxt)), nxt]).tolist())
            rows["cand_nll"].extend((-lb[np.arange(len(nxt)), nxt]).tolist())
            tokens = []
            for step in range(steps):
                rows["ref_top"].extend(la.argmax(-1).tolist())
                rows["cand_top"].extend(lb.argmax(-1).tolist())
                rows["kl"].extend((np.exp(la) * (la - lb)).sum(-1).tolist())
                tok = int(la[-1].argmax())
                tokens.append(tok)
                if step == steps - 1:
                    break
                ctx.set_stage(f"generation agreement: decode step {step + 1}")
                la, lb = _log_softmax(a.feed([tok])), _log_softmax(b.feed([tok]))
            generated.append(tokens)
    finally:
        ref.close()
        cand.close()
    return JobOutput(data={"generated": generated, "details": {k: v for k, v in cand.details.items()
                                                               if isinstance(v, (str, int, float, bool))}},
                     arrays={k: np.asarray(v) for k, v in rows.items()})


def _spec_from(d: Mapping[str, Any]) -> DecoderSpec:
    """The DecoderSpec fields the loop uses, rebuilt in the worker from JSON."""
    from studio.inspect.decoder_cache import CacheEntry

    cache = tuple(CacheEntry(c["layer"], c["kind"], c["input"], c["output"], c["heads"], c["head_dim"], c["dtype"],
                             None, None) for c in d["cache"])
    fields = {k: d.get(k) for k in DecoderSpec.__dataclass_fields__}
    fields.update(cache=cache, runtime=None, facts=(), notes=())
    return DecoderSpec(**fields)


def generation_agreement(reference: Path, candidate: Path, spec: DecoderSpec, prompts: Prompts, *,
                         engine: str = "onnxruntime", options: RunOptions | None = None, steps: int = 8,
                         random_weights: bool = False, limits: Limits | None = None,
                         pool_key: str = "default") -> GenerationAgreement:
    """Next-token agreement and KL of ``candidate`` (on ``engine``) against fp32 ``reference`` on ONNX Runtime
    over ``steps`` greedy tokens after each prompt (see module docs)."""
    if spec.logits is None or spec.input_ids is None:
        raise StudioError("generation agreement needs a decoder with input ids and logits", code="BAD-INPUT")
    if steps < 1:
        raise StudioError(f"steps must be at least 1, got {steps}", code="BAD-OPTION")
    longest = max(len(p) for p in prompts.ids)
    if spec.context and longest + steps > spec.context:
        raise StudioError(f"prompt ({longest} tokens) plus {steps} steps exceeds the model's context of "
                          f"{spec.context} positions", code="BAD-OPTION")
    header = onnx.load_model(str(reference), load_external_data=False)
    inits = {t.name for t in header.graph.initializer}
    dtypes = {i.name: np_dtype(i.type.tensor_type.elem_type).name for i in header.graph.input if i.name not in inits}
    d = spec.to_dict()
    args = {"reference": str(Path(reference).resolve()), "candidate": str(Path(candidate).resolve()), "engine": engine,
            "options": (options or RunOptions()).to_args(), "prompts": [list(p) for p in prompts.ids],
            "steps": int(steps), "dtypes": dtypes,
            "spec": {**{k: d[k] for k in ("convention", "layers", "heads", "kv_heads", "head_dim", "value_head_dim",
                                          "hidden", "vocab", "context", "kv_dtype", "input_ids", "attention_mask",
                                          "position_ids", "use_cache_branch", "logits", "past_length_dim",
                                          "cache_layout", "attention", "positions", "norm", "weights")},
                     "cache": [{k: c[k] for k in ("layer", "kind", "input", "output", "heads", "head_dim", "dtype")}
                               for c in d["cache"]]}}
    res = run_job("precision.generation_agreement", args, stage="generation agreement", limits=limits,
                  pool_key=pool_key)
    a = res.arrays
    agree = float(np.mean(a["ref_top"] == a["cand_top"]))
    kl = np.maximum(np.asarray(a["kl"], np.float64), 0.0)
    notes = []
    ppl_ref = ppl = None
    if prompts.real_text and len(a["ref_nll"]):
        ppl_ref, ppl = float(np.exp(np.mean(a["ref_nll"]))), float(np.exp(np.mean(a["cand_nll"])))
        if random_weights or (spec.vocab and ppl_ref > 0.5 * spec.vocab):
            notes.append(f"perplexity {ppl_ref:.4g} on {spec.vocab} tokens: the model is untrained (random "
                         "weights), so perplexity says nothing about quality; agreement with fp32 still does")
    if random_weights:
        notes.append("random weights: agreement and KL measure the quantization error, not a model's quality")
    return GenerationAgreement(agree, float(kl.mean()), float(kl.max()), int(len(kl)), len(prompts.ids), steps,
                               prompts.source, random_weights, ppl_ref, ppl,
                               tuple(tuple(int(t) for t in g) for g in res.data["generated"]), tuple(notes))
